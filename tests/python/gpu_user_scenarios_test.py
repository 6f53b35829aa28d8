"""A new user's ways of calling torch.compile(backend="grove") on cuda, each
against eager PyTorch (session 31's probes, kept): inference under
inference_mode, half precision and autocast, channels_last weights, CPU
scalars beside CUDA tensors, outputs that alias inputs, side streams, two
threads, dynamic shapes, nested outputs, generate with sampling; training
with frozen layers, LoRA, activation checkpointing, a smaller last batch,
tied embeddings with gradient accumulation, a compiled loss function and a
retained graph. f32 with TF32 off: outputs within 2e-3 of eager relative to
their largest element (half precision 8 times that). Skips without CUDA or
without torch._dynamo."""
import copy
import os
import sys
import threading
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import junit_main  # noqa: E402
from lockstep_training import step_in_lockstep  # noqa: E402
from torch_features import HAS_CUDA, HAS_DYNAMO  # noqa: E402

TOLERANCE = 2e-3
HALF = 8 * TOLERANCE
D = "cuda"


def relative(actual, expected):
    actual, expected = actual.float(), expected.float()
    return ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-6)).item()


def compiled(module, **options):
    import grove.torch  # noqa: F401 (registers the backend)

    torch._dynamo.reset()
    return torch.compile(module, backend="grove", **options)


def llama(**config):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=500, max_position_embeddings=256, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, **config)).to(D).eval()


def _has_transformers():
    try:
        import transformers  # noqa: F401
        return True
    except ImportError:
        return False


