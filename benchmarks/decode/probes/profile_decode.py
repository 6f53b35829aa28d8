#!/usr/bin/env python3
"""Where one decode step's time goes, with torch.profiler (GPU host only; it has no nsys).

  profile_decode.py --lib bazel-out/k8-opt/bin/benchmarks/decode/libgrove_decode.so \\
      [--csv KERNELS.csv] [--sequence] -- --configs 1b --batches 1 --steps 32 --repeats 1
  profile_decode.py --lib ... --plain -- load --config 1b ...   (no profiler: the binary's role)

Runs the decode benchmark in this process (libgrove_decode.so exports
grove_decode_main, decode.cc) under torch.profiler, whose CUPTI activity trace
sees every kernel of the process, graph nodes included. Without --lib (or with
--csv-in) it summarises a kernel CSV written earlier. The trace is cut into
steps at each embedding gather (a step's first kernel); steps whose kernel
count is not the most common one (prefills) are dropped. Per kernel role (the
name, and for a GEMV the kernel before it, which tells the output projection
from the down projection and the LM head) it prints launches per step, the
median duration, the median end-to-end increment (this kernel's end less the
previous kernel's end: what the kernel adds to the step, launch gaps and
programmatic-launch overlap included), the weight GB/s over that increment
where the 1B config's bytes are known, and each role's share of the step.
"""
import argparse
import collections
import csv
import ctypes
import json
import os
import statistics
import sys
import tempfile

GEMV_PREFIXES = ("grove_small_m_gemv",)
MB = 1 << 20


def short(name):
    # Generated kernels carry a hash suffix: rms_norm_97323f4eb8b2 -> rms_norm.
    head, _, tail = name.rpartition("_")
    if head and len(tail) == 12 and all(c in "0123456789abcdef" for c in tail):
        return head
    return name


def role_bytes(role):
    """Weight bytes one launch of `role` reads in the 1B config (bf16), or None."""
    kernel, _, before = role.partition("<-")
    if kernel.startswith("grove_rms_norm_swiglu"):
        return 2 * 8192 * 2048 * 2
    if kernel.startswith("grove_rms_norm_gemv"):
        return 32000 * 2048 * 2 if kernel.endswith("f32out") else 3072 * 2048 * 2
    if kernel.startswith(GEMV_PREFIXES):
        if before.startswith("grove_decode_attention"):
            return 2048 * 2048 * 2
        if before.startswith("grove_rms_norm_swiglu"):
            return 8192 * 2048 * 2
        if before.startswith("rms_norm"):
            return 32000 * 2048 * 2
    return None


def call_decode(lib_path, argv):
    """grove_decode_main(argv) of the library, in this process; its return code."""
    lib = ctypes.CDLL(os.path.abspath(lib_path))
    lib.grove_decode_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    args = [b"decode"] + [a.encode() for a in argv]
    c_argv = (ctypes.c_char_p * (len(args) + 1))(*args, None)
    sys.stdout.flush()
    return lib.grove_decode_main(len(args), c_argv)


def run_profiled(lib_path, argv, csv_path):
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context exists before grove's first call
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        rc = call_decode(lib_path, argv)
    if rc != 0:
        raise SystemExit("grove_decode_main returned %d" % rc)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        trace_path = handle.name
    prof.export_chrome_trace(trace_path)
    with open(trace_path) as handle:
        events = json.load(handle)["traceEvents"]
    os.unlink(trace_path)
    kernels = sorted((e["ts"], e["dur"], e["name"]) for e in events
                     if e.get("ph") == "X" and e.get("cat") == "kernel")
    with open(csv_path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["start_us", "duration_us", "name"])
        writer.writerows(kernels)
    return kernels


def read_csv(path):
    with open(path) as handle:
        return [(float(r["start_us"]), float(r["duration_us"]), r["name"])
                for r in csv.DictReader(handle)]


