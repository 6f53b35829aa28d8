"""Session 31: a new user's training scenarios through backend="grove" on cuda, each against eager."""
import copy, traceback, warnings
import torch, torch.nn as nn, torch.nn.functional as F
warnings.filterwarnings("ignore")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
import grove.torch  # noqa: F401
import torchvision
from transformers import GPT2Config, GPT2LMHeadModel
D = "cuda"
results = []

def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-6)).item()

def train_pair(make, steps, batch, loss_fn, opt=lambda ps: torch.optim.SGD(ps, lr=0.05), before_step=None,
               dtype_scale=1.0, compile_fn=None):
    torch.manual_seed(0)
    m = make().to(D); r = copy.deepcopy(m)
    c = compile_fn(m) if compile_fn else torch.compile(m, backend="grove")
    oa = opt([p for p in m.parameters() if p.requires_grad]); ob = opt([p for p in r.parameters() if p.requires_grad])
    worst = 0
    for step in range(steps):
        inputs = batch(step)
        losses = []
        for call, model, o in ((c, m, oa), (r, r, ob)):
            o.zero_grad(set_to_none=True)
            loss = loss_fn(call, inputs); loss.backward()
            if before_step: before_step(model)
            o.step(); losses.append(loss.detach())
        worst = max(worst, rel(losses[0], losses[1]))
    worst = max([worst] + [rel(p, q) for p, q in zip(m.parameters(), r.parameters())])
    bufs = [rel(p, q) for p, q in zip(m.buffers(), r.buffers()) if p.is_floating_point()]
    return max([worst] + bufs) / dtype_scale

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

@case("resnet18 training channels_last, BN running stats")
def _():
    return train_pair(lambda: torchvision.models.resnet18(num_classes=10).to(memory_format=torch.channels_last), 4,
                      lambda s: (torch.randn(4, 3, 64, 64, device=D).to(memory_format=torch.channels_last), torch.randint(0, 10, (4,), device=D)),
                      lambda call, b: F.cross_entropy(call(b[0]), b[1]))

@case("frozen backbone, head trained (requires_grad False)")
def _():
    def make():
        m = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
        for p in list(m.parameters())[:4]: p.requires_grad_(False)
        return m
    return train_pair(make, 5, lambda s: (torch.randn(16, 32, device=D), torch.randint(0, 5, (16,), device=D)),
                      lambda call, b: F.cross_entropy(call(b[0]), b[1]))

class Lora(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = nn.Linear(64, 64); self.base.requires_grad_(False)
        self.a = nn.Parameter(torch.randn(8, 64) * 0.01); self.b = nn.Parameter(torch.zeros(64, 8))
        self.out = nn.Linear(64, 3)
    def forward(self, x):
        return self.out(F.gelu(self.base(x) + x @ self.a.t() @ self.b.t() * 2.0))

@case("LoRA adapters, AdamW")
def _():
    return train_pair(Lora, 5, lambda s: (torch.randn(16, 64, device=D), torch.randint(0, 3, (16,), device=D)),
                      lambda call, b: F.cross_entropy(call(b[0]), b[1]), opt=lambda ps: torch.optim.AdamW(ps, lr=1e-2))

class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)) for _ in range(3))
    def forward(self, x):
        for b in self.blocks:
            x = x + torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
        return x.mean()

@case("activation checkpointing (use_reentrant=False)")
def _():
    return train_pair(Checkpointed, 4, lambda s: (torch.randn(8, 64, device=D),), lambda call, b: call(b[0]))

@case("last batch smaller (batch 16, 16, 5, 16)")
def _():
    sizes = [16, 16, 5, 16]
    return train_pair(lambda: nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4)), 4,
                      lambda s: (torch.randn(sizes[s], 32, device=D), torch.randint(0, 4, (sizes[s],), device=D)),
                      lambda call, b: F.cross_entropy(call(b[0]), b[1]))

@case("bf16 parameters, AdamW")
def _():
    return train_pair(lambda: nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Linear(128, 8)).to(torch.bfloat16), 4,
                      lambda s: (torch.randn(16, 64, device=D, dtype=torch.bfloat16), torch.randint(0, 8, (16,), device=D)),
                      lambda call, b: F.cross_entropy(call(b[0]).float(), b[1]), opt=lambda ps: torch.optim.AdamW(ps, lr=1e-3),
                      dtype_scale=8.0)

