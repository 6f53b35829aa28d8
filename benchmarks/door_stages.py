"""Where a training step through the torch door spends its host time, on a
GPU: each stage of the user's step (zero_grad, the compiled model's call,
the loss, backward(), optimizer.step()) timed on the host without a device
synchronization inside the step, grove's own C calls and boxed stage calls
timed inside them (door_host_time.py's Clock), and the step's wall time with
a synchronization per block of steps. When the stages add up to the step's
wall time the step is host-bound and these are the numbers to cut.

    python3 benchmarks/door_stages.py [--json out.json] [--steps 200]
        [--variants grove,grove_optim,torch_reduce_overhead] [--profile DIR]
        [--models mlp16x512_b32,gpt4x256_b8_t32]

Models: mlp16x512_b32 and gpt4x256_b8_t32 (torch_backend.py's) by default;
--models may also name the zoo's training models (vit_tiny, llama, gpt2:
zoo_training.py's, batch 8).
Variants: "grove" (backend="grove", torch.optim.AdamW fused=True),
"grove_fn" (the same run by grove's own autograd function, GROVE_DOOR_FUNCTION=1),
"grove_optim" (backend="grove", grove.torch.optim.AdamW), and
"torch_reduce_overhead" (mode="reduce-overhead", fused AdamW) for the same
split of PyTorch's own; "floor" (a backend that computes nothing: Note [The
door's training floor], torch_backend.py); and the whole step as one call (its time under
"model"): "grove_step" (grove.training.compile_step, AdamW) and "cuda_graph"
(PyTorch's step captured by hand, capturable fused AdamW). --profile writes
a cProfile listing (top functions by own time) per model and variant into DIR, and with --device-profile
torch.profiler's table of device time too (which slows the variants after
it: one variant per process then). Models: mlp16x512 b32 and
gpt4x256 b8 T32 (benchmarks/torch_backend.py's). Skips (exit 0) without
CUDA or torch._dynamo.
"""
import argparse
import copy
import cProfile
import io
import itertools
import json
import logging
import os
import pstats
import statistics
import sys
import time
import traceback
import types

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, os.path.join(here, "..", "python"))

STAGES = ("zero_grad", "model", "loss", "backward", "optimizer")
BLOCK = 20


_wrappers = itertools.count()


# Note [One code object per compiled variant]: dynamo keeps compiled graphs per
# code object, and with the parameters as graph inputs its guards check their
# shapes, not which tensors they are: a second copy of a model compiled in the
# same process without a reset reaches the first copy's graph, where grove
# binds the first copy's parameters (H100, r2 of session 18: StaticInputMovedError
# at the second variant's first call). So door_timeline's variants, compiled
# side by side, each run behind a wrapper whose forward is a code object of its own.
def own_code(module, tag):
    """`module` behind a wrapper module whose forward is a new code object."""
    def forward(self, *args):
        return self.inner(*args)

    code = forward.__code__.replace(co_name="forward_variant_%s" % tag)
    wrapper_type = type("Variant%s" % tag, (torch.nn.Module,),
                        {"forward": types.FunctionType(code, forward.__globals__)})
    wrapper = wrapper_type()
    wrapper.inner = module
    return wrapper


OPTIMIZERS = ("fused_adamw", "adamw", "sgd")


def torch_optimizer(name, parameters):
    """PyTorch's optimizer `name`: torch_backend.py's (fused_adamw: AdamW
    fused=True) or the zoo's (adamw: AdamW's default, foreach on CUDA; sgd:
    SGD with momentum; zoo_training.optimizer_of)."""
    if name == "fused_adamw":
        return torch.optim.AdamW(parameters, lr=1e-4, fused=True)
    if name == "adamw":
        return torch.optim.AdamW(parameters, lr=1e-4)
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=1e-2, momentum=0.9)
    raise ValueError("door_stages: optimizer %r; use one of %s" % (name, ", ".join(OPTIMIZERS)))


def step_of(module, inputs, loss_of, variant, reset=True, optimizer_name="fused_adamw"):
    """(a step function taking a `timed(stage, fn, *args)` helper, the model).
    reset: dynamo's caches are reset first (False keeps the steps compiled
    before this one compiled, for door_timeline.py's interleaved timing; the
    model then runs behind a code object of its own, Note [One code object
    per compiled variant])."""
    model = copy.deepcopy(module)
    if variant in ("grove_step", "cuda_graph"):
        return _whole_step(model, inputs, loss_of, variant)
    if variant == "grove_optim":
        import grove.torch

        optimizer = grove.torch.optim.AdamW(model.parameters(), lr=1e-4)
    else:
        optimizer = torch_optimizer(optimizer_name, model.parameters())
    compiled = model
    if reset:
        torch._dynamo.reset()
    else:
        compiled = own_code(model, next(_wrappers))
    if variant == "torch_reduce_overhead":
        run = torch.compile(compiled, mode="reduce-overhead", dynamic=False)
    elif variant == "floor":
        from torch_backend import floor_backend  # this folder

        run = torch.compile(compiled, backend=floor_backend, dynamic=False)
    else:
        run = torch.compile(compiled, backend="grove", dynamic=False)

    def step(timed):
        timed("zero_grad", optimizer.zero_grad, True)
        out = timed("model", run, *inputs)
        loss = timed("loss", loss_of, out)
        timed("backward", loss.backward)
        timed("optimizer", optimizer.step)
        return loss

    if variant == "grove_fn":  # compiled now, by grove's own autograd function
        from torch_backend import environment  # this folder

        with environment({"GROVE_DOOR_FUNCTION": "1"}):
            step(lambda name, function, *args: function(*args))
    return step


