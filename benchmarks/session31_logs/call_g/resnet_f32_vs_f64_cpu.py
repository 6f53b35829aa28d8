import copy, torch, torchvision, torch.nn.functional as F
torch.manual_seed(0)
m = torchvision.models.resnet18(num_classes=10)
r = copy.deepcopy(m).double()
oa, ob = torch.optim.SGD(m.parameters(), lr=0.05), torch.optim.SGD(r.parameters(), lr=0.05)
def rel(a, b):
    a, b = a.double(), b.double(); return ((a-b).abs().max() / b.abs().max()).item()
for step in range(3):
    x = torch.randn(4, 3, 64, 64); y = torch.randint(0, 10, (4,))
    for model, o, xx in ((m, oa, x), (r, ob, x.double())):
        o.zero_grad(); F.cross_entropy(model(xx), y).backward()
    worst = sorted(((rel(p.grad, q.grad), n) for (n, p), q in zip(m.named_parameters(), r.parameters())), reverse=True)[:3]
    print(step, worst)
    oa.step(); ob.step()
