#!/usr/bin/env python3
"""Writes benchmarks/RESULTS.md (and latency.png) from one GPU session's logs.

Reads every <name>.json that grove's benchmarks and benchmarks/compare_torch.py
wrote into --logs (tools/gpu_session.sh puts them in $OUT/gpu_logs), plus the
session's own record (session.tsv: steps, their status and time; tests.log:
run_all.sh's summary), and writes --out/RESULTS.md: a header (device, date,
grove commit, the exact commands), one section per benchmark with its table
and a reading of what it measures, a side-by-side table of grove and PyTorch,
the floors of every inference and training case (graph nodes × GPU time per
node, bytes that must move ÷ HBM bandwidth: tools/write_results_floors.py),
and a goals table whose ratios are computed here from the numbers. Every
compare_torch report in --logs (torch.json, and e.g. torch_bf16.json from a
second call) goes to one PyTorch section, and every torch_zoo report to one zoo
section; a report under another name whose "benchmark" field names a section
without a report of its own (ddp_door_2gpu.json, data_parallel_2gpu.json) is
that section's. A benchmark
whose JSON is missing gets "not run in this session"; an unknown <name>.json
gets its top-level scalar fields listed. The plot (latency per model and
backend, grouped bars) needs matplotlib; without it RESULTS.md says so.

  python3 tools/write_results.py --logs $OUT/gpu_logs --out $OUT
      [--commit-file gpu_bundle/commit.txt] [--no-plot] [--hbm-tbs TB/s]

Exit status: 0 when RESULTS.md was written (even with benchmarks missing), 2 for
bad arguments (a --logs that is not a directory, an --out that cannot be made).
"""
import argparse
import datetime
import json
import os
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
import write_results_kernel_goals as kernel_goals  # noqa: E402  (lives next to this file)
import write_results_round_goals as round_goals  # noqa: E402  (lives next to this file)
import write_results_sections as sections  # noqa: E402  (lives next to this file)

us, ratio = sections.us, sections.ratio


class UsageError(Exception):
    """A bad command-line argument; main() prints it and exits with status 2."""


def read_session(logs):
    """session.tsv written by tools/gpu_session.sh (or a session script of its own, which
    names itself in `runner` and may add a header line in `note`): key/value lines and steps."""
    session = {"steps": [], "values": {}}
    path = os.path.join(logs, "session.tsv")
    if not os.path.isfile(path):
        return session
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.rstrip("\n").split("\t")
            if fields[0] == "step" and len(fields) >= 7:
                session["steps"].append({"name": fields[1], "status": fields[2], "rc": fields[3],
                                         "seconds": fields[4], "limit": fields[5],
                                         "command": "\t".join(fields[6:])})
            elif len(fields) >= 2:
                session["values"][fields[0]] = "\t".join(fields[1:])
    return session


def read_test_summary(logs):
    """The summary lines run_all.sh prints at its end, from tests.log."""
    path = os.path.join(logs, "tests.log")
    if not os.path.isfile(path):
        return []
    keep = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            line = line.strip()
            if line.startswith(("test cases:", "failed binaries:")) or \
                    (line.endswith("failed") and " passed, " in line and line[0].isdigit()):
                keep.append(line)
    return keep


def failed_benchmarks(logs):
    """Benchmarks run_all.sh reported as failed or not built, from benchmarks.log."""
    path = os.path.join(logs, "benchmarks.log")
    if not os.path.isfile(path):
        return []
    names = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            words = line.split()
            if len(words) >= 3 and words[0] == "benchmark" and words[-1] == "failed":
                names.append("`%s`" % words[1])
            elif len(words) >= 2 and words[0] == "FAIL" and words[1].startswith("benchmarks/"):
                names.append("`%s` (did not build)" % words[1])
    return names


def read_reports(logs):
    """{name: parsed JSON} for every *.json in logs, and {name: error} for unreadable ones."""
    reports, broken = {}, {}
    for entry in sorted(os.listdir(logs)):
        if not entry.endswith(".json"):
            continue
        name = entry[:-len(".json")]
        try:
            with open(os.path.join(logs, entry), encoding="utf-8") as handle:
                data = json.load(handle)
            if not isinstance(data, dict):
                raise ValueError("the top level is a %s, expected an object" % type(data).__name__)
            reports[name] = data
        except (OSError, ValueError) as error:
            broken[name] = str(error)
    merge_torch_reports(reports)
    merge_split_reports(reports, "torch_zoo", ("rows", "decode"))
    read_as_section(reports)
    return reports, broken