def _whole_step(model, inputs, loss_of, variant):
    """The whole step as one call, timed as the "model" stage: grove's
    (grove.training.compile_step with torch.optim.AdamW, run as grove's
    update) or PyTorch's hand-captured CUDA graph (forward, loss, backward,
    capturable fused AdamW; its weights and optimizer state set back after
    the capture's warm-up, so its losses start where the other variants'
    do). Neither goes through dynamo, so the other variants stay compiled."""
    if variant == "grove_step":
        import grove.training

        whole = grove.training.compile_step(
            model, lambda forward, *args: loss_of(forward(*args)),
            torch.optim.AdamW(model.parameters(), lr=1e-4))

        def step(timed):
            return timed("model", whole, *inputs)
        return step
    from compare_torch import capture_graph  # benchmarks/, this script's folder

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True, capturable=True)

    def eager_step():
        optimizer.zero_grad(set_to_none=False)
        loss = loss_of(model(*inputs))
        loss.backward()
        optimizer.step()
        return loss

    start = [parameter.detach().clone() for parameter in model.parameters()]
    graph, loss = capture_graph(torch, eager_step, eager_step)
    with torch.no_grad():
        for parameter, value in zip(model.parameters(), start):
            parameter.copy_(value)
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    value.zero_()

    def step(timed):
        timed("model", graph.replay)
        return loss
    return step


def zoo_cases(wanted):
    """The zoo's training models (benchmarks/zoo_training.py: vit_tiny, llama,
    gpt2 at batch 8) named in `wanted`, as (name, module, inputs, loss_of):
    the model's call on the batch's input, then the loss of its output."""
    import importlib

    import zoo_training

    cases = []
    for name, make, library in zoo_training.MODELS:
        if not wanted or name not in wanted:
            continue
        importlib.import_module(library)
        torch.manual_seed(0)
        module, batch, _ = make()
        module = module.cuda().train()
        features, labels = (value.cuda() for value in batch)

        def loss_of(out, labels=labels):
            return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]),
                                                     labels.reshape(-1))
        cases.append((name, module, (features,), loss_of))
    return cases


