#!/usr/bin/env python3
"""Where a program's GPU time goes, kernel by kernel, from Nsight Compute.

Runs a command under ncu (GPU host only), recording each kernel's
gpu__time_duration (kernels inside CUDA graphs are profiled node by node),
then prints a table of kernels grouped by name (launches, total and mean µs,
share of all kernel time) with GEMM library kernels and grove's generated
kernels summed apart, and writes the same as JSON:

  kernel_profile.py --out DIR --name NAME [--top 25] -- COMMAND [ARGS...]
  kernel_profile.py --csv FILE --name NAME [--out DIR]   (parse an earlier run)

ncu runs with --clock-control none (the clocks the benchmarks see) and
--cache-control none (the L2 keeps what the program left in it, as between
graph replays), so a kernel's time is close to its time in a replay. What
this cannot show is the gap between kernels (launch latency inside a graph):
the benchmarks' node floor (RESULTS.md) accounts for that.
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys

UNIT_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3,
              "ms": 1e3, "second": 1e6, "s": 1e6}
# Library GEMM kernels (cuBLAS, cuBLASLt, CUTLASS) by their names' words.
GEMM_NAME = re.compile(r"gemm|gemv|xmma|cutlass|cublas|splitk", re.IGNORECASE)


def category(name):
    if name.startswith(("small_m_gemm", "small_n_gemm")):
        return "grove small-M GEMM"
    if GEMM_NAME.search(name):
        return "library GEMM"
    if name.startswith(("void ", "at::", "void at::")) or "at::native" in name:
        return "PyTorch ATen"
    if name.startswith(("triton_", "triton")):
        return "Triton (Inductor)"
    return "other (grove generated, copies)"


def parse_ncu_csv(text):
    """Rows of ncu's --csv details page -> [(kernel name, µs)], one per launch.
    Lines that are not CSV rows (==PROF== messages, the program's own output)
    are skipped; a metric value may carry thousands separators."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if not lines:
        return []
    reader = csv.reader(lines)
    header = next(reader)
    try:
        at_name = header.index("Kernel Name")
        at_metric = header.index("Metric Name")
        at_unit = header.index("Metric Unit")
        at_value = header.index("Metric Value")
    except ValueError as missing:
        raise SystemExit("kernel_profile: ncu's CSV has no %s column; header: %s"
                         % (str(missing).split("'")[1], header))
    launches = []
    for row in reader:
        if len(row) != len(header) or row == header:
            continue
        if row[at_metric] != "gpu__time_duration.sum":
            continue
        unit = row[at_unit].strip()
        if unit not in UNIT_TO_US:
            raise SystemExit("kernel_profile: unknown time unit %r for %s" % (unit, row[at_name]))
        value = float(row[at_value].replace(",", ""))
        launches.append((row[at_name], value * UNIT_TO_US[unit]))
    return launches


def summarize(launches, top):
    by_name = {}
    for name, us in launches:
        entry = by_name.setdefault(name, {"kernel": name, "launches": 0, "total_us": 0.0})
        entry["launches"] += 1
        entry["total_us"] += us
    total = sum(entry["total_us"] for entry in by_name.values())
    kernels = sorted(by_name.values(), key=lambda entry: -entry["total_us"])
    for entry in kernels:
        entry["mean_us"] = entry["total_us"] / entry["launches"]
        entry["share"] = entry["total_us"] / total if total else 0.0
        entry["category"] = category(entry["kernel"])
    categories = {}
    for entry in kernels:
        c = categories.setdefault(entry["category"], {"launches": 0, "total_us": 0.0})
        c["launches"] += entry["launches"]
        c["total_us"] += entry["total_us"]
    for c in categories.values():
        c["share"] = c["total_us"] / total if total else 0.0
        c["mean_us"] = c["total_us"] / c["launches"]
    return {"launches": len(launches), "total_us": total, "kernels": kernels,
            "categories": categories, "top": top}


def short(name, width):
    name = re.sub(r"\(.*\)$", "", name) if not name.startswith("void ") else name
    return name if len(name) <= width else name[:width - 3] + "..."


def print_table(title, summary):
    print("%s: %d kernel launches, %.1f us of kernel time"
          % (title, summary["launches"], summary["total_us"]))
    print("%-64s %8s %11s %9s %7s" % ("kernel", "launches", "total us", "mean us", "share"))
    for entry in summary["kernels"][:summary["top"]]:
        print("%-64s %8d %11.1f %9.2f %6.1f%%" % (short(entry["kernel"], 64), entry["launches"],
                                                 entry["total_us"], entry["mean_us"],
                                                 100 * entry["share"]))
    print("%-64s %8s %11s %9s %7s" % ("category", "launches", "total us", "mean us", "share"))
    for name, c in sorted(summary["categories"].items(), key=lambda item: -item[1]["total_us"]):
        print("%-64s %8d %11.1f %9.2f %6.1f%%" % (name, c["launches"], c["total_us"],
                                                 c["mean_us"], 100 * c["share"]))


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    command = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the run's name (files NAME.csv, NAME.json)")
    parser.add_argument("--out", default=".", help="where NAME.csv and NAME.json go")
    parser.add_argument("--csv", help="parse this ncu CSV instead of running a command")
    parser.add_argument("--top", type=int, default=25, help="kernels in the table (default 25)")
    parser.add_argument("--ncu", default=os.environ.get("GROVE_NCU", "ncu"))
    args = parser.parse_args(argv)
    if bool(args.csv) == bool(command):
        parser.error("give either --csv FILE or -- COMMAND")
    os.makedirs(args.out, exist_ok=True)
    status = 0
    if command:
        csv_path = os.path.join(args.out, args.name + ".csv")
        ncu = [args.ncu, "--clock-control", "none", "--cache-control", "none",
               "--metrics", "gpu__time_duration.sum", "--csv", "--log-file", csv_path]
        status = subprocess.call(ncu + command)
        if status != 0:
            print("kernel_profile: %s exited %d" % (" ".join(command), status), file=sys.stderr)
        if not os.path.exists(csv_path):
            print("kernel_profile: ncu wrote no %s" % csv_path, file=sys.stderr)
            return status or 1
    else:
        csv_path = args.csv
    with open(csv_path) as handle:
        launches = parse_ncu_csv(handle.read())
    if not launches:
        print("kernel_profile: no kernel times in %s" % csv_path, file=sys.stderr)
        return status or 1
    summary = summarize(launches, args.top)
    summary.update({"name": args.name, "command": command})
    print_table(args.name, summary)
    with open(os.path.join(args.out, args.name + ".json"), "w") as handle:
        json.dump(summary, handle, indent=2)
        handle.write("\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