def merge_split_reports(reports, benchmark, keys):
    """A benchmark run in more than one call (torch_zoo.json, then torch_zoo_rest.json
    for the cases left): the lists under `keys` of every other report whose
    benchmark field names it follow <benchmark>.json's, each row marked with the
    file it came from ("from"), so that one section and the goals see them all.
    Without <benchmark>.json, read_as_section takes the first of them instead."""
    names = sorted(name for name, report in reports.items()
                   if name != benchmark and report.get("benchmark") == benchmark)
    if benchmark not in reports or not names:
        return
    merged = dict(reports[benchmark])
    for key in keys:
        merged[key] = list(sections.rows_of(merged, key))
    for name in names:
        report = reports.pop(name)
        for key in keys:
            merged[key] += [dict(row, **{"from": name + ".json"})
                            for row in sections.rows_of(report, key)]
    merged["merged_from"] = [benchmark + ".json"] + [name + ".json" for name in names]
    reports[benchmark] = merged


def read_as_section(reports):
    """A report named otherwise (ddp_door_2gpu.json, data_parallel_2gpu.json)
    whose "benchmark" field names a section with no report of its own is that
    section's report; the first by name wins, and its file name is kept in
    "read_from" for the section to say. Reports named after a section keep it."""
    known = {name for name, _, _ in sections.SECTIONS}
    for name in sorted(reports):
        benchmark = str(reports[name].get("benchmark")).replace(" ", "_")  # "decode load"
        if name not in known and benchmark in known and benchmark not in reports:
            reports[benchmark] = reports.pop(name)
            reports[benchmark]["read_from"] = name + ".json"


def merge_torch_reports(reports):
    """compare_torch run in more than one call (torch.json, torch_bf16.json, ...):
    the rows of every report whose benchmark is compare_torch go to "torch"
    (torch.json's header first), so that one section shows them all."""
    names = sorted(name for name, report in reports.items()
                   if report.get("benchmark") == "compare_torch" and name != "torch")
    if not names:
        return
    merged = dict(reports.get("torch") or reports[names[0]])
    merged["results"] = list(sections.rows_of(reports.get("torch", {})))
    unfinished = []
    for name in ["torch"] * ("torch" in reports) + names:
        report = reports[name]
        if report.get("stopped") or report.get("complete") is False:
            unfinished.append("%s.json: %s" % (name, report.get("stopped") or "complete: false"))
    for name in names:
        merged["results"] += sections.rows_of(reports.pop(name))
    merged.pop("complete", None)
    merged["stopped"] = "; ".join(unfinished) or None
    merged["merged_from"] = ["torch"] * ("torch" in reports) + names
    reports["torch"] = merged


def output_tail(logs, name, lines=6):
    """The last lines of <name>.txt (a benchmark's console output) or <name>.log (a
    session step's, e.g. torch.log), or None."""
    paths = [os.path.join(logs, name + suffix) for suffix in (".txt", ".log")]
    paths = [path for path in paths if os.path.isfile(path)]
    if not paths:
        return None
    path = paths[0]
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read().rstrip().splitlines()
    return text[-lines:]


def device_names(reports):
    """The GPU names the reports state (not 'cuda:0'), most frequent first."""
    counts = {}
    for report in reports.values():
        for key in ("device_name", "device"):
            value = report.get(key)
            if isinstance(value, str) and value and ":" not in value and value != "sim":
                counts[value] = counts.get(value, 0) + 1
                break
    return sorted(counts, key=lambda name: -counts[name])


def default_commands(logs_arg):
    return ["bash tools/gpu_session.sh   # on the GPU host; it runs the three below",
            "bash gpu_bundle/run_all.sh --benchmarks",
            "python3 benchmarks/compare_torch.py --json $OUT/gpu_logs/torch.json "
            "--iters 100 --warmup 10",
            "python3 tools/write_results.py --logs %s --out $OUT" % logs_arg]