@unittest.skipUnless(HAS_CUDA, "no CUDA device")
@unittest.skipUnless(HAS_DYNAMO, "this PyTorch has no torch._dynamo")
class GpuInferenceScenariosTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def assertClose(self, actual, expected, bound=TOLERANCE, label=""):
        error = relative(actual, expected)
        self.assertLess(error, bound, "%s: %.3g relative" % (label, error))

    @unittest.skipUnless(_has_transformers(), "transformers is not installed")
    def test_inference_mode_and_bf16_over_sequence_lengths(self):
        model = llama()
        run = compiled(model)
        with torch.inference_mode():
            for call in range(3):
                ids = torch.randint(0, 500, (2, 16), device=D)
                self.assertClose(run(ids).logits, model(ids).logits, label="call %d" % call)
        model = llama().to(torch.bfloat16)
        run = compiled(model)
        with torch.no_grad():
            for length in (16, 32, 17, 64, 16):
                ids = torch.randint(0, 500, (1, length), device=D)
                self.assertClose(run(ids).logits, model(ids).logits, HALF, "bf16 %d" % length)

    def test_channels_last_convolutions_under_autocast(self):
        # Note [Static inputs in a permuted layout] (grove/parameter_views.py).
        import torchvision

        torch.manual_seed(0)
        model = torchvision.models.resnet18().to(D).eval().to(memory_format=torch.channels_last)
        run = compiled(model)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for call in range(3):
                x = torch.randn(2, 3, 64, 64, device=D).to(memory_format=torch.channels_last)
                self.assertClose(run(x), model(x), HALF, "call %d" % call)

    def test_outputs_that_alias_an_updated_input(self):
        # Note [Outputs that alias inputs] (grove/input_aliases.py).
        def update(x, y):
            x.add_(y)
            return x[1:], (x * 2).t()

        run = compiled(update)
        with torch.no_grad():
            for call in range(3):
                x, y = torch.randn(6, 5, device=D), torch.randn(6, 5, device=D)
                mine = x.clone()
                got, expected = run(mine, y), update(x, y)
                for value, want in zip(got, expected):
                    self.assertClose(value, want, label="call %d" % call)
                got[0].fill_(3.0)
                expected[0].fill_(3.0)
                self.assertClose(mine, x, label="written through, call %d" % call)

    def test_a_cpu_scalar_and_strided_integer_and_bool_inputs(self):
        # Note [Host tensors passed to a device graph] (grove/dynamo_backend.py).
        def picked(x, index, mask, scale, shift):
            return (x.t() @ x)[index].masked_fill(mask, 0.0) * scale + shift

        run = compiled(picked)
        with torch.no_grad():
            for call in range(3):
                x = torch.randn(6, 8, device=D).t()  # strided
                index = torch.randint(0, 6, (5,), device=D)
                mask = torch.rand(5, 6, device=D) > 0.5
                scale, shift = torch.tensor(1.5, device=D), torch.tensor(float(call))  # shift on the CPU
                self.assertClose(run(x, index, mask, scale, shift),
                                 picked(x, index, mask, scale, shift), label="call %d" % call)

    @unittest.skipUnless(_has_transformers(), "transformers is not installed")
    def test_side_stream_and_two_threads(self):
        model = llama()
        run = compiled(model)
        ids = [torch.randint(0, 500, (1, 16), device=D) for _ in range(2)]
        with torch.no_grad():
            expected = [model(i).logits.clone() for i in ids]
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                on_side = run(ids[0]).logits.clone()
            torch.cuda.current_stream().wait_stream(stream)
            self.assertClose(on_side, expected[0], label="side stream")
        errors, worst = [], [0.0]

        def work(k):
            try:
                with torch.no_grad():
                    for _ in range(10):
                        out = run(ids[k]).logits.clone()
                        torch.cuda.current_stream().synchronize()
                        worst[0] = max(worst[0], relative(out, expected[k]))
            except Exception as error:  # reported below
                errors.append(repr(error))

        threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])
        self.assertLess(worst[0], TOLERANCE)

    @unittest.skipUnless(_has_transformers(), "transformers is not installed")
    def test_dynamic_shapes_and_nested_outputs(self):
        import grove.torch

        model = llama()
        run = compiled(model, dynamic=True)
        before = set(map(id, grove.torch.compiled_graphs()))
        with torch.no_grad():
            for length in (7, 33, 70, 7):
                ids = torch.randint(0, 500, (2, length), device=D)
                self.assertClose(run(ids).logits, model(ids).logits, label="length %d" % length)
        # Note [Host scalars specialized per value]: no graph left to PyTorch
        # whole for the Python floats dynamo passes as 0-d tensors.
        whole = [graph.unsupported for graph in grove.torch.compiled_graphs()
                 if id(graph) not in before
                 and any(op == "the whole graph" for _, op, _ in graph.unsupported)]
        self.assertEqual(whole, [])

        class Nested(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(8, 8)

            def forward(self, x):
                y = self.linear(x)
                return {"a": (y, (y.relu(), None)), "b": [y.sum(), 3]}

        torch.manual_seed(0)
        module = Nested().to(D)
        run = compiled(module)
        with torch.no_grad():
            x = torch.randn(4, 8, device=D)
            got, want = run(x), module(x)
        self.assertIsNone(got["a"][1][1])
        self.assertEqual(got["b"][1], 3)
        self.assertClose(got["a"][1][0], want["a"][1][0])
        self.assertClose(got["b"][0], want["b"][0])

    @unittest.skipUnless(_has_transformers(), "transformers is not installed")
    def test_static_cache_generate_with_sampling_draws_eagers_tokens(self):
        model = llama()
        reference = copy.deepcopy(model)
        model.forward = compiled(model.forward)
        ids = torch.randint(3, 500, (1, 10), device=D)
        tokens = []
        for which in (model, reference, model):
            torch.manual_seed(11)
            tokens.append(which.generate(ids, do_sample=True, top_p=0.9, temperature=0.8,
                                         max_new_tokens=16, cache_implementation="static"))
        self.assertTrue(torch.equal(tokens[0], tokens[1]))
        self.assertTrue(torch.equal(tokens[2], tokens[1]))

    @unittest.skipUnless(_has_transformers(), "transformers is not installed")
    def test_a_growing_cache_is_refused_naming_the_static_cache(self):
        # Note [Outputs taken back after their generation]
        # (grove/dynamo_backend.py): the default cache concatenates each
        # step's keys in a compiled call and hands them to the next one.
        import grove

        model = llama()
        model.forward = compiled(model.forward)
        ids = torch.randint(3, 500, (2, 10), device=D)
        # The first generate meets every length once (warm-ups, whose outputs
        # leave the pool); a second one replays them.
        with self.assertRaisesRegex(grove.StaleOutputError,
                                    'reduce-overhead mode.*cache_implementation="static"'):
            for _ in range(3):
                model.generate(ids, max_new_tokens=24, min_new_tokens=24, do_sample=False)
        # The same model with a static cache runs.
        tokens = model.generate(ids, max_new_tokens=8, do_sample=False,
                                cache_implementation="static")
        self.assertEqual(tuple(tokens.shape), (2, 18))


def _train_pair(test, make, steps, batch, loss_of, optimizer=None, bound=TOLERANCE):
    """Trains `make()` through the door and a copy eagerly, step by step; the
    losses and, at the end, every parameter and float buffer agree."""
    optimizer = optimizer or (lambda params: torch.optim.SGD(params, lr=0.05))
    torch.manual_seed(0)
    model = make().to(D)
    reference = copy.deepcopy(model)
    run = compiled(model)
    optimizers = [optimizer([p for p in m.parameters() if p.requires_grad])
                  for m in (model, reference)]
    for step in range(steps):
        inputs = batch(step)
        losses = step_in_lockstep((run, reference), optimizers,
                                  lambda call: loss_of(call, inputs))
        error = relative(losses[0], losses[1])
        test.assertLess(error, bound, "step %d loss: %.3g" % (step, error))
    for (name, mine), theirs in zip(model.named_parameters(), reference.parameters()):
        error = relative(mine, theirs)
        test.assertLess(error, bound, "%s: %.3g" % (name, error))
    for (name, mine), theirs in zip(model.named_buffers(), reference.buffers()):
        if mine.is_floating_point():
            test.assertLess(relative(mine, theirs), bound, name)


class _Lora(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = nn.Linear(64, 64)
        self.base.requires_grad_(False)
        self.a = nn.Parameter(torch.randn(8, 64) * 0.01)
        self.b = nn.Parameter(torch.zeros(64, 8))
        self.out = nn.Linear(64, 3)

    def forward(self, x):
        return self.out(F.gelu(self.base(x) + x @ self.a.t() @ self.b.t() * 2.0))


class _Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 128), nn.GELU(),
                                                  nn.Linear(128, 64)) for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = x + torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        return x.mean()


