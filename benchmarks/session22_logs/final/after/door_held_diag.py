# Diagnostic: door_function_test's held-outputs case on this PyTorch: the partition, and per step the tree's
# counters and which storages the held outputs and saved values are.
import gc, sys, torch
import door_function_test as t
import gpu_models
torch.manual_seed(0)
module = gpu_models.Mlp(width=8, depth=2)
forward, backward = t.partition_of(module, torch.randn(3, 8))
print("torch", torch.__version__)
print("FORWARD", forward.code)
print("BACKWARD", backward.code)
case = t.DoorFunctionTest()
call, params, compiler = case.door_call(module, torch.randn(3, 8))
held = []
for step in range(6):
    for p in params:
        p.grad = None
    out = call(*params, torch.randn(3, 8))
    print("step", step, "out ptr", out.data_ptr(), "grad_fn", type(out.grad_fn).__name__)
    out.square().sum().backward()
    held.append(out)
    tree = compiler.forwards[0].models()[0].stats()["tree"]
    print("  tree", {k: tree[k] for k in ("recordings", "warmups", "replays", "outputs_overwritten") if k in tree})
    print("  grads", [p.grad.data_ptr() for p in params])
