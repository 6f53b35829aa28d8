"""Session 31: the two DIFFs of probe 2. ResNet-18 training: per component after each step (loss,
gradients, running stats), channels_last or not, grove's two modes. GPT-2 with AdamW vs SGD: where the
largest parameter difference is, and the gradient there."""
import copy, warnings
import torch, torch.nn as nn, torch.nn.functional as F
warnings.filterwarnings("ignore")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
import grove.torch  # noqa: F401
import torchvision
from transformers import GPT2Config, GPT2LMHeadModel
D = "cuda"
def rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()

for layout in ("channels_last", "contiguous"):
    for mode in ("eager", "cudagraphs"):
        torch._dynamo.reset(); torch.manual_seed(0)
        m = torchvision.models.resnet18(num_classes=10).to(D)
        if layout == "channels_last": m = m.to(memory_format=torch.channels_last)
        r = copy.deepcopy(m); c = torch.compile(m, backend="grove", options={"mode": mode})
        oa, ob = torch.optim.SGD(m.parameters(), lr=0.05), torch.optim.SGD(r.parameters(), lr=0.05)
        for step in range(3):
            x = torch.randn(4, 3, 64, 64, device=D); y = torch.randint(0, 10, (4,), device=D)
            if layout == "channels_last": x = x.to(memory_format=torch.channels_last)
            ls = []
            for call, o in ((c, oa), (r, ob)):
                o.zero_grad(set_to_none=True); l = F.cross_entropy(call(x), y); l.backward(); ls.append(l.detach())
            grads = sorted(((rel(p.grad, q.grad), n, tuple(p.grad.stride()), tuple(q.grad.stride()))
                            for (n, p), q in zip(m.named_parameters(), r.parameters())), reverse=True)[:3]
            stats = sorted(((rel(p, q), n) for (n, p), q in zip(m.named_buffers(), r.buffers()) if p.is_floating_point()), reverse=True)[:2]
            print("%s %s step %d: loss %.3g; worst grads %s; worst stats %s" % (layout, mode, step, rel(ls[0], ls[1]),
                  [(round(a, 6), n, s1, s2) for a, n, s1, s2 in grads], [(round(a, 6), n) for a, n in stats]), flush=True)
            for o in (oa, ob): o.step()

for opt in ("sgd", "adamw"):
    torch._dynamo.reset(); torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=500, n_positions=64,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).to(D).train()
    r = copy.deepcopy(m); c = torch.compile(m, backend="grove")
    make = (lambda ps: torch.optim.SGD(ps, lr=1e-2)) if opt == "sgd" else (lambda ps: torch.optim.AdamW(ps, lr=1e-3))
    oa, ob = make(m.parameters()), make(r.parameters())
    for step in range(2):
        ids = torch.randint(0, 500, (2, 16), device=D)
        for call, o in ((c, oa), (r, ob)):
            o.zero_grad(); call(input_ids=ids, labels=ids).loss.backward()
        worst = sorted(((rel(p.grad, q.grad), n) for (n, p), q in zip(m.named_parameters(), r.parameters())), reverse=True)[:2]
        print("gpt2 %s step %d worst grads %s" % (opt, step, worst))
        for o in (oa, ob): o.step()
        worst = sorted(((rel(p, q), n) for (n, p), q in zip(m.named_parameters(), r.parameters())), reverse=True)[:2]
        name = worst[0][1]; p = dict(m.named_parameters())[name]; q = dict(r.named_parameters())[name]
        i = (p - q).abs().argmax()
        print("   params: worst %s; at its element: grove grad %.3g eager grad %.3g, largest |grad| there %.3g"
              % (worst, p.grad.flatten()[i].item(), q.grad.flatten()[i].item(), q.grad.abs().max().item()))