def summarize(kernels, sequence=False):
    steps = []
    for start, duration, name in kernels:
        name = short(name)
        if name.startswith("embedding"):
            steps.append([])
        if steps:
            steps[-1].append((start, duration, name))
    if len(steps) < 3:
        raise SystemExit("found %d steps (an embedding gather starts each) among %d kernels"
                         % (len(steps), len(kernels)))
    steps = steps[:-1]  # the last may run into what follows
    counts = collections.Counter(len(s) for s in steps)
    print("%d steps cut; kernel counts %s" % (len(steps), dict(counts.most_common(6))))
    # One summary per kernel count that at least a fifth of the steps have (one per config).
    for count, seen in counts.most_common():
        if seen >= len(steps) / 5:
            summarize_steps([s for s in steps if len(s) == count], sequence)


def summarize_steps(kept, sequence):
    print("\n== %d steps of %d kernels" % (len(kept), len(kept[0])))
    spans = [s[-1][0] + s[-1][1] - s[0][0] for s in kept]
    busy = [sum(d for _, d, _ in s) for s in kept]
    starts = sorted(s[0][0] for s in kept)
    periods = [b - a for a, b in zip(starts, starts[1:]) if b - a < 3 * statistics.median(spans)]
    print("step span (first start to last end) median %.1f us; start to next start median %.1f "
          "us; kernel busy time median %.1f us (sum of durations, overlaps counted twice)" % (
              statistics.median(spans), statistics.median(periods) if periods else float("nan"),
              statistics.median(busy)))
    roles, order = {}, []
    for s in kept:
        previous_end, previous = s[0][0], ""
        for index, (start, duration, name) in enumerate(s):
            role = "%s<-%s" % (name, previous) if name.startswith(GEMV_PREFIXES) else name
            if role not in roles:
                roles[role] = {"dur": [], "inc": [], "gap": [], "count": 0}
                order.append(role)
            entry = roles[role]
            end = start + duration
            entry["dur"].append(duration)
            entry["inc"].append(end - previous_end if index else duration)
            entry["gap"].append(start - previous_end if index else 0.0)
            previous_end, previous = max(previous_end, end), name
    print("%-58s %5s %8s %8s %8s %7s %8s" % ("role", "n/step", "med us", "gap us", "inc us",
                                             "GB/s", "us/step"))
    total = 0.0
    rows = []
    for role in order:
        entry = roles[role]
        per_step = len(entry["dur"]) / len(kept)
        inc = statistics.median(entry["inc"])
        share = sum(entry["inc"]) / len(kept)
        total += share
        known = role_bytes(role)
        gbps = "%7.0f" % (known / (inc * 1e-6) / 1e9) if known and inc > 0 else "      -"
        rows.append((share, role))
        print("%-58s %5.1f %8.2f %8.2f %8.2f %s %8.1f" % (
            role[:58], per_step, statistics.median(entry["dur"]), statistics.median(entry["gap"]),
            inc, gbps, share))
    print("sum of increments: %.1f us per step (the step span)" % total)
    if sequence:
        s = kept[len(kept) // 2]
        print("one step in order (start offset, duration us):")
        for start, duration, name in s:
            print("  %9.2f %7.2f  %s" % (start - s[0][0], duration, name[:80]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lib", help="libgrove_decode.so; without it, --csv-in is summarised")
    parser.add_argument("--csv", default="decode_kernels.csv", help="kernel trace written here")
    parser.add_argument("--csv-in", help="summarise this kernel CSV (no run)")
    parser.add_argument("--sequence", action="store_true", help="print one step's kernels")
    parser.add_argument("--plain", action="store_true",
                        help="run the benchmark without the profiler (the decode binary's role)")
    parser.add_argument("decode_args", nargs="*", help="decode's flags, after --")
    args = parser.parse_args()
    if args.plain:
        if not args.lib:
            parser.error("--plain needs --lib")
        raise SystemExit(call_decode(args.lib, args.decode_args))
    if args.csv_in:
        kernels = read_csv(args.csv_in)
    elif args.lib:
        kernels = run_profiled(args.lib, args.decode_args, args.csv)
    else:
        parser.error("give --lib (run and profile) or --csv-in (summarise)")
    summarize(kernels, args.sequence)


if __name__ == "__main__":
    main()
