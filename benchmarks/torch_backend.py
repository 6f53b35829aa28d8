"""Per-call latency of the same nn.Module under torch eager,
torch.compile(mode="reduce-overhead") and torch.compile(backend="grove"), in
one process on one GPU (ratios, not lone absolute times), and the Python-side
cost of the grove backend: its call minus the same grove CompiledModel called
from C++ (grove_model_time_runs) on the same inputs.

    python3 benchmarks/torch_backend.py [--json out.json] [--repeats 200] [--models a,b]
    python3 benchmarks/torch_backend.py --train [--json out.json] [--variants grove,grove_step]
        [--isolate]

--train times one training step (forward, loss, backward, AdamW with
fused=True) of mlp16x512 b=32 and gpt4x256 b=8 T=32 under torch eager,
torch.compile(mode="reduce-overhead") (the model compiled, the optimizer's
step eager), the same with the optimizer's step compiled too
(torch_reduce_overhead_opt: torch.compile(optimizer.step) of the foreach
AdamW, PyTorch's compiled-optimizer recipe, inductor's default mode (Note [The
compiled optimizer without CUDA graphs]); like with like for grove_optim,
whose update is one compiled graph),
the whole step captured by hand with
torch.cuda.graph (PyTorch's kernels with no launch overhead; AdamW
capturable), backend="grove" with PyTorch's optimizer and with grove.torch.optim
(grove/r-o: the latter over reduce-overhead, door/r-o: the former; the
issue's goal is <= 0.5; grove_optim/r-o_opt: the former over
torch_reduce_overhead_opt), backend="grove" with PyTorch's optimizer run by
grove's own autograd function (grove_fn, GROVE_DOOR_FUNCTION=1: the default,
as "grove") and by AOTAutograd's runtime (grove_aot, GROVE_DOOR_FUNCTION=0), and the whole step as grove graphs
(grove.training.compile_step with AdamW, run as grove's update; step/r-o;
grove_step_sgd: with SGD momentum 0.9, the optimizer of grove's C++ trainer,
benchmarks/train_step); floor: a backend that computes nothing (Note [The
door's training floor]), what any backend pays through the door with PyTorch's
optimizer; grove_direct and grove_optim_direct: grove and
grove_optim with GROVE_DOOR_GRADIENTS=direct (Note [Gradients set directly by
the door's function]: the door's backward sets .grad, no AccumulateGrad per
parameter), and grove_optim_in_backward: grove.torch.optim.AdamW with
update_in_backward=True (Note [The optimizer's update inside the door's
backward]: the update replayed at the end of the door's backward, step() a
no-op), each printed over reduce-overhead.

Prints a table and writes JSON. Each variant warms up (20 calls), then is
timed as `repeats` calls in blocks of 20, each block ended by a device
synchronization; the median and spread (p10-p90) are over blocks. Skips (exit
0, says so) without CUDA or without torch._dynamo.
"""
import argparse
import contextlib
import importlib
import json
import os
import statistics
import sys
import time
import traceback

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, os.path.join(here, "..", "python"))

BLOCK = 20


