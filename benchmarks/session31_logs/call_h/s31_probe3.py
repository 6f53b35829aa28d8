"""Session 31: more of a new user's inference scenarios through backend="grove" on cuda."""
import copy, threading, traceback, warnings
import torch, torch.nn as nn, torch.nn.functional as F
warnings.filterwarnings("ignore")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
import grove.torch  # noqa: F401
from transformers import (LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration,
                          BertConfig, BertForSequenceClassification)
D = "cuda"
results = []
def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-6)).item()
def case(name):
    def wrap(fn):
        torch._dynamo.reset()
        try:
            worst = fn()
            results.append((name, "ok" if worst < 2e-3 else "DIFF", worst))
        except Exception as error:
            results.append((name, "ERROR", "%s: %s" % (type(error).__name__, str(error).splitlines()[0][:220] if str(error) else "")))
            traceback.print_exc()
        print(results[-1], flush=True)
    return wrap
def llama(**kw):
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=500, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2, **kw)).to(D).eval()

@case("static-cache generate with sampling (top_p), compiled forward")
def _():
    m = llama(); r = copy.deepcopy(m); m.forward = torch.compile(m.forward, backend="grove")
    ids = torch.randint(3, 500, (1, 10), device=D); outs = []
    for model in (m, r, m):
        torch.manual_seed(11)
        outs.append(model.generate(ids, do_sample=True, top_p=0.9, temperature=0.8, max_new_tokens=20,
                                   cache_implementation="static"))
    return 0.0 if torch.equal(outs[0], outs[1]) and torch.equal(outs[2], outs[1]) else 1.0

@case("dynamic=True llama, lengths 7..70")
def _():
    m = llama(); c = torch.compile(m, backend="grove", dynamic=True); worst = 0
    with torch.no_grad():
        for n in (7, 16, 33, 70, 16, 7, 41):
            ids = torch.randint(0, 500, (2, n), device=D)
            worst = max(worst, rel(c(ids).logits, m(ids).logits))
    return worst

@case("fullgraph=True bert classification, dict outputs")
def _():
    torch.manual_seed(0)
    m = BertForSequenceClassification(BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=256, vocab_size=500, num_labels=3)).to(D).eval()
    c = torch.compile(m, backend="grove", fullgraph=True); worst = 0
    with torch.no_grad():
        for i in range(4):
            ids = torch.randint(0, 500, (3, 20), device=D); tt = torch.zeros_like(ids); tt[:, 10:] = 1
            a = c(input_ids=ids, token_type_ids=tt); b = m(input_ids=ids, token_type_ids=tt)
            worst = max(worst, rel(a["logits"], b["logits"]))
    return worst

@case("t5 generate, compiled forward (encoder-decoder cache)")
def _():
    torch.manual_seed(0)
    m = T5ForConditionalGeneration(T5Config(d_model=128, d_ff=256, num_layers=2, num_heads=4, vocab_size=500,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)).to(D).eval()
    r = copy.deepcopy(m); m.forward = torch.compile(m.forward, backend="grove")
    ids = torch.randint(2, 500, (2, 12), device=D)
    a = m.generate(ids, max_new_tokens=10, do_sample=False); b = r.generate(ids, max_new_tokens=10, do_sample=False)
    return 0.0 if torch.equal(a, b) else 1.0

@case("two threads calling one compiled model")
def _():
    m = llama(); c = torch.compile(m, backend="grove"); errors = []; worst = [0.0]
    ids = [torch.randint(0, 500, (1, 16), device=D) for _ in range(2)]
    with torch.no_grad():
        expected = [m(i).logits.clone() for i in ids]
        c(ids[0])  # compiled before the threads start
    def work(k):
        try:
            with torch.no_grad():
                for _ in range(20):
                    out = c(ids[k]).logits.clone()
                    torch.cuda.current_stream().synchronize()
                    worst[0] = max(worst[0], rel(out, expected[k]))
        except Exception as error:
            errors.append(repr(error)[:200])
    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads: t.start()
    for t in threads: t.join()
    if errors: raise RuntimeError(errors[0])
    return worst[0]

@case("eval model under enable_grad: outputs with grad_fn, backward to the input")
def _():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(D).eval(); c = torch.compile(m, backend="grove")
    worst = 0
    for i in range(3):
        x = torch.randn(4, 16, device=D, requires_grad=True); x2 = x.detach().clone().requires_grad_(True)
        c(x).sum().backward(); m.zero_grad(); m(x2).sum().backward()
        worst = max(worst, rel(x.grad, x2.grad))
    return worst

@case("a model returning nested tuples and a dict with None")
def _():
    class M(nn.Module):
        def __init__(self): super().__init__(); self.l = nn.Linear(8, 8)
        def forward(self, x):
            y = self.l(x); return {"a": (y, (y.relu(), None)), "b": [y.sum(), 3]}
    torch.manual_seed(0); m = M().to(D); c = torch.compile(m, backend="grove"); worst = 0
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(4, 8, device=D); a, b = c(x), m(x)
            assert a["a"][1][1] is None and a["b"][1] == 3
            worst = max(worst, rel(a["a"][0], b["a"][0]), rel(a["a"][1][0], b["a"][1][0]), rel(a["b"][0], b["b"][0]))
    return worst

@case("20 input shapes (past dynamo's recompile limit)")
def _():
    m = llama(); c = torch.compile(m, backend="grove", dynamic=False); worst = 0
    with torch.no_grad():
        for n in range(4, 24):
            ids = torch.randint(0, 500, (1, n), device=D)
            worst = max(worst, rel(c(ids).logits, m(ids).logits))
    return worst

print("==== summary")
for r in results: print(r)
