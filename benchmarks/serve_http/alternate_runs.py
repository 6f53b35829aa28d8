#!/usr/bin/env python3
"""Alternates serve_http runs of several arms (an environment and a binary
each) and prints each arm's CPU per answer, by thread name, as medians.

On a shared host the same binary's runs spread by 10% or more, so an A/B
is judged on alternated runs, never on one run each (session 24: 2 shared
cores, CPU time only). Each arm is LABEL=ENV=BINARY, ENV a space-separated
list of NAME=VALUE (or "-"); the arguments after -- go to every run.

  alternate_runs.py --repeats 6 --out /tmp/ab \\
      new=-=bazel-bin/benchmarks/serve_http/serve_http \\
      old="GROVE_SERVE_TRIM_AS_BEFORE=1 GROVE_GRPC_ANSWER_POOL=1"=bazel-bin/benchmarks/serve_http/serve_http \\
      -- --device sim --models benchmarks/serve_http/models --model gelu512 \\
         --backends cudagraphs --max-batches 64 --rates 12000 --max-wait-us 6000 \\
         --duration-ms 2500 --held-rates none --encodings json,binary,grpc
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys


def parse_arm(text):
    label, env, binary = text.split("=", 1)[0], *text.split("=", 1)[1].rsplit("=", 1)
    extra = {} if env.strip() in ("", "-") else dict(item.split("=", 1) for item in env.split())
    return label, extra, binary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--out", required=True, help="a folder for each run's JSON and text")
    parser.add_argument("arms", nargs="+", help="LABEL=ENV=BINARY ... (then -- serve_http flags)")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    arms = [parse_arm(a) for a in args.arms]
    flags = argv[split + 1:]
    os.makedirs(args.out, exist_ok=True)
    runs = collections.defaultdict(list)  # (encoding, label) -> [(front, worker, groups)]
    for repeat in range(1, args.repeats + 1):
        for label, extra, binary in arms:
            report = os.path.join(args.out, f"{label}_r{repeat}.json")
            with open(os.path.join(args.out, f"{label}_r{repeat}.txt"), "w") as text:
                done = subprocess.run([binary, *flags, "--json", report], stdout=text,
                                      stderr=subprocess.STDOUT, env={**os.environ, **extra})
            if done.returncode != 0:
                print(f"{label} r{repeat}: exit {done.returncode}", file=sys.stderr)
                continue
            for result in json.load(open(report))["results"]:
                answered = max(result["answered"], 1)
                groups = {g["name"]: g["cpu_s"] * 1e6 / answered for g in result["cpu_by_thread_name"]}
                cpu = result["cpu_us_per_answer"]
                runs[(result["encoding"], label)].append((cpu["front"], cpu["worker"], groups))
    for (encoding, label), results in sorted(runs.items()):
        front = [r[0] for r in results]
        worker = [r[1] for r in results]
        names = sorted({n for r in results for n in r[2]})
        by_name = ", ".join(
            f"{n} {statistics.median(r[2].get(n, 0.0) for r in results):.1f}" for n in names
            if max(r[2].get(n, 0.0) for r in results) >= 0.3)
        print(f"{encoding:7s} {label:10s} front us/answer median {statistics.median(front):5.1f} "
              f"(runs {' '.join(f'{x:.1f}' for x in front)}), worker {statistics.median(worker):.1f}; "
              f"by thread name: {by_name}")


if __name__ == "__main__":
    main()