def header(args, session, reports, broken, now, goal_counts):
    values = session["values"]
    names = device_names(reports)
    if names:
        device = ", ".join(names)
    else:
        places = sorted({str(r.get("device")) for r in reports.values() if r.get("device")})
        device = "%s (no report names a GPU)" % (", ".join(places) or "unknown")
    if values.get("nvidia_smi"):
        device += " (nvidia-smi: %s)" % values["nvidia_smi"]
    torch = reports.get("torch")
    if torch and torch.get("torch"):
        device += "; PyTorch %s, CUDA %s" % (torch.get("torch"), torch.get("cuda", "?"))
    commit = "unknown"
    for path in (args.commit_file, os.path.join(args.logs, "commit.txt")):
        if path and os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as handle:
                commit = handle.read().strip() or "unknown"
            break
    else:
        commit = values.get("commit", "unknown")
    if values.get("started_utc"):
        when = values["started_utc"] + (" to " + values["finished_utc"]
                                        if values.get("finished_utc") else "")
    else:
        dates = sorted({str(r.get("date"))[:10] for r in reports.values() if r.get("date")})
        when = "reports dated %s (no session.tsv; this file written %s)" % (
            ", ".join(dates) or "?", now.strftime("%Y-%m-%d %H:%M UTC"))
    lines = ["# grove benchmark results", "",
             "Generated by `tools/write_results.py` from one GPU session's logs; every number "
             "below comes from that session, and every ratio is computed from those numbers.",
             "", "- Device: %s" % device,
             "- Date: %s" % when,
             "- grove commit: %s" % commit]
    if len(names) > 1:
        lines.append("- Warning: the reports name more than one device (%s); ratios across "
                     "them mix machines." % ", ".join(names))
    if values.get("note"):
        # session.tsv's `note`: what a reader must know of how the session ran
        # (a session not run by gpu_session.sh says it there).
        lines.append("- %s" % values["note"])
    lines.append("- Goals: %d met, %d not met, %d not measured (the table at the end)"
                 % goal_counts)
    summary = read_test_summary(args.logs)
    if summary:
        lines.append("- Tests (`run_all.sh`): %s" % "; ".join(summary))
    lines += ["", "Commands (from the repository root; `tools/gpu_bundle.sh` built the bundle "
              "here first):", "", "```"]
    steps = session["steps"]
    commands = [s["command"] for s in steps] if steps else default_commands(args.logs)
    if steps:
        runner = values.get("runner", "bash tools/gpu_session.sh")
        commands = ["%s   # runs:" % runner] + commands + [
            "python3 tools/write_results.py --logs $OUT/gpu_logs --out $OUT"]
    lines += commands + ["```", ""]
    if steps:
        rows = []
        for step in steps:
            rows.append([step["name"], step["status"], step["rc"], step["seconds"] + " s",
                         step["limit"] + " s"])
        lines += ["Session steps:", ""]
        lines += sections.table(["step", "status", "exit", "time", "limit"], rows,
                                ["l", "l", "r", "r", "r"])
        broken_benchmarks = failed_benchmarks(args.logs)
        if broken_benchmarks:
            lines += ["", "Benchmarks that failed or did not build: %s."
                      % ", ".join(broken_benchmarks)]
        # Note [Steps a half bundle does not carry] (gpu_session.sh): not a failure.
        failed = ["%s (%s)" % (s["name"], s["status"]) for s in steps
                  if s["status"] not in ("ok", "not in this bundle")]
        if failed:
            lines += ["", "**Not every step succeeded: %s.** Sections whose JSON is missing say "
                      "so below." % ", ".join(failed)]
        lines.append("")
    if broken:
        for name in sorted(broken):
            lines.append("- `%s.json` could not be read: %s" % (name, broken[name]))
        lines.append("")
    lines += ["Latencies are microseconds per call (median, p90 in brackets) unless a table "
              "says otherwise. Absolute times on these shared machines move by up to 1.5x "
              "between runs; compare ratios within one session.", ""]
    return lines