@unittest.skipUnless(HAS_CUDA, "no CUDA device")
@unittest.skipUnless(HAS_DYNAMO, "this PyTorch has no torch._dynamo")
class GpuTrainingScenariosTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def test_channels_last_convolutions_with_batch_norm(self):
        def make():
            return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                 nn.Conv2d(16, 8, 3, stride=2), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)
                                 ).to(memory_format=torch.channels_last)

        _train_pair(self, make, 3,
                    lambda s: (torch.randn(16, 3, 32, 32, device=D).to(
                        memory_format=torch.channels_last), torch.randint(0, 4, (16,), device=D)),
                    lambda call, b: F.cross_entropy(call(b[0]), b[1]),
                    optimizer=lambda params: torch.optim.SGD(params, lr=0.01))

    def test_frozen_layers_and_lora_adapters(self):
        def frozen():
            model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                  nn.Linear(64, 5))
            for parameter in list(model.parameters())[:4]:
                parameter.requires_grad_(False)
            return model

        _train_pair(self, frozen, 4, lambda s: (torch.randn(16, 32, device=D),
                                                torch.randint(0, 5, (16,), device=D)),
                    lambda call, b: F.cross_entropy(call(b[0]), b[1]))
        _train_pair(self, _Lora, 4, lambda s: (torch.randn(16, 64, device=D),
                                               torch.randint(0, 3, (16,), device=D)),
                    lambda call, b: F.cross_entropy(call(b[0]), b[1]),
                    optimizer=lambda params: torch.optim.AdamW(params, lr=1e-2))

    def test_checkpointing_and_a_smaller_last_batch(self):
        _train_pair(self, _Checkpointed, 3, lambda s: (torch.randn(8, 64, device=D),),
                    lambda call, b: call(b[0]))
        sizes = [16, 16, 5, 16]
        _train_pair(self, lambda: nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4)),
                    4, lambda s: (torch.randn(sizes[s], 32, device=D),
                                  torch.randint(0, 4, (sizes[s],), device=D)),
                    lambda call, b: F.cross_entropy(call(b[0]), b[1]))

    @unittest.skipUnless(_has_transformers(), "transformers is not installed")
    def test_tied_embeddings_param_groups_and_accumulation(self):
        # SGD: AdamW turns the attention key bias's gradient, rounding noise
        # of either sign in eager and grove alike, into whole steps.
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=500,
                                           n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                           attn_pdrop=0.0)).to(D).train()
        reference = copy.deepcopy(model)
        run = compiled(model)

        def groups(which):
            named = list(which.named_parameters())
            return torch.optim.SGD([
                {"params": [p for _, p in named if p.dim() >= 2], "weight_decay": 0.1},
                {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}], lr=0.01)

        optimizers = [groups(model), groups(reference)]
        for step in range(3):
            for optimizer in optimizers:
                optimizer.zero_grad()
            for micro in range(2):
                ids = torch.randint(0, 500, (2, 16), device=D)
                mine = run(input_ids=ids, labels=ids).loss / 2
                mine.backward()
                theirs = reference(input_ids=ids, labels=ids).loss / 2
                theirs.backward()
                self.assertLess(relative(mine.detach(), theirs.detach()), TOLERANCE)
            for optimizer in optimizers:
                optimizer.step()
        for (name, mine), theirs in zip(model.named_parameters(), reference.parameters()):
            self.assertLess(relative(mine, theirs), TOLERANCE, name)

    def test_a_compiled_loss_function_and_a_retained_graph(self):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4)).to(D)
        reference = copy.deepcopy(model)

        def step_loss(which, x, y):
            return F.cross_entropy(which(x), y, label_smoothing=0.1)

        run = compiled(step_loss)
        for step in range(3):
            x, y = torch.randn(8, 32, device=D), torch.randint(0, 4, (8,), device=D)
            for function, which in ((run, model), (step_loss, reference)):
                which.zero_grad()
                loss = function(which, x, y)
                loss.backward(retain_graph=True)
                (2 * loss).backward()
            for mine, theirs in zip(model.parameters(), reference.parameters()):
                self.assertLess(relative(mine.grad, theirs.grad), TOLERANCE, "step %d" % step)
            with torch.no_grad():
                for which in (model, reference):
                    for parameter in which.parameters():
                        parameter -= 0.1 * parameter.grad


if __name__ == "__main__":
    junit_main.main()
