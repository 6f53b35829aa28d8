#!/usr/bin/env python3
"""One decode step's kernels, one by one, from an ncu CSV (GPU host only).

  ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
      -k "regex:grove_|embedding|rms_norm|cast" --launch-skip S --launch-count N --csv \
      --log-file NCU.csv decode --configs 1b --batches 1 ...
  ncu_step_summary.py NCU.csv

Takes one step of the LLaMA decoder: the launches after a
grove_llm_loop_control up to and including the next, the shortest such window
(one recorded decode step of DecodeLoop), or where the trace has no two of them, from the first
embedding gather to the next. ncu runs kernels one at a time, so these are the
kernels' own times with nothing overlapped. Prints per kernel role (as
nsys_step_summary.py names them) the launches, median and total time and the
GB/s of the 1B config's weights where known; with --sequence, every launch of
the step in order too.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "tools"))
from kernel_profile import parse_ncu_csv  # noqa: E402
from nsys_step_summary import ROLE_BYTES, short  # noqa: E402


GEMV_NAMES = ("grove_small_m_gemv_bf16_m1", "grove_small_m_gemv_streamed_bf16")


def main():
    with open(sys.argv[1], errors="replace") as handle:
        launches = [(short(name), us) for name, us in parse_ncu_csv(handle.read())]
    ends = [i for i, (name, _) in enumerate(launches) if name == "grove_llm_loop_control"]
    if len(ends) >= 2:
        # The shortest window between two loop controls: one step and nothing
        # else (a prefill may lie between others).
        start, end = min(zip(ends, ends[1:]), key=lambda pair: pair[1] - pair[0])
        step = launches[start + 1:end + 1]
    else:
        starts = [i for i, (name, _) in enumerate(launches) if name.startswith("embedding")]
        if not starts:
            for name, us in launches:
                print("  %-70s %8.2f" % (name[:70], us))
            raise SystemExit("no loop control pair or embedding launch (step start) among %d "
                             "launches (all listed above)" % len(launches))
        end = starts[1] if len(starts) > 1 else len(launches)
        step = launches[starts[0]:end]
    print("one step: %d kernels, %.1f us of kernel time (ncu, one at a time)"
          % (len(step), sum(us for _, us in step)))
    roles, order, previous = {}, [], ""
    for name, us in step:
        role = "%s<-%s" % (name, previous) if name in GEMV_NAMES else name
        if role not in roles:
            roles[role] = []
            order.append(role)
        roles[role].append(us)
        previous = name
    print("%-64s %5s %8s %8s %6s" % ("role", "n", "med us", "total", "GB/s"))
    for role in order:
        times = roles[role]
        med = statistics.median(times)
        known = ROLE_BYTES.get(role)
        gbps = "%6.0f" % (known / (med * 1e-6) / 1e9) if known else "     -"
        print("%-64s %5d %8.2f %8.1f %s" % (role[:64], len(times), med, sum(times), gbps))
    if "--sequence" in sys.argv:
        print("every launch of the step, in order:")
        for name, us in step:
            print("  %-70s %8.2f" % (name[:70], us))


if __name__ == "__main__":
    main()
