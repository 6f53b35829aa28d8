"""Session 32: a new user's cases at the edges, through backend="grove" on cuda: edge values,
empty batches, double precision, weights loaded in place, reused input buffers, HF's default
generate (dynamic cache), other decoders' static-cache generate, counters and EMA buffers,
parameter views as outputs, batch sizes changing (automatic dynamic shapes)."""
import copy, traceback, warnings
import torch, torch.nn as nn, torch.nn.functional as F
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

@case("torch.cond inside a compiled function")
def _():
    def f(x, w):
        y = x @ w
        return torch.cond(y.sum() > 0, lambda t: t.tanh() * 2, lambda t: t.relu() - 1, (y,))
    c = torch.compile(f, backend="grove"); worst = 0
    w = torch.randn(8, 8, device=D)
    for i in range(6):
        x = torch.randn(4, 8, device=D) * (1 if i % 2 else -1)
        worst = max(worst, rel(c(x, w), f(x, w)))
    return worst

@case("a custom op (torch.library.custom_op) inside the model")
def _():
    @torch.library.custom_op("s32probe::scaled_sin", mutates_args=())
    def scaled_sin(x: torch.Tensor, s: float) -> torch.Tensor:
        return torch.sin(x) * s
    @scaled_sin.register_fake
    def _(x, s):
        return torch.empty_like(x)
    m = nn.Sequential(nn.Linear(8, 8)).to(D)
    def f(x): return scaled_sin(m(x), 3.0).sum(-1)
    c = torch.compile(f, backend="grove"); worst = 0
    with torch.no_grad():
        for i in range(4):
            x = torch.randn(5, 8, device=D); worst = max(worst, rel(c(x), f(x)))
    return worst

@case("hooks, nested compiled modules, functional_call and vmap")
def _():
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)).to(D)
    cinner = torch.compile(inner, backend="grove")
    seen = []
    inner.register_forward_hook(lambda mod, inp, out: seen.append(out.shape))
    outer = nn.Linear(8, 4).to(D)
    def f(x):
        h = cinner(x)
        params = {k: v * 1.0 for k, v in outer.named_parameters()}
        y = torch.func.functional_call(outer, params, (h,))
        return torch.vmap(lambda r: r.softmax(-1) * r.sum())(y)
    c = torch.compile(f, backend="grove"); worst = 0
    with torch.no_grad():
        for i in range(4):
            x = torch.randn(6, 8, device=D)
            def ref(x):
                h = inner(x); y = outer(h)
                return torch.stack([r.softmax(-1) * r.sum() for r in y])
            worst = max(worst, rel(c(x), ref(x)))
    assert seen, "the forward hook did not run"
    return worst

@case("grove eager mode through the door (options mode=eager)")
def _():
    m = llama(); c = torch.compile(m, backend="grove", options={"mode": "eager"}); worst = 0
    with torch.no_grad():
        for n in (8, 8, 8, 12):
            ids = torch.randint(3, 500, (1, n), device=D); worst = max(worst, rel(c(ids).logits, m(ids).logits))
    return worst

@case("40 sequence lengths through BERT (automatic dynamic): answers and compile time")
def _():
    import time
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    b = BertModel(BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, vocab_size=500)).to(D).eval()
    c = torch.compile(b, backend="grove"); worst = 0
    start = time.perf_counter(); times = []
    with torch.no_grad():
        for n in range(8, 48):
            ids = torch.randint(0, 500, (2, n), device=D)
            t0 = time.perf_counter(); out = c(ids).last_hidden_state; torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
            worst = max(worst, rel(out, b(ids).last_hidden_state))
    print("  40 lengths in %.1f s; first call per length: median %.3f s, max %.3f s; GPU memory %.0f MiB" % (
        time.perf_counter() - start, sorted(times)[20], max(times), torch.cuda.memory_allocated() / 2**20))
    return worst

print("==== summary")
for r in results: print(r)
