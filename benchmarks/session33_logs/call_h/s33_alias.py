# Session 33: inputs that alias each other, one written in place, through the door (inference).
import torch, grove, grove.torch
torch.backends.cuda.matmul.allow_tf32 = False
def f(a, b):
    a.add_(1)
    return b * 2, a + b
def h(a, b):
    a.mul_(2)
    return b + 1
def k(cache, new, pos):  # a cache written at pos, and a view of it read
    cache[pos] = new
    return cache.sum(0)
cases = []
for mode in ("cudagraphs", "eager"):
    for name, fn, make in [
        ("same tensor twice", f, lambda: (lambda t: (t, t))(torch.randn(4, device="cuda"))),
        ("overlapping views", h, lambda: (lambda t: (t[:4], t[2:6]))(torch.arange(8.0, device="cuda"))),
        ("disjoint views", h, lambda: (lambda t: (t[:4], t[4:8]))(torch.arange(8.0, device="cuda"))),
        ("distinct tensors", f, lambda: (torch.randn(4, device="cuda"), torch.randn(4, device="cuda"))),
    ]:
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="grove", options={"mode": mode}, dynamic=False)
        worst = 0.0
        for call in range(4):
            torch.manual_seed(call)
            args = make(); eager_args = tuple(a.clone() for a in args)
            # eager on a copy with the same aliasing
            base_args = make()
            torch.manual_seed(call); base_args = make()
            expected = fn(*base_args)
            torch.manual_seed(call); args = make()
            with torch.no_grad():
                got = compiled(*args)
            got = got if isinstance(got, tuple) else (got,)
            expected = expected if isinstance(expected, tuple) else (expected,)
            worst = max([worst] + [float((g - e).abs().max()) for g, e in zip(got, expected)]
                        + [float((a - b).abs().max()) for a, b in zip(args, base_args)])
        print(mode, name, "worst difference from eager over 4 calls:", worst)
