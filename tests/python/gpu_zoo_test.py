"""Real models through torch.compile(backend="grove") on a GPU host: small
configs with random weights (nothing downloads) of Hugging Face GPT-2, LLaMA
(grouped-query attention, rotary embedding), BERT with a padding mask, BART
(encoder-decoder), timm ViT and MLP-Mixer and torchvision ResNet-18, in f32 and bf16, in
both modes. Every call of every phase (warm-up, recording, three replays) is
compared with eager PyTorch on the same inputs: f32 within 2e-3 of the
reference's largest magnitude (TF32 off on both sides), bf16 within 4e-2
(bf16 keeps 8 bits; grove and PyTorch round intermediates at different
places). grove's cudagraphs mode equals its eager mode bitwise on each call.
Each model's split (the ops left to PyTorch) is printed. Skips without CUDA,
dynamo, or the library a model comes from (it says which).

The CI counterpart (plain-PyTorch models of the same architectures on sim)
is importer_test's RealArchitectureTest."""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import junit_main  # noqa: E402

from torch_features import HAS_CUDA, HAS_DYNAMO  # noqa: E402

TOLERANCE = {torch.float32: 2e-3, torch.bfloat16: 4e-2}
CALLS = 5  # warm-up, recording, three replays


class Wrapped(torch.nn.Module):
    """A model called as fn(*tensors) -> one tensor."""

    def __init__(self, model, pick):
        super().__init__()
        self.model = model
        self.pick = pick

    def forward(self, *args):
        return self.pick(self.model, *args)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_embd=256, n_layer=2, n_head=4, vocab_size=1000,
                                       n_positions=128, resid_pdrop=0, embd_pdrop=0,
                                       attn_pdrop=0))
    ids = torch.randint(0, 1000, (2, 32))
    return Wrapped(model, lambda m, x: m(input_ids=x, use_cache=False).logits), (ids,)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(hidden_size=256, intermediate_size=688,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, vocab_size=1000,
                                         max_position_embeddings=128))
    ids = torch.randint(0, 1000, (1, 32))
    return Wrapped(model, lambda m, x: m(input_ids=x, use_cache=False).logits), (ids,)


def bert():
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=1024, vocab_size=1000, hidden_dropout_prob=0,
                                 attention_probs_dropout_prob=0), add_pooling_layer=False)
    ids = torch.randint(0, 1000, (2, 24))
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, 17:] = 0  # the second sequence is padded
    return (Wrapped(model, lambda m, x, a: m(input_ids=x, attention_mask=a).last_hidden_state),
            (ids, mask))


def bart():
    from transformers import BartConfig, BartModel

    model = BartModel(BartConfig(d_model=128, encoder_layers=2, decoder_layers=2,
                                 encoder_attention_heads=4, decoder_attention_heads=4,
                                 encoder_ffn_dim=256, decoder_ffn_dim=256, vocab_size=1000,
                                 max_position_embeddings=128, dropout=0, attention_dropout=0,
                                 activation_dropout=0))
    ids = torch.randint(3, 1000, (2, 20))
    decoder_ids = torch.randint(3, 1000, (2, 12))
    return (Wrapped(model, lambda m, x, d: m(input_ids=x, decoder_input_ids=d,
                                             use_cache=False).last_hidden_state),
            (ids, decoder_ids))


def vit():
    import timm

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64,
                              num_classes=10)
    return Wrapped(model, lambda m, x: m(x)), (torch.randn(2, 3, 64, 64),)


def resnet18():
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    return Wrapped(model, lambda m, x: m(x)), (torch.randn(1, 3, 64, 64),)


def mlp_mixer():
    import timm

    model = timm.create_model("mixer_s16_224", pretrained=False, img_size=64, num_classes=10)
    # timm starts the classifier at zero; random weights there, so the output says something.
    torch.nn.init.normal_(model.head.weight, std=0.02)
    torch.nn.init.normal_(model.head.bias, std=0.02)
    # Batch 1: token mixing's GEMMs of 512 rows over 16 tokens (the tiny-K kernel,
    # fc1, and the transposed small-M kernel, fc2, where they measure faster) and
    # channel mixing's 16-row GEMMs (small-M, column tiles).
    return Wrapped(model, lambda m, x: m(x)), (torch.randn(1, 3, 64, 64),)


MODELS = [("gpt2", gpt2, "transformers"), ("llama", llama, "transformers"),
          ("bert", bert, "transformers"), ("bart", bart, "transformers"),
          ("vit", vit, "timm"), ("resnet18", resnet18, "torchvision"),
          ("mlp_mixer", mlp_mixer, "timm")]


def build(make, dtype):
    torch.manual_seed(0)
    module, inputs = make()
    module = module.cuda().eval().to(dtype)
    inputs = tuple(value.cuda().to(dtype) if value.is_floating_point() else value.cuda()
                   for value in inputs)
    return module, inputs


def relative_error(result, expected):
    scale = expected.float().abs().max().item() or 1.0
    return (result.float() - expected.float()).abs().max().item() / scale


@unittest.skipUnless(HAS_CUDA, "no CUDA device")
@unittest.skipUnless(HAS_DYNAMO, "this PyTorch has no torch._dynamo")
class GpuZooTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def run_mode(self, module, inputs, mode):
        import grove.torch

        torch._dynamo.reset()
        compiled = torch.compile(module, backend="grove", options={"mode": mode}, dynamic=False)
        results = []
        with torch.no_grad():
            for _ in range(CALLS):
                results.append(compiled(*inputs).clone())
        torch.cuda.synchronize()
        unsupported = set()
        for graph in grove.torch.compiled_graphs():
            unsupported |= {op for _, op, _ in graph.unsupported}
        return results, unsupported

    def check(self, name, make, library, dtype):
        try:
            __import__(library)
        except ImportError:
            self.skipTest("%s is not installed" % library)
        module, inputs = build(make, dtype)
        with torch.no_grad():
            expected = module(*inputs).clone()
        tolerance = TOLERANCE[dtype]
        outputs = {}
        for mode in ("eager", "cudagraphs"):
            results, unsupported = self.run_mode(module, inputs, mode)
            for call, result in enumerate(results):
                error = relative_error(result, expected)
                self.assertLessEqual(error, tolerance, "%s %s %s call %d: error %.3g relative to "
                                     "the largest output" % (name, dtype, mode, call, error))
            outputs[mode] = results
            print("%s %s %s: ops run in PyTorch: %s" % (name, dtype, mode,
                                                        sorted(unsupported) or "none"))
        for call, (graphs, eager) in enumerate(zip(outputs["cudagraphs"], outputs["eager"])):
            self.assertTrue(torch.equal(graphs, eager),
                            "%s %s call %d: cudagraphs differs from grove eager" % (name, dtype,
                                                                                   call))


def _add_cases():
    for name, make, library in MODELS:
        for dtype in (torch.float32, torch.bfloat16):
            def case(self, name=name, make=make, library=library, dtype=dtype):
                self.check(name, make, library, dtype)
            case.__name__ = "test_%s_%s" % (name, str(dtype).split(".")[-1])
            setattr(GpuZooTest, case.__name__, case)


_add_cases()

if __name__ == "__main__":
    junit_main.main()
