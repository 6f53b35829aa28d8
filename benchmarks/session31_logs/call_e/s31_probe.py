"""Session 31: a new user's scenarios through backend="grove" on cuda, each against eager PyTorch."""
import copy, traceback, warnings
import torch, torch.nn as nn, torch.nn.functional as F
warnings.filterwarnings("ignore")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
import grove.torch  # noqa: F401
from transformers import LlamaConfig, LlamaForCausalLM, BertConfig, BertModel, GPT2Config, GPT2LMHeadModel
import torchvision

D = "cuda"
results = []
def case(name):
    def wrap(fn):
        torch._dynamo.reset()
        try:
            worst = fn()
            results.append((name, "ok" if worst is None or worst < 2e-3 else "DIFF", worst))
        except Exception as error:
            results.append((name, "ERROR", "%s: %s" % (type(error).__name__, str(error).splitlines()[0][:200] if str(error) else "")))
            traceback.print_exc()
        print(results[-1], flush=True)
    return wrap

def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-6)).item()

def llama():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=500, max_position_embeddings=256)).to(D).eval()

@case("inference_mode llama")
def _():
    m = llama(); c = torch.compile(m, backend="grove")
    worst = 0
    with torch.inference_mode():
        for i in range(4):
            ids = torch.randint(0, 500, (2, 16), device=D)
            worst = max(worst, rel(c(ids).logits, m(ids).logits))
    return worst

@case("bf16 llama varying seq lengths")
def _():
    m = llama().to(torch.bfloat16); c = torch.compile(m, backend="grove")
    worst = 0
    with torch.no_grad():
        for n in (16, 32, 17, 64, 16, 33, 32):
            ids = torch.randint(0, 500, (1, n), device=D)
            worst = max(worst, rel(c(ids).logits, m(ids).logits) / 8)  # bf16: judged at 8x the f32 bound
    return worst

@case("fp16 bert with padding mask")
def _():
    torch.manual_seed(0)
    m = BertModel(BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                             vocab_size=500)).to(D).half().eval()
    c = torch.compile(m, backend="grove"); worst = 0
    with torch.no_grad():
        for i in range(4):
            ids = torch.randint(0, 500, (3, 24), device=D); mask = torch.ones_like(ids); mask[1, 10:] = 0; mask[2, 5:] = 0
            a = c(input_ids=ids, attention_mask=mask).last_hidden_state; b = m(input_ids=ids, attention_mask=mask).last_hidden_state
            worst = max(worst, rel(a * mask[..., None], b * mask[..., None]) / 8)
    return worst

@case("autocast bf16 inference resnet18 channels_last")
def _():
    torch.manual_seed(0)
    m = torchvision.models.resnet18().to(D).eval().to(memory_format=torch.channels_last)
    c = torch.compile(m, backend="grove"); worst = 0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for i in range(4):
            x = torch.randn(2, 3, 64, 64, device=D).to(memory_format=torch.channels_last)
            worst = max(worst, rel(c(x), m(x)) / 8)
    return worst

@case("generate sampling gpt2 compiled forward")
def _():
    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=500, n_positions=128)).to(D).eval()
    ref = copy.deepcopy(m)
    m.forward = torch.compile(m.forward, backend="grove")
    ids = torch.randint(0, 500, (2, 8), device=D)
    outs = []
    for model in (m, ref):
        torch.manual_seed(7)
        outs.append(model.generate(ids, do_sample=True, top_k=50, max_new_tokens=12, pad_token_id=0))
    return 0.0 if torch.equal(outs[0], outs[1]) else 1.0

@case("train llama clip_grad_norm adamw, zero_grad(set_to_none=False)")
def _():
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=500)).to(D).train()
    r = copy.deepcopy(m); c = torch.compile(m, backend="grove")
    oa, ob = torch.optim.AdamW(m.parameters(), lr=1e-3), torch.optim.AdamW(r.parameters(), lr=1e-3)
    worst = 0
    for step in range(5):
        ids = torch.randint(0, 500, (2, 16), device=D)
        ls = []
        for call, model, opt in ((c, m, oa), (r, r, ob)):
            opt.zero_grad(set_to_none=False)
            loss = call(input_ids=ids, labels=ids).loss; loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5); opt.step(); ls.append(loss.detach())
        worst = max(worst, rel(ls[0], ls[1]))
    return max(worst, max(rel(p, q) for p, q in zip(m.parameters(), r.parameters())))

