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

@case("uint8 image model (scaling and normalizing inside), resnet18 eval")
def _():
    import torchvision
    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__(); self.net = torchvision.models.resnet18(num_classes=10)
            self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
            self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        def forward(self, image):
            return self.net((image.float() / 255 - self.mean) / self.std)
    torch.manual_seed(0); m = Wrapped().to(D).eval(); c = torch.compile(m, backend="grove"); worst = 0
    with torch.no_grad():
        for i in range(4):
            x = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8, device=D)
            worst = max(worst, rel(c(x), m(x)))
    return worst

@case("float64 model: equal to eager at f64 precision")
def _():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 4)).to(D).double().eval()
    c = torch.compile(m, backend="grove"); worst = 0
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(8, 16, device=D, dtype=torch.float64) * 1e-3 + 1.0
            worst = max(worst, rel(c(x), m(x)) * 1e6)  # scaled: must be within 2e-9 relative
    return worst

@case("training with BCE-with-logits, Huber and KL-distillation losses compiled with the model")
def _():
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 6)).to(D).eval()
    def make():
        torch.manual_seed(1); return nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 6)).to(D)
    student, reference = make(), make()
    def loss_of(model, x, y, box):
        out = model(x)
        with torch.no_grad(): soft = F.softmax(teacher(x) / 2, -1)
        return (F.binary_cross_entropy_with_logits(out[:, :3], y, pos_weight=torch.full((3,), 2.0, device=D))
                + F.huber_loss(out[:, 3:5], box, delta=0.5) + F.smooth_l1_loss(out[:, 5], box[:, 0], beta=0.3)
                + F.kl_div(F.log_softmax(out / 2, -1), soft, reduction="batchmean"))
    step = torch.compile(loss_of, backend="grove")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (student, reference)]
    worst = 0
    for i in range(5):
        x = torch.randn(8, 16, device=D); y = (torch.rand(8, 3, device=D) > 0.5).float(); box = torch.randn(8, 2, device=D)
        losses = []
        for fn, model, opt in ((step, student, opts[0]), (loss_of, reference, opts[1])):
            opt.zero_grad(); loss = fn(model, x, y, box); loss.backward(); opt.step(); losses.append(loss.detach())
        worst = max(worst, rel(losses[0], losses[1]))
    for p, q in zip(student.parameters(), reference.parameters()): worst = max(worst, rel(p, q))
    return worst

@case("NaN-guarded logits: isnan/nan_to_num/fmax in a bf16 autocast model")
def _():
    class M(nn.Module):
        def __init__(self):
            super().__init__(); self.l = nn.Linear(32, 64)
        def forward(self, x):
            y = self.l(x).float()
            y = torch.where(torch.isinf(y), torch.zeros_like(y), y)
            return torch.nan_to_num(y).amin(-1), torch.fmax(y, y.flip(-1)), torch.signbit(y).sum(-1)
    torch.manual_seed(0); m = M().to(D); c = torch.compile(m, backend="grove"); worst = 0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for i in range(3):
            x = torch.randn(4, 32, device=D)
            for g, w in zip(c(x), m(x)): worst = max(worst, rel(g, w) if g.is_floating_point() else float(not torch.equal(g, w)))
    return worst

@case("torchvision ViT eval (nn.MultiheadAttention) and a TransformerEncoder with a padding mask")
def _():
    import torchvision
    torch.manual_seed(0)
    v = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10).to(D).eval()
    for p in v.heads.parameters(): nn.init.normal_(p, 0, 0.2)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 2).to(D).eval()
    cv, ce = torch.compile(v, backend="grove"), torch.compile(enc, backend="grove"); worst = 0
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(2, 3, 32, 32, device=D); worst = max(worst, rel(cv(x), v(x)))
            s = torch.randn(3, 10, 64, device=D); pad = torch.zeros(3, 10, dtype=torch.bool, device=D); pad[1, 7:] = True
            got, want = ce(s, src_key_padding_mask=pad), enc(s, src_key_padding_mask=pad)
            worst = max(worst, rel(got.nan_to_num(0), want.nan_to_num(0)))
    return worst

print("==== summary")
for r in results: print(r)