def measure(step, clock, steps, profile_path=None, device_table=False, cpu_table=False):
    stage_times = {name: [] for name in STAGES}
    c_times = []

    def timed(name, function, *args):
        start = time.perf_counter()
        result = function(*args)
        stage_times[name].append(time.perf_counter() - start)
        return result

    def untimed(name, function, *args):
        return function(*args)

    for _ in range(BLOCK):
        step(untimed)
    torch.cuda.synchronize()
    # The stages' host time: no synchronization inside a block.
    for name in stage_times:
        stage_times[name].clear()
    clock.stages = {}
    for _ in range(max(1, steps // BLOCK)):
        for _ in range(BLOCK):
            c_before = clock.in_c
            step(timed)
            c_times.append(clock.in_c - c_before)
        torch.cuda.synchronize()
    row = {"host_%s_us" % name: statistics.median(values) * 1e6
           for name, values in stage_times.items()}
    row["host_sum_us"] = sum(row["host_%s_us" % name] for name in STAGES)
    row["grove_c_calls_us"] = statistics.median(c_times) * 1e6
    for name, values in clock.stages.items():
        row["grove_%s_python_us" % name] = statistics.median(values) * 1e6
    # The step's wall time, synchronized per block (as torch_backend.py times it).
    walls = []
    for _ in range(max(1, steps // BLOCK)):
        start = time.perf_counter()
        for _ in range(BLOCK):
            step(untimed)
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) / BLOCK * 1e6)
    row["step_us"] = statistics.median(walls)
    row.update(gradients_handed(step, untimed))
    if profile_path:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(100):
            step(untimed)
        torch.cuda.synchronize()
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(45)
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
        if cpu_table:
            text.write(host_profile(step, untimed))
        if device_table:
            text.write(device_profile(step, untimed))
        with open(profile_path, "w") as out:
            out.write(text.getvalue())
    return row


def host_profile(step, untimed, steps=20):
    """torch.profiler's table of `steps` steps, host events only, by their
    own host time: the ATen calls, autograd nodes (AccumulateGrad, the door's
    backward) and record_function ranges a step makes, with their counts."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            for _ in range(steps):
                step(untimed)
            torch.cuda.synchronize()
        averages = profiler.key_averages()
        return "\n== torch.profiler, %d steps, host events by own time\n%s\n" \
            "== the same by total host time\n%s" % (
                steps, averages.table(sort_by="self_cpu_time_total", row_limit=45),
                averages.table(sort_by="cpu_time_total", row_limit=30))
    except Exception as error:  # the profiler is a diagnostic: its failure is reported
        return "\n== torch.profiler failed: %s: %s\n" % (type(error).__name__, error)


def device_profile(step, untimed, steps=10):
    """torch.profiler's table of 10 steps, by device time: the kernels a
    step runs (a CUDA graph's kernels too, where CUPTI reports them)."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
            for _ in range(steps):
                step(untimed)
            torch.cuda.synchronize()
        return "\n== torch.profiler, %d steps, by device time\n%s" % (
            steps, profiler.key_averages().table(sort_by="cuda_time_total", row_limit=40))
    except Exception as error:  # the profiler is a diagnostic: its failure is reported
        return "\n== torch.profiler failed: %s: %s\n" % (type(error).__name__, error)


def gradients_handed(step, untimed):
    """After one more step: how many parameters' .grad are the gradients a
    grove backward handed out (Note [Gradients handed out of the pool]) and
    how many are copies autograd made of them (its AccumulateGrad clones a
    gradient it may not steal)."""
    from grove import gradients

    step(untimed)
    torch.cuda.synchronize()
    if not gradients._handed_gradients:
        return {}
    references, pointers = gradients._handed_gradients[-1]
    landed = copied = 0
    for reference, pointer in zip(references, pointers):
        parameter = reference()
        if parameter is None or parameter.grad is None:
            continue
        if parameter.grad.data_ptr() == pointer:
            landed += 1
        else:
            copied += 1
    return {"grads_uncopied": landed, "grads_copied": copied}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="door_stages.json")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--variants", default="grove,grove_optim,torch_reduce_overhead")
    parser.add_argument("--profile", default=None, help="a folder for cProfile listings")
    parser.add_argument("--device-profile", action="store_true",
                        help="with --profile, add torch.profiler's table of device time; the "
                        "variants after it run slower (Note [Training variants measured apart] "
                        "in torch_backend.py), so profile one variant per process")
    parser.add_argument("--optimizer", default="fused_adamw", choices=OPTIMIZERS,
                        help="PyTorch's optimizer of the door and reduce-overhead variants")
    parser.add_argument("--cpu-table", action="store_true",
                        help="with --profile, add torch.profiler's table of host events "
                        "(no device activity)")
    parser.add_argument("--models", default="",
                        help="comma-separated model names to run (default: all)")
    args = parser.parse_args()
    from torch_backend import skipped_without_cuda_or_dynamo, training_cases

    if skipped_without_cuda_or_dynamo("door_stages"):
        return 0
    import door_host_time
    import grove.torch  # noqa: F401 (registers the backend)

    torch.backends.cuda.matmul.allow_tf32 = False
    # grove's log (INFO): which training graphs fall back to AOTAutograd's runtime, and why.
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("grove").setLevel(logging.INFO)
    clock = door_host_time.Clock()
    door_host_time.instrument(clock)
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    rows = []
    wanted = set(args.models.split(",")) if args.models else None
    for name, module, inputs, loss_of in training_cases() + zoo_cases(wanted):
        if wanted and name not in wanted:
            continue
        for variant in args.variants.split(","):
            from grove import door_function

            taken = door_function.taken
            try:
                step = step_of(module, inputs, loss_of, variant, optimizer_name=args.optimizer)
                path = (os.path.join(args.profile, "%s_%s_%s.txt" % (name, variant,
                                                                     args.optimizer))
                        if args.profile else None)
                row = measure(step, clock, args.steps, path, args.device_profile,
                              args.cpu_table)
            except Exception as error:  # one variant failing leaves the others' numbers
                traceback.print_exc()
                row = {"error": "%s: %s" % (type(error).__name__, error)}
            row.update(model=name, variant=variant, optimizer=args.optimizer,
                       door_function_graphs=door_function.taken - taken)
            rows.append(row)
            print(json.dumps({key: round(value, 1) if isinstance(value, float) else value
                              for key, value in row.items()}), flush=True)
    header = "%-16s %-22s" % ("model", "variant") + "".join(
        "%11s" % name[:10] for name in STAGES) + "%9s %9s %9s %9s %9s" % (
        "host sum", "grove C", "fw py", "bw py", "step")
    print(header)
    print("-" * len(header))
    for row in rows:
        if "error" in row:
            print("%-16s %-22s %s" % (row["model"], row["variant"], row["error"]))
            continue
        print("%-16s %-22s" % (row["model"], row["variant"]) + "".join(
            "%11.1f" % row["host_%s_us" % name] for name in STAGES) + "%9.1f %9.1f %9.1f %9.1f %9.1f"
            % (row["host_sum_us"], row["grove_c_calls_us"],
               row.get("grove_forward_python_us", 0.0), row.get("grove_backward_python_us", 0.0),
               row["step_us"]))
    with open(args.json, "w") as out:
        json.dump({"benchmark": "door_stages", "torch": torch.__version__,
                   "device": torch.cuda.get_device_name(), "steps": args.steps, "rows": rows},
                  out, indent=2)
    print("wrote %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
