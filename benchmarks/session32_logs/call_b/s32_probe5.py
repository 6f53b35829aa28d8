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

@case("edge values: cast chains, NaN argmax, nan_to_num, isinf, abs")
def _():
    class M(nn.Module):
        def forward(self, x, logits):
            fake_quant = x.half().float() * 2 + x.bfloat16().float()
            guarded = torch.nan_to_num(logits, nan=0.0) + torch.isinf(logits).float()
            return fake_quant, logits.argmax(-1), logits.max(-1)[1], guarded, x.abs(), x ** 0.5
    c = torch.compile(M(), backend="grove"); worst = 0
    for i in range(4):
        x = torch.tensor([70000.0, 1e-8, -3.1415926, NAN, INF, -INF, -0.0, 2.5], device=D) * (i + 1)
        logits = torch.randn(3, 50, device=D); logits[0, 7] = NAN; logits[2, 40] = NAN; logits[1, 3] = INF
        got, want = c(x, logits), M()(x, logits)
        for g, w in zip(got, want):
            worst = max(worst, rel(g, w) if g.is_floating_point() else float(not torch.equal(g, w)))
    return worst

@case("empty batch (batch 4, then 0, then 4)")
def _():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.Softmax(-1)).to(D).eval()
    c = torch.compile(m, backend="grove"); worst = 0
    with torch.no_grad():
        for b in (4, 0, 4, 0, 2):
            x = torch.randn(b, 16, device=D)
            y = c(x); assert y.shape == (b, 8), y.shape
            worst = max(worst, rel(y, m(x)))
            s = torch.compile(lambda t: t.sum(0) + t.mean(0), backend="grove")(x)
            worst = max(worst, rel(s, x.sum(0) + x.mean(0)))
    return worst

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

@case("batch sizes changing 8,1,8,3,5 (automatic dynamic): resnet18 eval and bert")
def _():
    import torchvision
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    r = torchvision.models.resnet18(num_classes=10).to(D).eval(); cr = torch.compile(r, backend="grove")
    b = BertModel(BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, vocab_size=500)).to(D).eval()
    cb = torch.compile(b, backend="grove"); worst = 0
    with torch.no_grad():
        for n in (8, 1, 8, 3, 5):
            x = torch.randn(n, 3, 64, 64, device=D); worst = max(worst, rel(cr(x), r(x)))
            ids = torch.randint(0, 500, (n, 16), device=D); mask = torch.ones_like(ids); mask[:, 12:] = 0
            worst = max(worst, rel(cb(ids, attention_mask=mask).last_hidden_state, b(ids, attention_mask=mask).last_hidden_state))
    return worst

print("==== summary")
for r in results: print(r)
