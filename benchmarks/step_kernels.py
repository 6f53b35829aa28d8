"""The kernels of one training step, for Nsight Systems: runs a variant of
benchmarks/torch_backend.py --train (grove's whole step, PyTorch's
hand-captured step, ...) with only its timed steps inside a CUDA profiler
range, so that `nsys profile --capture-range=cudaProfilerApi
--cuda-graph-trace=node` records those steps' kernels node by node and
nothing of compilation or warm-up; then (--summarize) reads nsys's
cuda_gpu_trace CSV of that run and prints per step: the kernels, their
summed GPU time, the GPU's busy span, and the kernels by total time.

    nsys profile -o OUT --capture-range=cudaProfilerApi --capture-range-end=stop \\
        --cuda-graph-trace=node -t cuda python3 benchmarks/step_kernels.py \\
        --variant grove_step --model gpt4x256_b8_t32 --steps 20
    nsys stats -r cuda_gpu_trace -f csv -o OUT OUT.nsys-rep
    python3 benchmarks/step_kernels.py --summarize OUT_cuda_gpu_trace.csv --steps 20
    python3 benchmarks/step_kernels.py --torch-profiler --variant grove_step  (no nsys)

Skips (exit 0, says so) without CUDA or torch._dynamo.
"""
import argparse
import collections
import csv
import os
import re
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, os.path.join(here, "..", "python"))

WARMUP = 30


def _warm_step(args):
    """--variant's training step of --model, warmed up, and its wall time per
    step (median µs over 100 steps); None where the benchmark skips."""
    import torch
    from torch_backend import (skipped_without_cuda_or_dynamo, time_steps, train_variant,
                               training_cases)

    if skipped_without_cuda_or_dynamo("step_kernels"):
        return None
    import grove.torch  # noqa: F401 (registers the backend)

    torch.backends.cuda.matmul.allow_tf32 = False
    cases = {name: (module, inputs, loss_of) for name, module, inputs, loss_of in
             training_cases()}
    if args.model not in cases:
        raise SystemExit("step_kernels: unknown --model %s (known: %s)"
                         % (args.model, ",".join(cases)))
    module, inputs, loss_of = cases[args.model]
    step = train_variant(module, inputs, loss_of, args.variant)
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    return step, time_steps(step, 100)["median_us"]


def run(args):
    import torch

    warm = _warm_step(args)
    if warm is None:
        return 0
    step, wall = warm
    torch.cuda.cudart().cudaProfilerStart()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    profiled = (time.perf_counter() - start) / args.steps * 1e6
    torch.cuda.cudart().cudaProfilerStop()
    print("%s %s: %.1f us per step (%.1f us per profiled step, %d steps in the range)"
          % (args.model, args.variant, wall, profiled, args.steps), flush=True)
    return 0


def profile_with_torch(args):
    """The kernels of --steps steps by torch.profiler (CUPTI reports a CUDA
    graph's kernels one by one), for hosts without nsys: per kernel name the
    launches and GPU time per step, and the summed kernel time per step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    warm = _warm_step(args)
    if warm is None:
        return 0
    step, wall = warm
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    kernels = [event for event in profiler.events()
               if getattr(event, "device_type", None) is not None
               and str(event.device_type).endswith("CUDA")]
    launches, total, lines = kernel_table(kernels, args.steps, args.top)
    print("%s %s: %.1f us per step; %.1f kernels and %.1f us of kernel time per step "
          "(torch.profiler)" % (args.model, args.variant, wall, launches / args.steps,
                                total / args.steps))
    print("\n".join(lines))
    return 0


def kernel_table(kernels, steps, top):
    """(launches, summed µs, table lines) of torch.profiler's kernel events
    over `steps` steps: per kernel name the launches and GPU time per step,
    the `top` names of most time first."""
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for event in kernels:
        entry = by_name[_short(event.name)]
        entry[0] += 1
        entry[1] += event.time_range.elapsed_us()
    total = sum(elapsed for _, elapsed in by_name.values())
    launches = sum(count for count, _ in by_name.values())
    lines = ["%8s %10s %9s %7s  %s" % ("per step", "us/step", "mean us", "share", "kernel")]
    for name, (count, elapsed) in sorted(by_name.items(), key=lambda item: -item[1][1])[:top]:
        share = 100.0 * elapsed / max(total, 1e-9)
        lines.append("%8.1f %10.1f %9.2f %6.1f%%  %s" % (
            count / steps, elapsed / steps, elapsed / count, share, name))
    return launches, total, lines


def _column(header, *names):
    for name in names:
        for index, title in enumerate(header):
            if title.strip().lower().startswith(name):
                return index
    raise SystemExit("step_kernels: no column %s in %s" % (names, header))


# Kernel names differ per launch in their template arguments only for a few
# libraries; keep the name up to its argument list, shortened.
def _short(name):
    name = re.sub(r"\(.*", "", name)
    return name if len(name) <= 90 else name[:87] + "..."


def summarize(args):
    with open(args.summarize) as handle:
        rows = list(csv.reader(handle))
    header = rows[0]
    start_at = _column(header, "start")
    duration_at = _column(header, "duration")
    name_at = _column(header, "name")
    kernels = []
    for row in rows[1:]:
        if len(row) <= max(start_at, duration_at, name_at):
            continue
        name = row[name_at]
        if name.startswith("[CUDA mem") or name.startswith("[CUDA memcpy") or not name:
            continue
        kernels.append((int(float(row[start_at])), int(float(row[duration_at])), name))
    if not kernels:
        print("no kernels in %s" % args.summarize)
        return 1
    kernels.sort()
    steps = args.steps
    busy_ns = sum(duration for _, duration, _ in kernels)
    span_ns = kernels[-1][0] + kernels[-1][1] - kernels[0][0]
    print("%d kernels over %d steps: %.1f per step; kernel time %.1f us per step; "
          "first-to-last span %.1f us per step (gaps %.1f us per step)"
          % (len(kernels), steps, len(kernels) / steps, busy_ns / steps / 1e3,
             span_ns / steps / 1e3, (span_ns - busy_ns) / steps / 1e3))
    by_name = collections.defaultdict(lambda: [0, 0])
    for _, duration, name in kernels:
        entry = by_name[_short(name)]
        entry[0] += 1
        entry[1] += duration
    print("%8s %10s %9s %7s  %s" % ("per step", "us/step", "mean us", "share", "kernel"))
    for name, (count, total) in sorted(by_name.items(), key=lambda item: -item[1][1])[:args.top]:
        print("%8.1f %10.1f %9.2f %6.1f%%  %s" % (count / steps, total / steps / 1e3,
                                                 total / count / 1e3, 100.0 * total / busy_ns,
                                                 name))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="grove_step")
    parser.add_argument("--model", default="gpt4x256_b8_t32")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--summarize", default=None,
                        help="an nsys cuda_gpu_trace CSV of a run of this script to summarize")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--torch-profiler", action="store_true",
                        help="list the kernels with torch.profiler instead (no nsys needed)")
    args = parser.parse_args()
    if args.summarize:
        return summarize(args)
    return profile_with_torch(args) if args.torch_profiler else run(args)


if __name__ == "__main__":
    sys.exit(main())
