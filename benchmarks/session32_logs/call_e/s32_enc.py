"""Session 32: call D's ViT / TransformerEncoder-with-padding DIFF: which model, which positions,
and does PyTorch's own torch.compile (backend="eager", "aot_eager") differ from eager the same way?"""
import warnings
import torch, torch.nn as nn
warnings.filterwarnings("ignore")
torch.backends.cuda.matmul.allow_tf32 = False
import grove.torch  # noqa: F401
import torchvision
D = "cuda"
def rel(a, b): return ((a - b).abs().max() / b.abs().max().clamp_min(1e-6)).item()
torch.manual_seed(0)
v = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10).to(D).eval()
for p in v.heads.parameters(): nn.init.normal_(p, 0, 0.2)
enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 2).to(D).eval()
with torch.no_grad():
    x = torch.randn(2, 3, 32, 32, device=D)
    s = torch.randn(3, 10, 64, device=D); pad = torch.zeros(3, 10, dtype=torch.bool, device=D); pad[1, 7:] = True
    want_v, want_e = v(x), enc(s, src_key_padding_mask=pad)
    for backend in ("eager", "aot_eager", "grove"):
        torch._dynamo.reset()
        cv, ce = torch.compile(v, backend=backend), torch.compile(enc, backend=backend)
        for call in range(3):
            gv, ge = cv(x), ce(s, src_key_padding_mask=pad)
            valid = ~pad
            print("%-9s call %d: vit %.2e  encoder valid %.2e  padded: compiled %.3g eager %.3g" % (
                backend, call, rel(gv, want_v), rel(ge[valid], want_e[valid]),
                ge[pad].abs().max().item(), want_e[pad].abs().max().item()), flush=True)