# ---------------------------------------------------------------------- goals
#
# Note [Goals are judged from the numbers]
# Each goal of issues 4, 6, 7 and 8 is recomputed here from the medians in the
# reports (issue 22's in write_results_kernel_goals.py, issues 33, 34, 35 and
# 38's in write_results_round_goals.py); flags a benchmark writes about itself
# (meets_goal, goals, its own ratios) are not trusted. A goal whose inputs are
# missing is "not measured" and says which report it needed: never "met" by
# default. Rows marked "information" show a number beside the goals and are
# not counted. Test: tests/tools/write_results_test.sh.

MET, NOT_MET, UNMEASURED = sections.MET, sections.NOT_MET, sections.UNMEASURED
SHAPE_ERRORS = sections.SHAPE_ERRORS


verdict, batch1_case, needs = sections.verdict, sections.batch1_case, sections.needs


def inference_goals(reports):
    backend = sections.rows_of(reports.get("backend_latency", {}))
    torch = [r for r in sections.comparable_torch_rows(reports.get("torch"))
             if r.get("mode") == "inference"]
    eager_rows = sections.rows_of(reports.get("eager_latency", {}))
    goals = []
    for model in ("mlp16x512", "gpt4x256"):
        case = batch1_case(backend, model) or batch1_case(torch, model) or model + " b=1"
        grove_eager = sections.median_of(sections.find(backend, case=case, backend="eager"))
        graphs = sections.median_of(sections.find(backend, case=case, backend="cudagraphs"))
        bare = sections.median_of(sections.find(backend, case=case, backend="bare replay"))
        torch_eager = sections.median_of(sections.find(torch, case=case, config="eager"))
        reduce = sections.median_of(sections.find(torch, case=case,
                                                  config="compile reduce-overhead"))
        # grove eager >= 2x faster than PyTorch eager at batch 1 (issue 4).
        goal = "grove eager ≥ 2× faster than PyTorch eager, %s" % case
        if grove_eager and torch_eager:
            measured = "%s / %s = %s" % (us(torch_eager), us(grove_eager),
                                         ratio(torch_eager / grove_eager))
            other = sections.find(eager_rows, case=case)
            if other and other.get("latency_median_us"):
                measured += " (eager_latency run: %s)" % ratio(
                    torch_eager / other["latency_median_us"])
            goals.append([goal, measured, verdict(torch_eager / grove_eager >= 2)])
        else:
            goals.append([goal, needs(grove_eager, "backend_latency eager", torch_eager,
                                      "PyTorch eager"), UNMEASURED])
        # cudagraphs <= 0.9x PyTorch reduce-overhead at batch 1 (issue 8).
        goal = "grove cudagraphs ≤ 0.9× PyTorch reduce-overhead, %s" % case
        if graphs and reduce:
            goals.append([goal, "%s / %s = %s" % (us(graphs), us(reduce), ratio(graphs / reduce)),
                          verdict(graphs / reduce <= 0.9)])
        else:
            goals.append([goal, needs(graphs, "backend_latency cudagraphs", reduce,
                                      "PyTorch reduce-overhead"), UNMEASURED])
        # cudagraphs within 2 us of the bare replay at batch 1 (issue 7).
        goal = "grove cudagraphs within 2 µs of the bare replay, %s" % case
        if graphs and bare:
            goals.append([goal, "%s − %s = %s µs" % (us(graphs), us(bare), us(graphs - bare)),
                          verdict(graphs - bare <= 2.0)])
        else:
            goals.append([goal, needs(graphs, "backend_latency cudagraphs", bare,
                                      "backend_latency bare replay"), UNMEASURED])
    return goals


def training_goals(reports):
    steps = sections.rows_of(reports.get("train_step", {}))
    torch = [r for r in sections.comparable_torch_rows(reports.get("torch"))
             if r.get("mode") == "training"]
    cases = sections.cases_in_order(steps) or sections.cases_in_order(torch) or \
        ["mlp16x512 b=32", "gpt4x256 b=8 T=32"]
    goals = []
    for case in cases:
        graphs = sections.median_of(sections.find(steps, case=case, backend="cudagraphs"))
        values = {sections.TORCH_SERIES.get(r.get("config"), r.get("config")): sections.median_of(r)
                  for r in torch if r.get("case") == case}
        best = sections.best_torch(values)
        goal = "training step ≤ 0.25× PyTorch's best, %s" % case
        if graphs and best:
            config = next(c for c, series in sections.TORCH_SERIES.items() if series == best[0])
            row = sections.find(torch, case=case, config=config) or {}
            label = best[0] + (", %s" % row["optimizer_label"] if row.get("optimizer_label")
                               else "")
            goals.append([goal, "%s / %s (%s) = %s" % (us(graphs), us(best[1]), label,
                                                      ratio(graphs / best[1])),
                          verdict(graphs / best[1] <= 0.25)])
        else:
            goals.append([goal, needs(graphs, "train_step cudagraphs", best,
                                      "PyTorch training"), UNMEASURED])
    return goals