@contextlib.contextmanager
def environment(settings):
    """The environment variables of `settings` ({NAME: VALUE}) set while the
    block runs (grove reads its switches when a graph compiles); each one's
    earlier value, or its absence, comes back after. The benchmarks' A/Bs of
    grove's switches in one process (torch_zoo, ddp_door, door_stages)."""
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def time_calls(function, inputs, repeats):
    with torch.no_grad():
        for _ in range(BLOCK):
            function(*inputs)
        torch.cuda.synchronize()
        per_call = []
        for _ in range(max(1, repeats // BLOCK)):
            start = time.perf_counter()
            for _ in range(BLOCK):
                function(*inputs)
            torch.cuda.synchronize()
            per_call.append((time.perf_counter() - start) / BLOCK * 1e6)
    per_call.sort()
    return {
        "median_us": statistics.median(per_call),
        "p10_us": per_call[int(0.1 * (len(per_call) - 1))],
        "p90_us": per_call[int(0.9 * (len(per_call) - 1))],
    }


def grove_cxx_time(repeats):
    """The C++ time of the last graph grove compiled, when it is one grove
    segment: the same CompiledModel called from C++ (grove_model_time_runs)
    on the example inputs the graph was compiled with."""
    import grove.torch

    graphs = grove.torch.compiled_graphs()
    if not graphs or graphs[-1].runner._fast is None:
        return None  # split graphs have no single C++ call to compare with
    runner = graphs[-1].runner
    fast = runner._fast
    examples = [node.meta.get("grove_example") for node in runner.plan.placeholders]
    inputs = [examples[position] for position in fast["inputs"]]
    stream = torch.cuda.current_stream().cuda_stream or None
    model = fast["model"]
    model.time_runs(*inputs, calls=BLOCK, stream=stream)
    samples = sorted(model.time_runs(*inputs, calls=BLOCK, stream=stream) * 1e6
                     for _ in range(max(1, repeats // BLOCK)))
    return statistics.median(samples)


# Note [At least five blocks per training variant]: a training step's block
# of 20 steps varies by +-15% from block to block on these hosts (r1 of
# session 19, H200: one variant's 10 interleaved blocks spanned 1578-2008 us).
# Session 18's final call ran --repeats 30, which gave one block per variant:
# its "GROVE_DOOR_GRADIENTS=direct is 600 us slower" (1957.5 against 1345.8)
# was one block each, in separate processes; interleaved over 10 blocks in
# one process (door_timeline.py, r1 of session 19) the direct path was 0.84x
# of the default. So a training variant is timed over at least five blocks.
MIN_TRAIN_BLOCKS = 5


def time_steps(step, repeats):
    """Median and spread of one training step (`step()`), in microseconds,
    over at least MIN_TRAIN_BLOCKS blocks of BLOCK steps (Note [At least
    five blocks per training variant])."""
    for _ in range(BLOCK):
        step()
    torch.cuda.synchronize()
    per_step = []
    for _ in range(max(MIN_TRAIN_BLOCKS, repeats // BLOCK)):
        start = time.perf_counter()
        for _ in range(BLOCK):
            step()
        torch.cuda.synchronize()
        per_step.append((time.perf_counter() - start) / BLOCK * 1e6)
    per_step.sort()
    return {"median_us": statistics.median(per_step),
            "p10_us": per_step[int(0.1 * (len(per_step) - 1))],
            "p90_us": per_step[int(0.9 * (len(per_step) - 1))]}


def training_cases():
    import gpu_models

    torch.manual_seed(0)
    target = torch.randn(32, 512, device="cuda")
    tokens = torch.randint(0, 512, (8, 33), device="cuda")
    return [
        ("mlp16x512_b32", gpu_models.Mlp().cuda(), (torch.randn(32, 512, device="cuda"),),
         lambda out: torch.nn.functional.mse_loss(out, target)),
        ("gpt4x256_b8_t32", gpu_models.Gpt().cuda(), (tokens[:, :-1].contiguous(),),
         lambda out: torch.nn.functional.cross_entropy(out.reshape(-1, 512),
                                                       tokens[:, 1:].reshape(-1))),
    ]


TREE_COUNTERS = ("replays", "recordings", "warmups", "eager_calls", "input_copies",
                 "outputs_poisoned", "outputs_cloned", "rerecords")


def tree_counters():
    """{id of a live door model: its tree's counters} (the door's training
    graphs of one step share the calling thread's tree)."""
    from grove import dynamo_backend

    counters = {}
    for runner in list(dynamo_backend._live_runners):
        for model in runner.models():
            tree = model.stats().get("tree", {})
            counters[id(model)] = {key: tree.get(key, 0) for key in TREE_COUNTERS}
    return counters


def tree_per_step(step, steps=20):
    """The counters per step, over `steps` more steps, of the tree that
    moved most (this variant's: earlier variants' trees stand still):
    whether the door's steps replay, run eagerly or record."""
    import gc

    gc.collect()
    before = tree_counters()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    after = tree_counters()
    moved = []
    for key, counts in after.items():
        start = before.get(key, dict.fromkeys(TREE_COUNTERS, 0))
        moved.append({name: (counts[name] - start[name]) / steps for name in TREE_COUNTERS})
    return max(moved, key=lambda d: d["replays"] + d["eager_calls"] + d["recordings"],
               default={})


# Note [The door's training floor]: the least a backend's training step can
# cost through torch.compile with PyTorch's optimizer. The "floor" variant's
# backend computes nothing per call: one autograd.Function over the graph's
# inputs whose forward returns aliases of the outputs of one eager run at
# compilation and whose backward returns aliases of zero gradients (fresh
# tensor objects, so AccumulateGrad takes them as it takes grove's). What is
# left is dynamo (guards, bytecode), Function.apply over every parameter,
# the autograd engine (its device thread, one AccumulateGrad per parameter),
# the eager loss, zero_grad and optimizer.step, which every backend pays. A
# door step at or under half of reduce-overhead's needs this floor well under
# it. Its losses are not a model's (the weights' updates never reach the
# outputs).
def floor_backend(gm, example_inputs):
    """A dynamo backend that runs nothing per call (Note [The door's training floor])."""
    with torch.no_grad():
        outputs = gm(*example_inputs)
    single = not isinstance(outputs, (tuple, list))
    outputs = [outputs] if single else list(outputs)
    outputs = [value.detach() if isinstance(value, torch.Tensor) else value
               for value in outputs]
    gradients = [torch.zeros_like(value) if isinstance(value, torch.Tensor)
                 and value.requires_grad else None for value in example_inputs]

    class Floor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            return tuple(value.detach() for value in outputs)

        @staticmethod
        def backward(ctx, *output_gradients):
            return tuple(None if value is None else value.detach() for value in gradients)

    apply = Floor.apply
    if single:
        return lambda *args: apply(*args)[0]
    return apply


def train_variant(module, inputs, loss_of, variant):
    """A step function of `variant` over a copy of `module`."""
    import copy

    model = copy.deepcopy(module)
    capturable = variant == "cuda_graph"
    if variant in ("grove_step", "grove_step_sgd"):
        import grove.training

        # grove_step_sgd: SGD with momentum 0.9, the optimizer of grove's C++
        # trainer (benchmarks/train_step), for the goal whole step <= 1.2x it.
        optimizer = (torch.optim.AdamW(model.parameters(), lr=1e-4) if variant == "grove_step"
                     else torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9))
        whole = grove.training.compile_step(
            model, lambda forward, *args: loss_of(forward(*args)), optimizer)
        return lambda: whole(*inputs)
    if variant.endswith("_direct"):
        # Note [Gradients set directly by the door's function]: the variant
        # with GROVE_DOOR_GRADIENTS=direct, compiled by a first step right here.
        step = train_variant(module, inputs, loss_of, variant[:-len("_direct")])
        with environment({"GROVE_DOOR_GRADIENTS": "direct"}):
            step()
        return step
    if variant in ("grove_fn", "grove_aot"):
        # backend="grove" with Note [The door's own autograd function] on
        # (grove_fn; the default, so "grove" too) or off (grove_aot:
        # AOTAutograd's runtime), compiled by a first step right here.
        step = train_variant(module, inputs, loss_of, "grove_plain")
        with environment({"GROVE_DOOR_FUNCTION": "1" if variant == "grove_fn" else "0"}):
            step()
        return step
    if variant in ("grove_optim", "grove_optim_in_backward"):
        import grove.torch

        # grove_optim_in_backward: the update at the end of the door's
        # backward (Note [The optimizer's update inside the door's backward]).
        optimizer = grove.torch.optim.AdamW(
            model.parameters(), lr=1e-4,
            update_in_backward=variant == "grove_optim_in_backward")
    elif variant == "torch_reduce_overhead_opt":
        # PyTorch's compiled-optimizer recipe: the foreach AdamW, which dynamo
        # traces into one graph (r1 of session 17: the fused one gave the
        # backend no graph).
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True,
                                      capturable=capturable)
    torch._dynamo.reset()
    update = optimizer.step
    if variant == "torch_reduce_overhead_opt":
        # Like with like for grove_optim (an optimizer step compiled): PyTorch's
        # own, the step compiled by inductor (default mode: fused foreach
        # kernels, no CUDA graph). Note [The compiled optimizer without CUDA
        # graphs]: in reduce-overhead mode it fails.
        update = torch.compile(optimizer.step)
    if variant in ("torch_reduce_overhead", "torch_reduce_overhead_opt"):
        run = torch.compile(model, mode="reduce-overhead", dynamic=False)
    elif variant == "floor":
        run = torch.compile(model, backend=floor_backend, dynamic=False)
    elif variant.startswith("grove"):
        run = torch.compile(model, backend="grove", dynamic=False,
                            options={"mode": "eager" if variant == "grove_eager" else "cudagraphs"})
    else:
        run = model

    def step():
        optimizer.zero_grad(set_to_none=not capturable)
        loss = loss_of(run(*inputs))
        loss.backward()
        update()
        return loss

    if not capturable:
        return step
    from compare_torch import capture_graph  # benchmarks/, this script's folder

    graph, _ = capture_graph(torch, step, step)
    return graph.replay


# Note [The compiled optimizer without CUDA graphs]: torch.compile(optimizer.step,
# mode="reduce-overhead") after a reduce-overhead model fails on PyTorch 2.11
# (H100, r1 of session 18, and the final lease of session 17): the optimizer's
# CUDA graph warm-up reads the gradients, outputs of the backward's CUDA graph,
# and cudagraph trees refuse them ("accessing tensor output of CUDAGraphs that
# has been overwritten by a subsequent run"): the optimizer's graph begins a new
# generation of the tree, and the backward's outputs belong to the last one. So
# torch_reduce_overhead_opt compiles the step in inductor's default mode, the
# recipe of PyTorch's compiled-optimizer tutorial.
TRAIN_VARIANTS = ("torch_eager", "torch_reduce_overhead", "torch_reduce_overhead_opt",
                  "floor", "cuda_graph", "grove_eager", "grove", "grove_fn", "grove_aot",
                  "grove_optim", "grove_direct", "grove_optim_direct", "grove_optim_in_backward",
                  "grove_step", "grove_step_sgd")


# Note [Training variants measured apart]: in one process, a variant's step
# gets slower the more variants ran before it (on an H100, r1 of session 17:
# the same eager zero_grad, loss and fused AdamW took 49, 63 and 253 us in the
# first variant and 72, 116 and 448 us in the third, after two torch.profiler
# sessions; without a profiler, session 16's two identical door variants in a
# row took 1566 and 1674 us), so the order of the variants biased their ratios.
# --isolate runs each (model, variant) in a fresh interpreter of its own, at
# the cost of a start-up per variant.
def isolated_variant(model, variant, repeats):
    """The JSON entry of `variant` of `model`, measured by this script in a
    child process of its own (Note [Training variants measured apart])."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "row.json")
        command = [sys.executable, os.path.abspath(__file__), "--train", "--models", model,
                   "--variants", variant, "--repeats", str(repeats), "--json", path]
        completed = subprocess.run(command, capture_output=True, text=True)
        if completed.returncode != 0 or not os.path.exists(path):
            tail = (completed.stdout + completed.stderr).strip().splitlines()[-3:]
            return {"error": "child exited %d: %s" % (completed.returncode, " | ".join(tail))}
        with open(path) as handle:
            rows = json.load(handle)["rows"]
    return rows[0].get(variant, {"error": "the child wrote no %s" % variant})


def wanted_models(models_arg, known):
    """The models --models names (None: all), refusing a name no case has:
    a misspelt model would otherwise leave an empty table that looks run."""
    if not models_arg:
        return None
    wanted = set(models_arg.split(","))
    unknown = sorted(wanted - set(known))
    if unknown:
        raise SystemExit("torch_backend: unknown --models %s (known: %s)"
                         % (",".join(unknown), ",".join(known)))
    return wanted


def train_main(args):
    variants = args.variants.split(",") if args.variants else list(TRAIN_VARIANTS)
    unknown = sorted(set(variants) - set(TRAIN_VARIANTS))
    if unknown:
        raise SystemExit("torch_backend: unknown --variants %s (known: %s)"
                         % (",".join(unknown), ",".join(TRAIN_VARIANTS)))
    rows = []
    cases = list(training_cases())
    wanted = wanted_models(args.models, [case[0] for case in cases])
    for name, module, inputs, loss_of in cases:
        if wanted and name not in wanted:
            continue
        row = {"model": name}
        for variant in variants:
            if args.isolate:
                row[variant] = isolated_variant(name, variant, args.repeats)
            else:
                try:
                    step = train_variant(module, inputs, loss_of, variant)
                    row[variant] = time_steps(step, args.repeats)
                    if variant in ("grove", "grove_fn", "grove_aot", "grove_optim",
                                   "grove_eager", "grove_direct", "grove_optim_direct",
                                   "grove_optim_in_backward"):
                        row[variant]["tree_per_step"] = tree_per_step(step)
                except Exception as error:  # one variant failing leaves the others' numbers
                    traceback.print_exc()
                    row[variant] = {"error": "%s: %s" % (type(error).__name__, error)}
            # As it comes, so a run cut short still shows what it measured.
            print("%s %s: %s" % (name, variant, "%.1f us" % row[variant]["median_us"]
                                 if "median_us" in row[variant] else "failed"), flush=True)
        base = row.get("torch_reduce_overhead", {}).get("median_us")
        # grove/r-o: grove.torch.optim's step (as before); door/r-o: PyTorch's AdamW.
        grove_us = row.get("grove_optim", {}).get("median_us")
        row["grove_over_reduce_overhead"] = grove_us / base if base and grove_us else None
        door_us = row.get("grove", {}).get("median_us")
        row["grove_door_over_reduce_overhead"] = door_us / base if base and door_us else None
        for direct in ("floor", "grove_direct", "grove_optim_direct", "grove_optim_in_backward"):
            direct_us = row.get(direct, {}).get("median_us")
            row["%s_over_reduce_overhead" % direct] = (direct_us / base if base and direct_us
                                                       else None)
        step_us = row.get("grove_step", {}).get("median_us")
        row["grove_step_over_reduce_overhead"] = step_us / base if base and step_us else None
        # Like with like: both optimizer steps captured (Note in the docstring).
        base_opt = row.get("torch_reduce_overhead_opt", {}).get("median_us")
        row["grove_optim_over_reduce_overhead_opt"] = (grove_us / base_opt if base_opt and grove_us
                                                       else None)
        rows.append(row)
    header = ("%-18s" % "model" + "".join("%24s" % v for v in variants) + "%12s" % "grove/r-o"
              + "%12s" % "door/r-o" + "%12s" % "step/r-o" + "%14s" % "optim/r-o_opt")
    print(header)
    print("-" * len(header))
    for row in rows:
        cells = []
        for variant in variants:
            entry = row[variant]
            cells.append("%24s" % ("%.1f us" % entry["median_us"] if "median_us" in entry
                                   else "failed"))
        ratios = [row["grove_over_reduce_overhead"], row["grove_door_over_reduce_overhead"],
                  row["grove_step_over_reduce_overhead"]]
        like = row["grove_optim_over_reduce_overhead_opt"]
        print("%-18s" % row["model"] + "".join(cells) +
              "".join("%12s" % ("-" if ratio is None else "%.2f" % ratio) for ratio in ratios) +
              "%14s" % ("-" if like is None else "%.2f" % like))
        for direct in ("floor", "grove_direct", "grove_optim_direct", "grove_optim_in_backward"):
            if row.get("%s_over_reduce_overhead" % direct) is not None:
                print("  %s %s/r-o: %.2f" % (row["model"], direct,
                                             row["%s_over_reduce_overhead" % direct]))
        for variant in variants:
            if "error" in row[variant]:
                print("  %s %s: %s" % (row["model"], variant, row[variant]["error"]))
            if row[variant].get("tree_per_step"):
                print("  %s %s per step: %s" % (row["model"], variant, ", ".join(
                    "%s %.2f" % item for item in sorted(row[variant]["tree_per_step"].items())
                    if item[1])))
    result = {"benchmark": "torch_backend_train", "torch": torch.__version__,
              "device": torch.cuda.get_device_name(), "repeats": args.repeats, "rows": rows}
    with open(args.json, "w") as out:
        json.dump(result, out, indent=2)
    print("wrote %s" % args.json)
    return 0


def skipped_without_cuda_or_dynamo(name):
    """True, having said why, where this machine cannot run the PyTorch
    benchmark `name` (no CUDA device, or a PyTorch without torch._dynamo)."""
    if not torch.cuda.is_available():
        print("%s: skipped: no CUDA device" % name)
        return True
    try:
        importlib.import_module("torch._dynamo")
    except ImportError:
        print("%s: skipped: this PyTorch (%s) has no torch._dynamo" % (name, torch.__version__))
        return True
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="torch_backend.json")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--train", action="store_true",
                        help="time training steps instead of inference calls")
    parser.add_argument("--models", default="",
                        help="comma-separated model names to run (default: all)")
    parser.add_argument("--variants", default="",
                        help="--train: comma-separated variants (default: all of %s)"
                        % ",".join(TRAIN_VARIANTS))
    parser.add_argument("--isolate", action="store_true",
                        help="--train: each variant in a process of its own (Note [Training "
                        "variants measured apart])")
    args = parser.parse_args()
    if skipped_without_cuda_or_dynamo("torch_backend"):
        return 0
    import grove.torch  # registers the backend
    import gpu_models

    torch.backends.cuda.matmul.allow_tf32 = False
    if args.train:
        return train_main(args)
    rows = []
    cases = list(gpu_models.cases("cuda"))
    wanted = wanted_models(args.models, [case[0] for case in cases])
    for name, module, inputs in cases:
        if name.startswith("transformer_encoder") or (wanted and name not in wanted):
            continue
        row = {"model": name}
        row["torch_eager"] = time_calls(module, inputs, args.repeats)
        torch._dynamo.reset()
        reduce_overhead = torch.compile(module, mode="reduce-overhead", dynamic=False)
        row["torch_reduce_overhead"] = time_calls(reduce_overhead, inputs, args.repeats)
        torch._dynamo.reset()
        grove_compiled = torch.compile(module, backend="grove", dynamic=False)
        row["grove"] = time_calls(grove_compiled, inputs, args.repeats)
        cxx = grove_cxx_time(args.repeats)
        row["grove_cxx_us"] = cxx
        grove_us = row["grove"]["median_us"]
        row["grove_over_reduce_overhead"] = grove_us / row["torch_reduce_overhead"]["median_us"]
        row["python_capi_cost_us"] = None if cxx is None else grove_us - cxx
        rows.append(row)
        # As it comes, so a run cut short still shows what it measured.
        print("%s: eager %.1f us, reduce-overhead %.1f us, grove %.1f us (%.2fx), C++ %s"
              % (name, row["torch_eager"]["median_us"], row["torch_reduce_overhead"]["median_us"],
                 grove_us, row["grove_over_reduce_overhead"],
                 "-" if cxx is None else "%.1f us" % cxx), flush=True)
        torch._dynamo.reset()

    header = "%-22s %12s %14s %12s %10s %12s %10s" % (
        "model", "eager us", "reduce-ovh us", "grove us", "grove/r-o", "grove C++ us",
        "py+C us")
    print(header)
    print("-" * len(header))
    for row in rows:
        cxx = row["grove_cxx_us"]
        print("%-22s %12.1f %14.1f %12.1f %10.2f %12s %10s" % (
            row["model"], row["torch_eager"]["median_us"],
            row["torch_reduce_overhead"]["median_us"], row["grove"]["median_us"],
            row["grove_over_reduce_overhead"], "-" if cxx is None else "%.1f" % cxx,
            "-" if row["python_capi_cost_us"] is None else "%.1f" % row["python_capi_cost_us"]))
    result = {"benchmark": "torch_backend", "torch": torch.__version__,
              "device": torch.cuda.get_device_name(), "repeats": args.repeats, "rows": rows}
    with open(args.json, "w") as out:
        json.dump(result, out, indent=2)
    print("wrote %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
