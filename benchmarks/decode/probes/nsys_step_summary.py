#!/usr/bin/env python3
"""Where a decode step's time goes, from an nsys GPU trace (GPU host only).

  nsys profile --cuda-graph-trace=node -o REP decode --configs 1b --batches 1 ...
  nsys stats --report cuda_gpu_trace --format csv -o TRACE REP.nsys-rep
  nsys_step_summary.py TRACE_cuda_gpu_trace.csv [--step-start embedding]

Splits the kernel trace into steps (each begins with the step's first kernel,
the embedding gather), and prints per kernel role (name, and for grove's GEMV
the kernel before it, which tells the output projection from the down
projection) the launches, median duration, achieved GB/s where the role's
weight bytes are known (the LLaMA-1B config), and the median gap before it
(its start less the previous kernel's end): what a step spends in kernels and
between them.
"""
import csv
import statistics
import sys

MB = 1e6
# Weight bytes per launch of each role in the 1B config (bf16).
ROLE_BYTES = {
    "grove_rms_norm_gemv_bf16_m1": 3072 * 2048 * 2,
    "grove_small_m_gemv_bf16_m1<-grove_decode_attention_bf16_g4": 2048 * 2048 * 2,
    "grove_rms_norm_swiglu_bf16_m1": 2 * 8192 * 2048 * 2,
    "grove_small_m_gemv_bf16_m1<-grove_rms_norm_swiglu_bf16_m1": 8192 * 2048 * 2,
    "grove_small_m_gemv_bf16_m1_k4": 8192 * 2048 * 2,
    "grove_small_m_gemv_bf16_m1<-rms_norm": 32000 * 2048 * 2,
}
# Note [Streamed GEMV]: the same roles when the one-row GEMV runs streamed.
for _role in [r for r in ROLE_BYTES if r.startswith("grove_small_m_gemv_bf16_m1<-")]:
    ROLE_BYTES[_role.replace("grove_small_m_gemv_bf16_m1", "grove_small_m_gemv_streamed_bf16")] = \
        ROLE_BYTES[_role]


def short(name):
    # Generated kernels carry a hash suffix: rms_norm_97323f4eb8b2 -> rms_norm.
    head, _, tail = name.rpartition("_")
    if head and len(tail) == 12 and all(c in "0123456789abcdef" for c in tail):
        return head
    return name


def main():
    path = sys.argv[1]
    start_name = sys.argv[2] if len(sys.argv) > 2 else "embedding"
    rows = []
    with open(path) as f:
        reader = csv.DictReader(f)
        start_key = next(k for k in reader.fieldnames if k.startswith("Start"))
        duration_key = next(k for k in reader.fieldnames if k.startswith("Duration"))
        for row in reader:
            name = row.get("Name", "")
            if "[CUDA mem" in name or "memcpy" in name.lower() or "memset" in name.lower():
                continue
            start = float(row[start_key].replace(",", ""))
            duration = float(row[duration_key].replace(",", ""))
            rows.append((start, duration, short(name)))
    rows.sort()
    steps = []
    for start, duration, name in rows:
        if name.startswith(start_name):
            steps.append([])
        if steps:
            steps[-1].append((start, duration, name))
    # Steps that run back to back (per-step graphs or the WHILE loop), whole ones.
    if len(steps) > 1:
        steps = steps[:-1]
    step_lengths = sorted(s[-1][0] + s[-1][1] - s[0][0] for s in steps)
    kernels_per_step = statistics.median(len(s) for s in steps)
    print(f"{len(steps)} steps, median {kernels_per_step} kernels; step (first start to last end) "
          f"median {statistics.median(step_lengths) / 1e3:.1f} us, "
          f"p10 {step_lengths[len(step_lengths) // 10] / 1e3:.1f}")
    starts = [s[0][0] for s in steps]
    periods = sorted(b - a for a, b in zip(starts, starts[1:]))
    if periods:
        print(f"step start to next step start: median {statistics.median(periods) / 1e3:.1f} us")
    busy = sorted(sum(d for _, d, _ in s) for s in steps)
    print(f"kernel time per step: median {statistics.median(busy) / 1e3:.1f} us "
          f"(the rest are gaps between kernels)")
    roles = {}
    order = []
    previous_end = None
    previous_name = ""
    for s in steps:
        for start, duration, name in s:
            role = name
            if name == "grove_small_m_gemv_bf16_m1":
                role = f"{name}<-{previous_name}"
            if role not in roles:
                roles[role] = ([], [])
                order.append(role)
            roles[role][0].append(duration)
            if previous_end is not None:
                roles[role][1].append(start - previous_end)
            previous_end = start + duration
            previous_name = name
    print(f"{'role':64s} {'n/step':>6s} {'med us':>7s} {'GB/s':>6s} {'gap us':>7s} {'us/step':>8s}")
    total = 0.0
    for role in order:
        durations, gaps = roles[role]
        per_step = len(durations) / len(steps)
        med = statistics.median(durations) / 1e3
        gap = statistics.median(gaps) / 1e3 if gaps else 0.0
        bytes_ = ROLE_BYTES.get(role)
        gbps = f"{bytes_ / (med * 1e-6) / 1e9:6.0f}" if bytes_ else "     -"
        share = per_step * (med + gap)
        total += share
        print(f"{role[:64]:64s} {per_step:6.1f} {med:7.2f} {gbps} {gap:7.2f} {share:8.1f}")
    print(f"sum of (median + gap) x launches: {total:.1f} us per step")


if __name__ == "__main__":
    main()