def tree_goals(reports):
    report = reports.get("tree_overhead")
    if report is None:
        return [["tree manager cost < 1.5 µs at 33 inputs, < 10 ns per extra input",
                 "needs tree_overhead.json", UNMEASURED]]
    goals = []
    rows = sections.rows_of(report, "rows")
    for binding in sections.cases_in_order([{"case": r.get("binding", "-")} for r in rows]):
        cost = {}
        for r in rows:
            if r.get("binding", "-") == binding:
                manager = sections.median(r.get("manager")) or r.get("manager_us_median")
                bare = sections.median(r.get("bare_replay")) or r.get("bare_replay_us_median")
                if manager is not None and bare is not None:
                    cost[r.get("inputs")] = manager - bare
        label = "" if binding == "-" else " (%s binding)" % binding
        goal = "tree manager cost < 1.5 µs at 33 inputs%s" % label
        if 33 in cost:
            goals.append([goal, "%s µs" % us(cost[33]), verdict(cost[33] < 1.5)])
        else:
            goals.append([goal, "no 33-input row", UNMEASURED])
        goal = "tree manager cost grows < 10 ns per extra input%s" % label
        if 33 in cost and 257 in cost:
            per_input = (cost[257] - cost[33]) * 1000.0 / (257 - 33)
            goals.append([goal, "(%s − %s) µs / 224 inputs = %.2f ns" % (
                us(cost[257]), us(cost[33]), per_input), verdict(per_input < 10.0)])
        else:
            goals.append([goal, "needs the 33- and 257-input rows", UNMEASURED])
    return goals


def memory_goals(reports):
    goals = []
    goal = "zero-copy binding ≥ 10× cheaper than the (cheaper) copy, 64 MiB input"
    row = sections.find(sections.rows_of(reports.get("input_binding", {})), input_mib=64)
    row = row or {}
    copy_cost, zero_cost = sections.cheaper_copy_cost(row), row.get("zero_copy_binding_us")
    if copy_cost is not None and zero_cost is not None:
        if zero_cost > 0.05:
            goals.append([goal, "%s / %s µs = %s" % (us(copy_cost), us(zero_cost),
                                                     ratio(copy_cost / zero_cost)),
                          verdict(copy_cost / zero_cost >= 10)])
        elif copy_cost >= 0.5:
            goals.append([goal, "copy %s µs; zero-copy %s µs, at the bare replay within noise"
                          % (us(copy_cost), us(zero_cost)), MET])
        else:
            goals.append([goal, "copy %s µs and zero-copy %s µs are both within noise"
                          % (us(copy_cost), us(zero_cost)), UNMEASURED])
    else:
        goals.append([goal, "needs input_binding.json with a 64 MiB row", UNMEASURED])
    goal = "bucket pool ≤ 1.25× the largest bucket recorded alone"
    report = reports.get("bucket_pool")
    alone = (report or {}).get("alone_reserved_bytes") or []
    if report and alone and report.get("shared_pool_bytes") is not None and alone[-1] > 0:
        shared = report["shared_pool_bytes"]
        goals.append([goal, "%s / %s = %s" % (sections.mib(shared), sections.mib(alone[-1]),
                                              ratio(shared / alone[-1])),
                      verdict(shared / alone[-1] <= 1.25)])
    else:
        goals.append([goal, "needs bucket_pool.json", UNMEASURED])
    return goals


