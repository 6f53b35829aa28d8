"""Host (Python) time of a training step through the torch door, per stage,
on sim: what the door costs on the host once grove's own C++ calls are taken
out. On sim a grove call runs its kernels on the host, so the step's wall
time means nothing here; this measures the time each stage spends outside
grove's C API calls (which are timed and subtracted).

    python3 benchmarks/door_host_time.py [--json out.json] [--steps 30]

Stages: "forward" and "backward" are grove's compiled graphs as AOTAutograd
calls them (the boxed calls of grove.training, their Python only), "optimizer"
is grove.torch.optim.AdamW's step (its Python only), and "step" is the whole
step (forward, loss, backward, optimizer, zero_grad) less every grove C call:
the Python of grove, PyTorch's autograd and AOTAutograd's glue together.
Models: mlp16x512 b32 and gpt4x256 b8 T32 (tests/python/gpu_models.py),
trained through grove.training.compile_module (PyTorch 1.13) or
torch.compile(backend="grove") (PyTorch 2.x), in "cudagraphs" mode on sim.
Variants: "kept" (saved activations kept in grove, Note [Saved values kept
in grove]), "per-tensor" (GROVE_KEEP_SAVED=0, the path before it) and
"whole-step" (grove.training.compile_step with AdamW: forward, loss and
backward one graph, the update another; its "step" holds no PyTorch compute,
the others' holds the loss and its backward computed by PyTorch on the CPU).
Medians over steps after 5 warm-up steps.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, os.path.join(here, "..", "python"))

WARMUP = 5


class Clock:
    """Seconds spent inside wrapped C calls and inside each stage."""

    def __init__(self):
        self.in_c = 0.0
        self.stages = {}

    def c_call(self, function):
        def timed(*args):
            start = time.perf_counter()
            try:
                return function(*args)
            finally:
                self.in_c += time.perf_counter() - start
        return timed

    def stage(self, name, function):
        def timed(*args, **kwargs):
            c_before = self.in_c
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                wall = time.perf_counter() - start
                c_time = self.in_c - c_before
                self.stages.setdefault(name, []).append(wall - c_time)
        return timed


def cases():
    import gpu_models
    from grove import training

    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        # PyTorch 1.13: gpt4x256's attention as matmul and softmax (what the
        # door writes it out as on PyTorch 2.x).
        torch.nn.functional.scaled_dot_product_attention = training.math_attention

    torch.manual_seed(0)
    target = torch.randn(32, 512)
    tokens = torch.randint(0, 512, (8, 33))
    return [
        ("mlp16x512_b32", gpu_models.Mlp(), (torch.randn(32, 512),),
         lambda out: torch.nn.functional.mse_loss(out, target)),
        ("gpt4x256_b8_t32", gpu_models.Gpt(), (tokens[:, :-1].contiguous(),),
         lambda out: torch.nn.functional.cross_entropy(out.reshape(-1, 512),
                                                       tokens[:, 1:].reshape(-1))),
    ]


def instrument(clock):
    """Times grove's C calls and its boxed stage calls (from now on)."""
    import grove.optim
    from grove import _capi
    from grove import training_steps

    fast = _capi.fast_library()
    for name in ("grove_model_run_dlpack", "grove_model_run_keeping",
                 "grove_model_run_with_kept", "grove_dlpack_check", "grove_invocation_begin",
                 "grove_invocation_end"):
        try:
            function = getattr(fast, name)
        except AttributeError:  # an older library (the baseline's)
            continue
        setattr(fast, name, clock.c_call(function))
    original_boxed = training_steps._boxed

    def boxed(runner, check_saved=None, labels=None, step=None, forward=False):
        call = original_boxed(runner, check_saved, labels, step, forward)
        timed = clock.stage("forward" if forward else "backward", call)
        timed._boxed_call = True
        return timed

    training_steps._boxed = boxed
    original_step = grove.optim._GroveOptimizer.step
    grove.optim._GroveOptimizer.step = clock.stage("optimizer", original_step)


def run_case(clock, module, inputs, loss_of, steps, keep):
    import copy

    import grove.optim
    import grove.training

    os.environ["GROVE_KEEP_SAVED"] = "1" if keep else "0"
    clock.stages = {}
    model = copy.deepcopy(module)
    if keep == "whole":
        whole = grove.training.compile_step(
            model, lambda forward, *args: loss_of(forward(*args)),
            torch.optim.AdamW(model.parameters(), lr=1e-4), device="sim")
        return time_steps(clock, lambda: whole(*inputs), steps)
    if torch.__version__.startswith("1."):
        run = grove.training.compile_module(model, "cudagraphs")
    else:
        import grove.torch

        torch._dynamo.reset()
        run = torch.compile(model, backend="grove", dynamic=False,
                            options={"mode": "cudagraphs", "device": "sim"})
    optimizer = grove.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(run(*inputs))
        loss.backward()
        optimizer.step()
        return loss

    row = time_steps(clock, step, steps)
    optimizer.zero_grad(set_to_none=True)
    return row


def time_steps(clock, step, steps):
    step_host = []
    for index in range(WARMUP + steps):
        if index == WARMUP:
            clock.stages = {}
        c_before = clock.in_c
        start = time.perf_counter()
        step()
        wall = time.perf_counter() - start
        if index >= WARMUP:
            step_host.append(wall - (clock.in_c - c_before))
    row = {name: statistics.median(values) * 1e6 for name, values in clock.stages.items()}
    row["step"] = statistics.median(step_host) * 1e6
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="door_host_time.json")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--variants", default="per-tensor,kept,whole-step",
                        help="comma-separated: per-tensor, kept, whole-step")
    args = parser.parse_args()
    import grove.training  # noqa: F401

    clock = Clock()
    instrument(clock)
    rows = []
    for name, module, inputs, loss_of in cases():
        for variant in args.variants.split(","):
            keep = {"kept": True, "per-tensor": False, "whole-step": "whole"}[variant]
            row = run_case(clock, module, inputs, loss_of, args.steps, keep)
            row.update(model=name, variant=variant)
            rows.append(row)
    header = "%-18s %-11s %12s %12s %12s %12s" % ("model", "variant", "forward us",
                                                  "backward us", "optimizer us", "step us")
    print(header)
    print("-" * len(header))
    for row in rows:
        print("%-18s %-11s %12.1f %12.1f %12.1f %12.1f" % (
            row["model"], row["variant"], row.get("forward", 0), row.get("backward", 0),
            row.get("optimizer", 0), row["step"]))
    result = {"benchmark": "door_host_time", "torch": torch.__version__, "device": "sim",
              "steps": args.steps, "rows": rows}
    with open(args.json, "w") as out:
        json.dump(result, out, indent=2)
    print("wrote %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
