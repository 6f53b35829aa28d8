"""Per-call latency of the same nn.Module under torch eager,
torch.compile(mode="reduce-overhead") and torch.compile(backend="grove"), in
one process on one GPU (ratios, not lone absolute times), and the Python-side
cost of the grove backend: its call minus the same grove CompiledModel called
from C++ (grove_model_time_runs) on the same inputs.

    python3 benchmarks/torch_backend.py [--json out.json] [--repeats 200]

Prints a table and writes JSON. Each variant warms up (20 calls), then is
timed as `repeats` calls in blocks of 20, each block ended by a device
synchronization; the median and spread (p10-p90) are over blocks. Skips (exit
0, says so) without CUDA or without torch._dynamo.
"""
import argparse
import importlib
import json
import os
import statistics
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, os.path.join(here, "..", "python"))

BLOCK = 20


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="torch_backend.json")
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("torch_backend: skipped: no CUDA device")
        return 0
    try:
        importlib.import_module("torch._dynamo")
    except ImportError:
        print("torch_backend: skipped: this PyTorch (%s) has no torch._dynamo" % torch.__version__)
        return 0
    import grove.torch  # registers the backend
    import gpu_models

    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for name, module, inputs in gpu_models.cases("cuda"):
        if name.startswith("transformer_encoder"):
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