def serving_goals(reports):
    """Issue 8: at a rate that saturates eager, cudagraphs answers at least 2x
    eager's throughput with a lower p99. Judged at the highest offered rate
    that saturates eager (both backends under the most load), against eager's
    best throughput at any rate: capacity against capacity, so that eager's
    own slowdown under overload does not count in cudagraphs' favour."""
    report = reports.get("serve")
    goal = "serving: cudagraphs ≥ 2× eager's throughput at a rate saturating eager, lower p99"
    if report is None:
        return [[goal, "needs serve.json", UNMEASURED]]
    rows = sections.rows_of(report)
    goals = []
    for max_batch in sections.cases_in_order([{"case": r.get("max_batch")} for r in rows]):
        eager = sorted((r for r in rows if r.get("max_batch") == max_batch and
                        r.get("backend") == "eager"), key=lambda r: r.get("offered_per_s", 0))
        saturated = [r for r in eager if r.get("saturated")]
        label = "%s, max batch %s" % (goal, max_batch)
        if not saturated:
            goals.append([label, "eager never saturated at the offered rates", UNMEASURED])
            continue
        base = saturated[-1]
        best_eager = max(r.get("answered_per_s", 0) for r in eager)
        graph = sections.find(rows, max_batch=max_batch, backend="cudagraphs",
                              offered_per_s=base.get("offered_per_s"))
        p99 = lambda r: (r.get("latency") or {}).get("p99_us")
        if not graph or not best_eager or p99(graph) is None or p99(base) is None:
            goals.append([label, "no cudagraphs run at %.0f/s" % base.get("offered_per_s", 0),
                          UNMEASURED])
            continue
        speed = graph.get("answered_per_s", 0) / best_eager
        goals.append([label, "at %.0f/s: cudagraphs %.0f answered/s / eager's best %.0f = %s; "
                      "p99 %s vs %s µs" % (
                          base["offered_per_s"], graph.get("answered_per_s", 0), best_eager,
                          ratio(speed), us(p99(graph)), us(p99(base))),
                      verdict(speed >= 2 and p99(graph) < p99(base))])
    return goals or [[goal, "serve.json has no runs", UNMEASURED]]


def compile_goals(reports):
    rows = sections.rows_of(reports.get("eager_latency", {}))
    cold = [r["compile_cold_ms"] for r in rows if r.get("compile_cold_ms") is not None]
    cached = [r["compile_cached_ms"] for r in rows if r.get("compile_cached_ms") is not None]
    goal = "JIT compile < 1 s cold and < 10 ms cached (every model)"
    if not cold or not cached:
        return [[goal, "needs eager_latency.json", UNMEASURED]]
    tuned = [r["compile_cold_tuned_ms"] for r in rows if r.get("compile_cold_tuned_ms") is not None]
    return [[goal, "cold %.1f–%.1f ms%s, cached %.2f–%.2f ms" % (
        min(cold), max(cold),
        " (with the GEMM tuning table kept %.1f–%.1f ms)" % (min(tuned), max(tuned))
        if tuned else "", min(cached), max(cached)),
             verdict(max(cold) < 1000 and max(cached) < 10)]]


def goal_rows(context):
    reports = context.reports
    judges = [(judge, lambda judge=judge: judge(reports))
              for judge in (inference_goals, training_goals, tree_goals, memory_goals,
                            serving_goals, compile_goals)]
    judges += [(judge, lambda judge=judge: judge(context))
               for judge in kernel_goals.JUDGES + round_goals.JUDGES]
    rows = []
    for judge, run in judges:
        try:
            rows += run()
        except SHAPE_ERRORS as error:
            rows.append([judge.__name__.replace("_", " "), "could not be computed: a report has "
                         "an unexpected shape (%s: %s)" % (type(error).__name__, error),
                         UNMEASURED])
    return rows


def goal_counts(rows):
    """(met, not met, not measured); information rows are no goals."""
    return tuple(sum(1 for row in rows if row[2] == kind) for kind in (MET, NOT_MET, UNMEASURED))


def goals_section(rows):
    information = sum(1 for row in rows if row[2] == round_goals.INFORMATION)
    lines = ["## Goals", "",
             "The goals of issues 4, 6, 7, 8, 22, 33, 34, 35 and 38, judged from this "
             "session's numbers "
             "(ratios computed by this script): %d met, %d not met, %d not measured."
             % goal_counts(rows) + (" Rows marked information (%d) show other variants beside "
                                    "the goals and are not counted." % information
                                    if information else ""), ""]
    return lines + sections.table(["goal", "measured", "verdict"], rows) + [""]