@case("fp16 GradScaler training mlp")
def _():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 10)).to(D)
    r = copy.deepcopy(m); c = torch.compile(m, backend="grove")
    sa, sb = torch.amp.GradScaler(), torch.amp.GradScaler()
    oa, ob = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(r.parameters(), lr=0.1)
    worst = 0
    for step in range(6):
        x, y = torch.randn(32, 64, device=D), torch.randint(0, 10, (32,), device=D)
        for call, opt, sc in ((c, oa, sa), (r, ob, sb)):
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.cross_entropy(call(x), y)
            sc.scale(loss).backward(); sc.step(opt); sc.update()
    return max(rel(p, q) for p, q in zip(m.parameters(), r.parameters())) / 8

@case("batchnorm train mode under no_grad (running stats)")
def _():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).to(D).train()
    r = copy.deepcopy(m); c = torch.compile(m, backend="grove"); worst = 0
    with torch.no_grad():
        for i in range(5):
            x = torch.randn(4, 3, 16, 16, device=D)
            worst = max(worst, rel(c(x), r(x)))
    return max(worst, rel(m[1].running_mean, r[1].running_mean), rel(m[1].running_var, r[1].running_var),
               float(m[1].num_batches_tracked.item() != r[1].num_batches_tracked.item()))

@case("in-place update of a user input and a returned view")
def _():
    def f(x, y):
        x.add_(y)
        return x[1:], (x * 2).t()
    c = torch.compile(f, backend="grove"); worst = 0
    with torch.no_grad():
        for i in range(4):
            x = torch.randn(6, 5, device=D); y = torch.randn(6, 5, device=D)
            x2 = x.clone(); a = c(x, y); b = f(x2, y)
            worst = max(worst, rel(x, x2), rel(a[0], b[0]), rel(a[1], b[1]))
            a[0].fill_(3.0); b[0].fill_(3.0); worst = max(worst, rel(x, x2))  # the view aliases x
    return worst

@case("side stream calls")
def _():
    m = llama(); c = torch.compile(m, backend="grove"); s = torch.cuda.Stream(); worst = 0
    with torch.no_grad():
        for i in range(4):
            ids = torch.randint(0, 500, (1, 16), device=D)
            with torch.cuda.stream(s):
                out = c(ids).logits.clone()
            torch.cuda.current_stream().wait_stream(s)
            worst = max(worst, rel(out, m(ids).logits))
    return worst

@case("two compiled models alternating, outputs read before the other runs")
def _():
    a, b = llama(), llama(); ca, cb = torch.compile(a, backend="grove"), torch.compile(b, backend="grove")
    worst = 0
    with torch.no_grad():
        for i in range(4):
            ids = torch.randint(0, 500, (1, 12), device=D)
            oa = ca(ids).logits; worst = max(worst, rel(oa, a(ids).logits))
            ob = cb(ids).logits; worst = max(worst, rel(ob, b(ids).logits))
    return worst

@case("non-contiguous and int/bool/0-dim inputs")
def _():
    def f(x, idx, mask, s):
        return (x.t() @ x)[idx].masked_fill(mask, 0.0) * s
    c = torch.compile(f, backend="grove"); worst = 0
    with torch.no_grad():
        for i in range(4):
            x = torch.randn(8, 6, device=D)[:, ::1].t().contiguous().t()  # transposed layout
            idx = torch.randint(0, 6, (5,), device=D); mask = torch.rand(5, 6, device=D) > 0.5; s = torch.tensor(1.5, device=D)
            worst = max(worst, rel(c(x, idx, mask, s), f(x, idx, mask, s)))
    return worst

@case("cpu scalar tensor input with cuda tensors")
def _():
    def f(x, t):
        return x * t + 1
    c = torch.compile(f, backend="grove"); worst = 0
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(4, 4, device=D); t = torch.tensor(float(i + 1))
            worst = max(worst, rel(c(x, t), f(x, t)))
    return worst

print("==== summary")
for r in results: print(r)
