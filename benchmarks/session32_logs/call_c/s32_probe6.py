"""Session 32: a new user's cases at the edges, through backend="grove" on cuda: edge values,
empty batches, double precision, weights loaded in place, reused input buffers, HF's default
generate (dynamic cache), other decoders' static-cache generate, counters and EMA buffers,
parameter views as outputs, batch sizes changing (automatic dynamic shapes)."""
import copy, traceback, warnings
import torch, torch.nn as nn
warnings.filterwarnings("ignore")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
import grove.torch  # noqa: F401
from grove import dynamo_backend
D = "cuda"
results = []
in_pytorch = []
_orig = dynamo_backend.GraphInPyTorch.__init__
def _spy(self, gm, reason):
    in_pytorch.append(reason[:160]); _orig(self, gm, reason)
dynamo_backend.GraphInPyTorch.__init__ = _spy
NAN, INF = float("nan"), float("inf")
def rel(a, b):
    a, b = a.float(), b.float()
    if a.shape != b.shape: return float("inf")
    same_nan = torch.equal(a.isnan(), b.isnan())
    if not same_nan: return float("inf")
    a, b = a.nan_to_num(0.0, 1e30, -1e30), b.nan_to_num(0.0, 1e30, -1e30)
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-6)).item() if a.numel() else 0.0
def case(name):
    def wrap(fn):
        torch._dynamo.reset(); in_pytorch.clear()
        try:
            worst = fn()
            results.append((name, "ok" if worst < 2e-3 else "DIFF", worst, list(in_pytorch)))
            import collections
            left = collections.Counter((op, str(reason)[:90]) for g in grove.torch.compiled_graphs() for (_, op, reason) in getattr(g, "unsupported", []))
            print("  graphs %d; ops left to PyTorch: %s" % (len(grove.torch.compiled_graphs()), dict(left)), flush=True)
        except Exception as error:
            results.append((name, "ERROR", "%s: %s" % (type(error).__name__, str(error).splitlines()[0][:300] if str(error) else ""), list(in_pytorch)))
            traceback.print_exc()
        print(results[-1], flush=True)
    return wrap
def llama(**kw):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=500, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2, **kw)).to(D).eval()

@case("HF default generate (dynamic cache), greedy, compiled forward: llama and gpt2")
def _():
    from transformers import GPT2Config, GPT2LMHeadModel
    worst = 0
    torch.manual_seed(0)
    g = GPT2LMHeadModel(GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=500, n_positions=256,
                                   bos_token_id=1, eos_token_id=2, pad_token_id=0)).to(D).eval()
    for m in (llama(), g):
        r = copy.deepcopy(m); m.forward = torch.compile(m.forward, backend="grove")
        for n in (10, 13):
            ids = torch.randint(3, 500, (2, n), device=D)
            a = m.generate(ids, max_new_tokens=24, do_sample=False, min_new_tokens=24)
            b = r.generate(ids, max_new_tokens=24, do_sample=False, min_new_tokens=24)
            worst = max(worst, 0.0 if torch.equal(a, b) else 1.0)
    print("  graphs in PyTorch whole:", len(in_pytorch), "compiled graphs:", len(grove.torch.compiled_graphs()))
    return worst

@case("static-cache generate: qwen2, mistral, gemma (other decoders)")
def _():
    import transformers as T
    worst = 0
    common = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=500, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    for config, cls, extra in (("Qwen2Config", "Qwen2ForCausalLM", {}), ("MistralConfig", "MistralForCausalLM", {"sliding_window": 16}),
                               ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 32})):
        torch.manual_seed(0)
        m = getattr(T, cls)(getattr(T, config)(**common, **extra)).to(D).eval()
        r = copy.deepcopy(m); m.forward = torch.compile(m.forward, backend="grove")
        ids = torch.randint(3, 500, (1, 9), device=D)
        a = m.generate(ids, max_new_tokens=20, min_new_tokens=20, do_sample=False, cache_implementation="static")
        b = r.generate(ids, max_new_tokens=20, min_new_tokens=20, do_sample=False, cache_implementation="static")
        same = torch.equal(a, b); print("  ", cls, "tokens equal:", same)
        worst = max(worst, 0.0 if same else 1.0)
    return worst

print("==== summary")
for r in results: print(r)