def plot(reports, out_dir):
    """Writes latency.png; returns the lines for RESULTS.md's plot section."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ("No plot: matplotlib is not installed where this ran "
                "(`pip install matplotlib`, then run tools/write_results.py again).")
    try:
        panels = [(mode, cases) for mode, cases in sections.latency_matrix(reports) if cases]
    except SHAPE_ERRORS as error:
        return "No plot: a report has an unexpected shape (%s)." % error
    if not panels:
        return "No plot: no latency was measured in this session."
    try:
        draw(plt, panels, os.path.join(out_dir, "latency.png"))
    except Exception as error:  # a plot must never cost the session its RESULTS.md
        return "No plot: drawing latency.png failed (%s: %s)." % (type(error).__name__, error)
    return ("![latency per model and backend](latency.png)\n\n`latency.png`: median latency "
            "per model and backend, one panel per mode (grouped bars; a missing bar was not "
            "measured or failed; log scale where the values span more than 20×).")


def draw(plt, panels, path):
    series = [name for name in sections.PLOT_SERIES
              if any(values.get(name) for _, cases in panels for _, values in cases)]
    figure, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 5), squeeze=False)
    for axis, (mode, cases) in zip(axes[0], panels):
        width = 0.8 / max(len(series), 1)
        for index, name in enumerate(series):
            xs = [c + (index - (len(series) - 1) / 2.0) * width for c in range(len(cases))]
            ys = [values.get(name) or float("nan") for _, values in cases]
            axis.bar(xs, ys, width, label=name)
        axis.set_xticks(list(range(len(cases))))
        axis.set_xticklabels([case for case, _ in cases], fontsize=9)
        axis.set_title("%s: median latency per %s" % (mode, "call" if mode == "inference"
                                                       else "step"))
        axis.set_ylabel("µs")
        measured = [v for _, values in cases for v in values.values() if v]
        if measured and max(measured) / min(measured) > 20:
            axis.set_yscale("log")
        axis.grid(axis="y", alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_results(args, now=None):
    if not os.path.isdir(args.logs):
        raise UsageError("--logs %s is not a directory; pass the folder the benchmarks wrote "
                         "their JSON into (e.g. $OUT/gpu_logs)" % args.logs)
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as error:
        raise UsageError("cannot create --out %s: %s" % (args.out, error))
    now = now or datetime.datetime.now(datetime.timezone.utc)
    session = read_session(args.logs)
    reports, broken = read_reports(args.logs)
    names = device_names(reports)
    smi = session["values"].get("nvidia_smi", "").split(",")[0].strip()
    context = sections.Context(reports, broken, session["steps"],
                               lambda name: output_tail(args.logs, name),
                               device=names[0] if names else (smi or None),
                               hbm_tbs=getattr(args, "hbm_tbs", None))
    goals = goal_rows(context)
    lines = header(args, session, reports, broken, now, goal_counts(goals))
    lines += sections.render_all(context)
    lines += ["## Plot", ""]
    lines.append("No plot: --no-plot was given." if args.no_plot else plot(reports, args.out))
    lines.append("")
    lines += goals_section(goals)
    path = os.path.join(args.out, "RESULTS.md")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines).rstrip() + "\n")
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", required=True, help="folder of <benchmark>.json files")
    parser.add_argument("--out", required=True, help="folder for RESULTS.md and latency.png")
    parser.add_argument("--commit-file", default="gpu_bundle/commit.txt",
                        help="file holding the grove commit (default gpu_bundle/commit.txt)")
    parser.add_argument("--no-plot", action="store_true", help="do not draw latency.png")
    parser.add_argument("--hbm-tbs", type=float, default=None,
                        help="HBM bandwidth in TB/s for the memory floor (default: from the "
                             "device's name: H200 4.8, H100 SXM 3.35)")
    args = parser.parse_args(argv)
    try:
        path = write_results(args)
    except UsageError as error:
        print("write_results: %s" % error, file=sys.stderr)
        return 2
    print("write_results: wrote %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
