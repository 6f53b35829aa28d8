"""Which tensors sit in reference cycles when ddp_door.py's run ends? (the exit abort: THPVariable_clear's
use_count() == 1 assert in the interpreter's final GC). Runs ddp_door.py's main, then collects with
DEBUG_SAVEALL so that nothing is cleared, and prints each tensor in cyclic garbage with the chain back to it."""
import gc, runpy, sys, os
import torch
argv = sys.argv[1:]
sys.argv = ["benchmarks/ddp_door.py"] + argv
try:
    runpy.run_path("benchmarks/ddp_door.py", run_name="__main__")
except SystemExit as e:
    print("ddp_door exited", e.code)
gc.collect()
gc.set_debug(gc.DEBUG_SAVEALL)
found = gc.collect()
garbage = list(gc.garbage)
ids = {id(o) for o in garbage}
tensors = [o for o in garbage if isinstance(o, torch.Tensor)]
print("cyclic garbage after the run: %d objects, %d tensors" % (len(garbage), len(tensors)))
from collections import Counter
print("types:", Counter(type(o).__name__ for o in garbage).most_common(25))
def name(o):
    t = type(o).__name__
    if isinstance(o, dict): return "dict(keys=%s)" % list(o.keys())[:6]
    if callable(o) and hasattr(o, "__qualname__"): return "%s %s" % (t, o.__qualname__)
    if hasattr(o, "__code__"): return "%s %s" % (t, o.__code__.co_name)
    return t
for t in tensors[:12]:
    print("tensor", tuple(t.shape), t.dtype, "param" if isinstance(t, torch.nn.Parameter) else "", "grad_fn" if t.grad_fn else "")
    for r in gc.get_referrers(t):
        if id(r) in ids:
            print("   <-", name(r))
            for r2 in gc.get_referrers(r):
                if id(r2) in ids and r2 is not garbage:
                    print("        <-", name(r2))
sys.stdout.flush()
gc.garbage.clear()
os._exit(0)