@case("gradient w.r.t. the input (adversarial) and the params")
def _():
    def loss_fn(call, b):
        x = b[0].clone().requires_grad_(True)
        loss = F.cross_entropy(call(x), b[1])
        g, = torch.autograd.grad(loss, x, create_graph=False, retain_graph=True)
        return loss + 0.0 * g.sum()
    return train_pair(lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)), 3,
                      lambda s: (torch.randn(8, 32, device=D), torch.randint(0, 4, (8,), device=D)), loss_fn)

@case("MultiheadAttention with key_padding_mask, training")
def _():
    class M(nn.Module):
        def __init__(self):
            super().__init__(); self.mha = nn.MultiheadAttention(64, 4, batch_first=True); self.head = nn.Linear(64, 2)
        def forward(self, x, mask):
            y, _ = self.mha(x, x, x, key_padding_mask=mask, need_weights=False); return self.head(y.mean(1))
    def batch(s):
        mask = torch.zeros(4, 10, dtype=torch.bool, device=D); mask[1, 6:] = True; mask[3, 2:] = True
        return torch.randn(4, 10, 64, device=D), mask, torch.randint(0, 2, (4,), device=D)
    return train_pair(M, 4, batch, lambda call, b: F.cross_entropy(call(b[0], b[1]), b[2]))

@case("train, eval, train again (mode switches recompile)")
def _():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.Dropout(0.0), nn.Linear(32, 2)).to(D); r = copy.deepcopy(m)
    c = torch.compile(m, backend="grove"); oa, ob = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(r.parameters(), lr=0.1)
    worst = 0
    for phase in ("train", "eval", "train", "eval"):
        for model in (m, r): getattr(model, phase)()
        for s in range(3):
            x = torch.randn(8, 16, device=D)
            if phase == "train":
                for call, o in ((c, oa), (r, ob)):
                    o.zero_grad(); call(x).square().mean().backward(); o.step()
            else:
                with torch.no_grad(): worst = max(worst, rel(c(x), r(x)))
    return max([worst] + [rel(p, q) for p, q in zip(m.parameters(), r.parameters())])

@case("gpt2 tied embeddings, weight-decay param groups, grad accumulation x2")
def _():
    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=500, n_positions=64,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).to(D).train()
    r = copy.deepcopy(m); c = torch.compile(m, backend="grove")
    def groups(model):
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2]; rest = [p for n, p in model.named_parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=1e-3)
    oa, ob = groups(m), groups(r); worst = 0
    for step in range(3):
        for call, o in ((c, oa), (r, ob)):
            o.zero_grad()
        for micro in range(2):
            ids = torch.randint(0, 500, (2, 16), device=D, generator=torch.Generator(D).manual_seed(step * 10 + micro))
            la = c(input_ids=ids, labels=ids).loss / 2; la.backward()
            lb = r(input_ids=ids, labels=ids).loss / 2; lb.backward()
            worst = max(worst, rel(la.detach(), lb.detach()))
        oa.step(); ob.step()
    return max([worst] + [rel(p, q) for p, q in zip(m.parameters(), r.parameters())])

@case("compiled loss function (not a module)")
def _():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4)).to(D); r = copy.deepcopy(m)
    def step_loss(model, x, y):
        return F.cross_entropy(model(x), y, label_smoothing=0.1)
    c = torch.compile(step_loss, backend="grove")
    oa, ob = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(r.parameters(), lr=0.1); worst = 0
    for s in range(4):
        x, y = torch.randn(8, 32, device=D), torch.randint(0, 4, (8,), device=D)
        for fn, model, o in ((c, m, oa), (step_loss, r, ob)):
            o.zero_grad(); l = fn(model, x, y); l.backward(); o.step()
    return max(rel(p, q) for p, q in zip(m.parameters(), r.parameters()))

@case("backward twice with retain_graph")
def _():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(D); r = copy.deepcopy(m)
    c = torch.compile(m, backend="grove")
    for s in range(3):
        x = torch.randn(8, 16, device=D)
        for call, model in ((c, m), (r, r)):
            model.zero_grad()
            out = call(x).sum(); out.backward(retain_graph=True); (2 * out).backward()
    return max(rel(p.grad, q.grad) for p, q in zip(m.parameters(), r.parameters()))

print("==== summary")
for r in results: print(r)
