"""The sections of RESULTS.md that tools/write_results.py writes: one per benchmark
JSON, the side-by-side table of grove and PyTorch, and the goals table.

Every renderer takes a Context and returns Markdown lines. A benchmark whose
JSON is missing renders as "not run in this session" with the reason the
session knows (its step failed or timed out, or it ran and wrote no JSON).
"""

# What a report of an unexpected shape raises in a renderer: caught per section.
SHAPE_ERRORS = (TypeError, ValueError, KeyError, ZeroDivisionError, AttributeError, IndexError)

PLOT_SERIES = ["grove eager", "grove cudagraphs", "bare replay", "PyTorch eager",
               "PyTorch compile", "PyTorch reduce-overhead", "PyTorch reduce-overhead (whole step)",
               "PyTorch hand-captured graph"]

# compare_torch's configurations that PyTorch's users get, by series name: the
# goals compare grove with the fastest of them.
TORCH_SERIES = {"eager": "PyTorch eager", "compile default": "PyTorch compile",
                "compile reduce-overhead": "PyTorch reduce-overhead",
                "compile reduce-overhead, whole step": "PyTorch reduce-overhead (whole step)"}
# The eager call or step captured by hand (torch.cuda.graph): a reference that
# no goal compares with.
HAND_CAPTURED_CONFIGS = ("hand-captured CUDA graph", "hand-captured CUDA graph, whole step")
HAND_CAPTURED_SERIES = "PyTorch hand-captured graph"
# Optimizers of compare_torch's training rows that do grove's train_step math
# (SGD, momentum 0.9); rows from before the field existed used it too.
SGD_MOMENTUM = (None, "sgd", "sgd-fused")


class Context:
    """What the renderers read: the reports, the unreadable ones, the session's steps."""

    def __init__(self, reports, broken, steps, tail, device=None, hbm_tbs=None):
        self.reports = reports
        self.broken = broken
        self.steps = {step["name"]: step for step in steps}
        self.tail = tail  # name -> last lines of <name>.txt, or None
        self.device = device  # the GPU's name, for its HBM bandwidth (floors)
        self.hbm_tbs = hbm_tbs  # --hbm-tbs: a bandwidth that overrides the known ones


# ---------------------------------------------------------------- formatting


def table(headers, rows, align=None):
    align = align or ["l"] * len(headers)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(rule) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |")
    return lines


def us(value):
    """A time in microseconds, with digits that fit its size."""
    if value is None:
        return "-"
    magnitude = abs(value)
    if magnitude >= 100:
        return "%.1f" % value
    if magnitude >= 1:
        return "%.2f" % value
    return "%.3f" % value


def ratio(value):
    return "-" if value is None else "%.2f×" % value


def latency_cell(latency):
    """'median (p90)' of a latency_json object."""
    if not isinstance(latency, dict) or latency.get("median_us") is None:
        return "-"
    return "%s (%s)" % (us(latency["median_us"]), us(latency.get("p90_us")))


def nodes_cell(row, key):
    """'nodes (kernel nodes)' of a row's graph node count (key: graph_nodes_per_call
    or _per_step); empty when the run did not count them."""
    nodes = row.get(key)
    if not isinstance(nodes, int):
        return ""
    kernels = row.get(key.replace("graph_nodes", "graph_kernel_nodes"))
    return "%d (%d kernels)" % (nodes, kernels) if isinstance(kernels, int) else str(nodes)


def median(latency):
    return latency.get("median_us") if isinstance(latency, dict) else None


def mib(count):
    return "%.1f MiB" % (count / 2.0 ** 20)


def short_error(text, limit=160):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ------------------------------------------------------------ missing reports

# JSON name -> the session step that writes it (default: benchmarks)
PRODUCER = {"torch": "torch", "backend_latency_host_copies": "host_copies"}


def not_run(context, name):
    """The lines for a benchmark whose JSON is missing or unreadable."""
    if name in context.broken:
        return ["Not usable in this session: `%s.json` could not be read (%s)."
                % (name, context.broken[name]), ""]
    step = context.steps.get(PRODUCER.get(name, "benchmarks"))
    reason = ""
    # A step that exited with an error ran to its end: its failure says nothing
    # about a report that is simply absent. One stopped or skipped does.
    if step and step["status"] != "ok" and not step["status"].startswith("failed (exit"):
        reason = " (the %s step %s)" % (step["name"], step["status"])
    tail = context.tail(name)
    if tail is not None:
        return ["No `%s.json` in this session%s: it started but wrote no JSON; its output "
                "ended with:" % (name, reason), "", "```"] + tail + ["```", ""]
    return ["Not run in this session%s: no `%s.json`." % (reason, name), ""]


def rows_of(report, key="results"):
    value = report.get(key)
    return [row for row in value if isinstance(row, dict)] if isinstance(value, list) else []


def cases_in_order(rows):
    seen = []
    for row in rows:
        if row.get("case") not in seen:
            seen.append(row.get("case"))
    return seen


# ------------------------------------------------------------------ sections


def launch_overhead(report):
    rows = []
    for r in rows_of(report):
        def cell(key):
            s = r.get(key) or {}
            return "%s [%s, %s]" % (us(s.get("median")), us(s.get("p10")), us(s.get("p90")))
        rows.append([r.get("n"), cell("eager_cpu_us"), cell("graph_cpu_us"),
                     ratio(r.get("cpu_ratio_eager_over_graph")), cell("eager_gpu_us_per_kernel"),
                     cell("graph_gpu_us_per_node"),
                     "%.2f / %.2f" % (r.get("capture_ms", 0), r.get("instantiate_ms", 0))])
    lines = ["The physical floor grove's replay path is judged against: the host cost of N "
             "separate kernel launches versus one launch of a graph with the same N kernel "
             "nodes, and the GPU time per kernel or node. Median [p10, p90] over %s repeats; "
             "microseconds." % report.get("repeats", "?"), ""]
    lines += table(["N", "CPU: N eager launches", "CPU: 1 graph launch", "CPU ratio",
                    "GPU per eager kernel", "GPU per graph node", "capture / instantiate ms"],
                   rows, ["r", "l", "l", "r", "l", "l", "r"])
    by_n = {r.get("n"): r for r in rows_of(report)}
    if 1 in by_n:
        one = by_n[1]
        lines += ["", "Reading: one eager launch costs %s µs of host time and one graph launch "
                  "%s µs; a replay path that adds little to the graph launch is the target for "
                  "the tree manager." % (us((one.get("eager_cpu_us") or {}).get("median")),
                                         us((one.get("graph_cpu_us") or {}).get("median")))]
    return lines


def backend_latency(report, graph_copies=True):
    """graph_copies: whether the run's graphs began with in-graph input copies
    (the default) or its input copies were device copies before each launch."""
    results = rows_of(report)
    rows = []
    for r in results:
        if r.get("status") != "measured":
            rows.append([r.get("case"), r.get("backend"), r.get("status", "?"), "", "",
                         short_error(r.get("error", "")), "", "", ""])
            continue
        timed = r.get("graphs_timed_calls") or {}
        graphs = ""
        if timed:
            graphs = "%s rec / %s replays / %s eager" % (timed.get("recordings", 0),
                                                         timed.get("replays", 0),
                                                         timed.get("eager_calls", 0))
            if timed.get("input_copies"):
                graphs += " / %s input copies" % timed["input_copies"]
        elif r.get("graphs_per_call") is not None:
            graphs = "%s graph(s) per call" % r["graphs_per_call"]
        identical = r.get("identical_to_eager")
        rows.append([r.get("case"), r.get("backend"), latency_cell(r.get("latency")),
                     us((r.get("enqueue") or {}).get("median_us")),
                     us((r.get("gpu") or {}).get("median_us")),
                     ratio(r.get("speedup_vs_eager")),
                     "" if identical is None else ("yes" if identical else "NO"), graphs,
                     nodes_cell(r, "graph_nodes_per_call")])
    copies = ("they begin with grove's in-graph input copies" if graph_copies else
              "without input copies: this run copied its inputs before each launch")
    lines = ["Per-call inference latency of the `eager` and `cudagraphs` backends in one "
             "process (f32), with the bare replay of the very graphs `cudagraphs` recorded (%s) "
             "and the bare replay of the eager callable captured directly (body only, no input "
             "copy); the calls alternate so that drift hits all alike, and each timed call "
             "follows an untimed call of its own (a serving loop's steady state). %s timed calls "
             "after %s warm-up; host time until the stream is synchronized. Enqueue: host time until "
             "the call returned. GPU: time between events around the call, in a pass of its "
             "own (it includes any wait of the device for the host within the call). Graph "
             "nodes: of the graphs one call launches (all nodes, kernel nodes in brackets)."
             % (copies, report.get("iters", "?"), report.get("warmup", "?")), ""]
    lines += table(["case", "backend", "median (p90)", "enqueue", "GPU", "vs eager",
                    "identical to eager", "graphs (timing loop)", "graph nodes"], rows,
                   ["l", "l", "r", "r", "r", "r", "l", "l", "r"])
    overhead = []
    for case in cases_in_order(results):
        graph = find(results, case=case, backend="cudagraphs")
        bare = find(results, case=case, backend="bare replay")
        if median_of(graph) is not None and median_of(bare) is not None:
            overhead.append("%s: %s µs" % (case, us(median_of(graph) - median_of(bare))))
    speedups = [r["speedup_vs_eager"] for r in results
                if r.get("backend") == "cudagraphs" and r.get("speedup_vs_eager")]
    reading = "Reading:"
    if speedups:
        reading += " `cudagraphs` ran %s–%s faster than `eager`." % (ratio(min(speedups)),
                                                                   ratio(max(speedups)))
    if overhead:
        reading += " What the tree manager and the backend add to the bare replay (cudagraphs " \
                   "median minus bare replay median): %s." % "; ".join(overhead)
    return lines + ["", reading]


def eager_latency(report):
    rows = []
    for r in rows_of(report):
        rows.append([r.get("case"), us(r.get("latency_median_us")), us(r.get("latency_p90_us")),
                     us(r.get("enqueue_median_us")), us(r.get("gpu_median_us")),
                     "%s + %s" % (r.get("kernels", "?"), r.get("gemms", "?")),
                     "%.1f / %s / %.2f" % (r.get("compile_cold_ms", float("nan")),
                                           "%.1f" % r["compile_cold_tuned_ms"]
                                           if "compile_cold_tuned_ms" in r else "-",
                                           r.get("compile_cached_ms", float("nan")))])
    lines = ["The `eager` backend alone: per-call latency, the host time to enqueue the call, "
             "the GPU time between events around it, the kernels and cuBLAS GEMMs it launches, "
             "and the JIT compile time of the model, cold and from the kernel cache. %s calls."
             % report.get("iters", "?"), ""]
    lines += table(["case", "median", "p90", "enqueue", "GPU time (events)", "kernels + GEMMs",
                    "JIT cold / cold, tuning kept / cached (ms)"], rows,
                   ["l", "r", "r", "r", "r", "l", "r"])
    reading = ("Reading: when the enqueue time is almost the whole call and the GPU "
               "time spans the same interval, the eager path is launch-bound: the GPU "
               "waits for launches.")
    cold = report.get("cold")
    if cold:
        reading += (" JIT cold: %s (Note [A cold compile in a process of its own]); cold, "
                    "tuning kept: a second process with the GEMM tuning table the first left "
                    "and the driver's JIT cache empty; cached: the same program compiled again "
                    "in the first process." % cold)
    else:
        reading += (" JIT cold: the kernel cache cleared in one process that had run the "
                    "cases before it; the driver's JIT cache and the GEMM tuning table as "
                    "earlier runs left them.")
    return lines + ["", reading]


def train_step(report):
    results = rows_of(report)
    rows = []
    for case in cases_in_order(results):
        eager = find(results, case=case, backend="eager")
        graph = find(results, case=case, backend="cudagraphs")
        failures = [r for r in (eager, graph) if r and r.get("status") != "measured"]
        losses = ""
        if graph and graph.get("losses_match_eager") is not None:
            losses = "%s (%.4f → %.4f)" % ("yes" if graph["losses_match_eager"] else "NO",
                                          graph.get("first_loss", float("nan")),
                                          graph.get("last_loss", float("nan")))
        speed = graph.get("speedup_vs_eager") if graph else None
        note = "; ".join("%s %s: %s" % (r.get("backend"), r.get("status"),
                                        short_error(r.get("error", ""), 120)) for r in failures)
        bare = (graph or {}).get("bare_replay")
        over_bare = None
        if median_of(graph) is not None and isinstance(bare, dict) and \
                bare.get("median_us") is not None:
            over_bare = median_of(graph) - bare["median_us"]
        rows.append([case, latency_cell((eager or {}).get("latency")),
                     latency_cell((graph or {}).get("latency")), latency_cell(bare),
                     us(over_bare), ratio(speed), losses, nodes_cell(graph or {},
                                                                     "graph_nodes_per_step"),
                     note])
    lines = ["One training step (forward, backward, SGD with momentum %s), eager against "
             "cudagraphs (all three phases captured), %s timed steps after %s warm-up; host "
             "time until the stream is synchronized. Bare replay: the graphs of the last "
             "cudagraphs step launched directly, step after step (no binding, no checks, no "
             "trainer); over bare: cudagraphs median minus bare replay median; graph nodes: of "
             "the graphs one cudagraphs step launches (kernel nodes in brackets)." % (
                 first(results, "momentum", "0.9"), report.get("iters", "?"),
                 report.get("warmup", "?")), ""]
    lines += table(["case", "grove eager", "grove cudagraphs", "bare replay", "over bare",
                    "speedup", "losses identical (first → last)", "graph nodes", "failures"],
                   rows, ["l", "r", "r", "r", "r", "r", "l", "r", "l"])
    speedups = [r["speedup_vs_eager"] for r in results
                if r.get("backend") == "cudagraphs" and r.get("speedup_vs_eager")]
    if speedups:
        lines += ["", "Reading: with every phase of the step replayed as graphs, a step ran "
                  "%s–%s faster than eager; identical losses mean the graphs compute exactly "
                  "what eager does." % (ratio(min(speedups)), ratio(max(speedups)))]
    return lines


def torch_config_column(config):
    """The column of a compare_torch configuration: both hand-captured rows share one."""
    return "hand-captured CUDA graph" if config in HAND_CAPTURED_CONFIGS else config


def torch_variant(row):
    """(dtype, optimizer label) of a compare_torch row; rows from before these
    fields existed ran f32 (the models' own) with SGD momentum 0.9."""
    dtype = row.get("dtype") or "f32"
    if row.get("mode") != "training":
        return dtype, "-"
    return dtype, row.get("optimizer_label") or "SGD momentum 0.9"


def compare_torch(report):
    results = rows_of(report)
    columns = []
    for config in list(TORCH_SERIES) + ["hand-captured CUDA graph"]:
        if any(torch_config_column(r.get("config")) == config for r in results):
            columns.append(config)
    rows, errors, fastest = [], {}, []
    for mode in ("inference", "training"):
        in_mode = [r for r in results if r.get("mode") == mode]
        variants = []
        for r in in_mode:
            if (r.get("case"), torch_variant(r)) not in variants:
                variants.append((r.get("case"), torch_variant(r)))
        for case, variant in variants:
            group = [r for r in in_mode if r.get("case") == case and torch_variant(r) == variant]
            row = [mode, case, variant[0], variant[1]]
            for config in columns:
                r = next((r for r in group if torch_config_column(r.get("config")) == config),
                         None)
                if r is None:
                    row.append("-")
                elif "error" in r:
                    key = short_error(r["error"], 200)
                    errors.setdefault(key, len(errors) + 1)
                    row.append("failed [%d]" % errors[key])
                elif "skipped" in r:
                    row.append("skipped")
                else:
                    row.append(latency_cell(r))
            rows.append(row)
            timed = [(median_of(r), r["config"]) for r in group
                     if median_of(r) and r.get("config") not in HAND_CAPTURED_CONFIGS]
            if timed:
                label = "%s %s %s%s" % (mode, case, variant[0],
                                        "" if variant[1] == "-" else ", " + variant[1])
                fastest.append("%s: %s (%s µs)" % (label, min(timed)[1], us(min(timed)[0])))
    lines = ["PyTorch %s on the same GPU, the same models built from grove's JSON files "
             "(`nn.Linear`, `F.gelu`, `F.scaled_dot_product_attention(is_causal=True)`): eager, "
             "`torch.compile` default and `mode=\"reduce-overhead\"` (PyTorch's CUDA Graph "
             "Trees); for training also the whole step compiled, and, as a reference that no "
             "goal compares with, the eager call or step captured by hand into one CUDA graph "
             "(`torch.cuda.graph`: PyTorch's kernels with no launch overhead). Each row names "
             "its dtype (f32: the models' own; bf16: parameters and inputs cast) and, for "
             "training, its optimizer; the goals and the side-by-side table take f32 and SGD "
             "momentum 0.9 (fused or not: grove's train_step optimizer). %s calls after "
             "%s warm-up; TF32 matmul %s." % (report.get("torch", "?"), report.get("iters", "?"),
                                              report.get("warmup", "?"),
                                              "on" if report.get("tf32_matmul") else "off"), ""]
    if report.get("stopped") or report.get("complete") is False:
        lines += ["**The run did not finish** (%s): rows it did not reach are missing." % (
            report.get("stopped") or "its JSON says complete: false"), ""]
    lines += table(["mode", "case", "dtype", "optimizer"] + columns, rows,
                   ["l", "l", "l", "l"] + ["r"] * len(columns))
    for text, number in sorted(errors.items(), key=lambda item: item[1]):
        lines += ["", "[%d] %s" % (number, text)]
    if fastest:
        lines += ["", "Reading: PyTorch's fastest configuration per row, the hand-captured "
                  "graph aside: %s." % "; ".join(fastest)]
    return lines


def tree_overhead(report):
    rows = []
    for r in rows_of(report, "rows"):
        manager = r.get("manager") or {"median_us": r.get("manager_us_median")}
        bare = r.get("bare_replay") or {"median_us": r.get("bare_replay_us_median")}
        cost = r.get("manager_cost_us", r.get("overhead_us_median"))
        rows.append([r.get("binding", "-"), r.get("inputs"), r.get("input_copies_per_call", "-"),
                     latency_cell(manager), latency_cell(bare), us(cost)])
    lines = ["The tree manager's own host cost per replay: a function of %s chained small "
             "kernels with 1, 33 and 257 inputs (one copied, the rest static) replayed through "
             "the manager and, in the same run, as the bare replay of the same graph. Each call "
             "is timed on its own (the stream is synchronized, untimed, every %s calls), so the "
             "difference of the medians is host time, not GPU time." % (
                 report.get("kernels", 16), report.get("burst", "few")), ""]
    lines += table(["binding", "inputs", "copies/call", "manager", "bare replay",
                    "manager cost"], rows, ["l", "r", "r", "r", "r", "r"])
    at33 = ["%s %s µs" % (r.get("binding", "-"), us(r.get("manager_cost_us")))
            for r in rows_of(report, "rows")
            if r.get("inputs") == 33 and r.get("manager_cost_us") is not None]
    if at33:
        lines += ["", "Reading: at 33 inputs the manager adds %s per replay to the bare graph "
                  "launch. The copy binding's cost includes the one copy of the copied input "
                  "(a cudaMemcpyAsync on the host); zero-copy binding skips it because the "
                  "input's address did not change." % ", ".join(at33)]
    return lines


def cheaper_copy_cost(row):
    """The binding cost of the cheaper copy: before the launch or in the graph
    (reports older than the in-graph copy mode have only the first)."""
    costs = [row.get(key) for key in ("copy_binding_us", "graph_copy_binding_us")
             if row.get(key) is not None]
    return min(costs) if costs else None


def input_binding(report):
    rows = []
    for r in rows_of(report):
        zero_cost = r.get("zero_copy_binding_us")
        rows.append(["%s MiB" % r.get("input_mib"), latency_cell(r.get("bare_replay")),
                     latency_cell(r.get("copy")), latency_cell(r.get("graph_copy")),
                     latency_cell(r.get("zero_copy")), us(r.get("copy_binding_us")),
                     us(r.get("graph_copy_binding_us")), us(zero_cost),
                     binding_ratio_text(cheaper_copy_cost(r), zero_cost)])
    lines = ["Binding a copied input whose address changes every call: copied into its "
             "placeholder by a device copy before the launch (copy) or by a copy kernel at the "
             "head of the graph (in-graph copy, the default), or zero-copy (the graph's kernel "
             "nodes patched to read the caller's memory), against the bare replay of the graph "
             "without any copy. Binding cost = mode median minus bare median; %s calls per "
             "mode, host time until synchronized." % report.get("iters", "?"), ""]
    lines += table(["input", "bare replay", "copy", "in-graph copy", "zero-copy", "copy cost",
                    "in-graph copy cost", "zero-copy cost", "cheaper copy / zero-copy"], rows,
                   ["l", "r", "r", "r", "r", "r", "r", "r", "r"])
    largest = max(rows_of(report), key=lambda r: r.get("input_mib", 0), default=None)
    if largest and cheaper_copy_cost(largest) is not None and \
            largest.get("zero_copy_binding_us") is not None:
        zero = largest["zero_copy_binding_us"]
        patch = ("%s µs" % us(zero)) if zero > 0.05 else \
            "nothing measurable (%s µs against the bare replay)" % us(zero)
        lines += ["", "Reading: at %s MiB, copying the input costs at least %s µs per call and "
                  "patching the graph's kernel nodes costs %s: the copy grows with the input, "
                  "the patch does not." % (largest.get("input_mib"),
                                           us(cheaper_copy_cost(largest)), patch)]
    return lines


def bucket_pool(report):
    buckets = report.get("buckets") or []
    alone = report.get("alone_reserved_bytes") or []
    largest = alone[-1] if alone else None
    rows = []
    for bucket, size in zip(buckets, alone):
        rows.append(["bucket %s alone" % bucket, mib(size), ratio(size / largest)])
    if largest:
        for label, key in (("sum of separate recordings", "sum_of_separate_bytes"),
                           ("all buckets, one shared pool", "shared_pool_bytes")):
            if report.get(key) is not None:
                rows.append([label, mib(report[key]), ratio(report[key] / largest)])
    lines = ["Pool memory of shape buckets: one row-wise function (%s kernels over [batch, %s] "
             "f32, every intermediate alive to the end) recorded for buckets %s into one shared "
             "pool, against each bucket recorded alone in a pool of its own; pool reserved "
             "bytes." % (report.get("kernels", "?"), report.get("width", "?"),
                         ", ".join(str(b) for b in buckets)), ""]
    lines += table(["recording", "pool bytes", "vs largest alone"], rows, ["l", "r", "r"])
    if largest and report.get("shared_pool_bytes") is not None and \
            report.get("sum_of_separate_bytes") is not None:
        lines += ["", "Reading: recorded largest-first into one pool, the buckets reuse the "
                  "largest one's memory: the shared pool holds %s the largest bucket alone, "
                  "where separate pools would hold %s." % (
                      ratio(report["shared_pool_bytes"] / largest),
                      ratio(report["sum_of_separate_bytes"] / largest))]
    return lines


def serve(report):
    results = rows_of(report)
    rows = []
    for r in results:
        lat = r.get("latency") or {}
        rows.append([r.get("max_batch"), r.get("backend"), "%.0f" % r.get("offered_per_s", 0),
                     "%.0f" % r.get("answered_per_s", 0), r.get("rejected", 0),
                     us(lat.get("median_us")), us(lat.get("p99_us")),
                     "%.1f" % r.get("mean_batch_rows", 0),
                     "yes" if r.get("saturated") else "", ratio(r.get("throughput_vs_eager"))])
    lines = ["The batching server under open-loop Poisson load (%s, %s rows per request, %s ms "
             "per rate and backend): offered and answered requests per second, latency from a "
             "request's scheduled arrival to its answer. A run is saturated when it rejected "
             "requests or answered under 90%% of what was sent. Answers identical across "
             "backends: %s." % (report.get("model", "?"), report.get("rows_per_request", "?"),
                                report.get("duration_ms", "?"),
                                {True: "yes", False: "NO"}.get(
                                    report.get("answers_identical_across_backends"), "?")), ""]
    lines += table(["max batch", "backend", "offered/s", "answered/s", "rejected", "p50",
                    "p99", "mean batch", "saturated", "throughput vs eager"], rows,
                   ["r", "l", "r", "r", "r", "r", "r", "r", "l", "r"])
    peaks = []
    for max_batch in cases_in_order([{"case": r.get("max_batch")} for r in results]):
        best = {}
        for r in results:
            if r.get("max_batch") == max_batch:
                best[r.get("backend")] = max(best.get(r.get("backend"), 0),
                                             r.get("answered_per_s", 0))
        peaks.append("max batch %s: %s" % (max_batch, ", ".join(
            "%s %.0f/s" % (backend, rate) for backend, rate in best.items())))
    if peaks:
        lines += ["", "Reading: the most requests answered per second at any offered rate, "
                  "per backend (%s). The goal takes cudagraphs' throughput at the highest offered "
                  "rate that saturates eager over eager's best at any rate, and the p99 of both "
                  "at that rate." % "; ".join(peaks)]
    return lines


def data_parallel(report):
    results = rows_of(report)
    rows = []
    for r in results:
        captured = r.get("collectives_captured")
        efficiency = r.get("scaling_efficiency")
        gain = r.get("overlap_gain")
        rows.append([r.get("case"), r.get("backend"), r.get("devices"),
                     "-" if r.get("overlap") is None else ("on" if r.get("overlap") else "off"),
                     latency_cell(r.get("step")), "%.0f" % r.get("samples_per_s", 0),
                     "-" if efficiency is None or r.get("devices") == 1
                     else "%.1f%%" % (100 * efficiency),
                     r.get("buckets", "-"),
                     "%.4f → %.4f" % (r.get("first_loss", float("nan")),
                                      r.get("last_loss", float("nan"))),
                     "-" if captured is None else ("yes" if captured else "NO"),
                     "-" if not gain or not r.get("overlap") else ratio(gain)])
    lines = ["Data-parallel training (one thread and device per rank, gradients averaged by "
             "bucketed all-reduce inside the backward): rank 0's step time on 1 and more "
             "devices, eager against cudagraphs. Weak scaling (every rank keeps its batch), so "
             "the scaling efficiency of N devices is step(1) / step(N), with the same backend and "
             "overlap setting. Overlap on: the all-reduces run on a communication stream while "
             "the rest of the backward computes; off: in line on the compute stream. Overlap "
             "gain: the step without overlap over the step with it.", ""]
    lines += table(["case (per-rank batch)", "backend", "devices", "overlap", "step",
                    "samples/s", "scaling efficiency", "buckets", "loss (first → last)",
                    "collectives captured", "overlap gain"], rows,
                   ["l", "l", "r", "l", "r", "r", "r", "r", "l", "l", "r"])
    if not any((r.get("devices") or 1) > 1 for r in results):
        lines += ["", "Reading: this session had one device, so no scaling was measured; "
                  "run data_parallel on a 2-GPU machine for it."]
    else:
        best = [r for r in results if (r.get("devices") or 1) > 1 and r.get("scaling_efficiency")]
        if best:
            lines += ["", "Reading: scaling efficiency on more than one device: %s." % "; ".join(
                "%s %s on %s: %.1f%%" % (r.get("case"), r.get("backend"), r.get("devices"),
                                         100 * r["scaling_efficiency"]) for r in best)]
    return lines


def generic(report):
    rows = [[key, value] for key, value in sorted(report.items())
            if isinstance(value, (str, int, float, bool)) or value is None]
    lines = ["A benchmark this script does not know yet; its top-level scalar fields:", ""]
    lines += table(["field", "value"], rows)
    counted = ["%s: %d entries" % (key, len(value)) for key, value in sorted(report.items())
               if isinstance(value, list)]
    if counted:
        lines += ["", "Lists in the report: %s." % "; ".join(counted)]
    return lines


SECTIONS = [
    ("launch_overhead", "Launch overhead (`benchmarks/launch_overhead`)", launch_overhead),
    ("backend_latency", "Inference: eager vs cudagraphs vs bare replay "
                        "(`benchmarks/backend_latency`)", backend_latency),
    ("backend_latency_host_copies", "Inference with input copies before the launch "
                                    "(`GROVE_CUDAGRAPHS_GRAPH_INPUT_COPIES=0 "
                                    "benchmarks/backend_latency`, the A/B of the default)",
     lambda report: backend_latency(report, graph_copies=False)),
    ("eager_latency", "Eager backend (`benchmarks/eager_latency`)", eager_latency),
    ("train_step", "Training step (`benchmarks/train_step`)", train_step),
    ("torch", "PyTorch in the same session (`benchmarks/compare_torch.py`)", compare_torch),
    ("tree_overhead", "Tree manager overhead (`benchmarks/tree_overhead`)", tree_overhead),
    ("input_binding", "Input binding: copy vs zero-copy (`benchmarks/input_binding`)",
     input_binding),
    ("bucket_pool", "Shape buckets: pool bytes (`benchmarks/bucket_pool`)", bucket_pool),
    ("serve", "Serving (`benchmarks/serve`)", serve),
    ("data_parallel", "Data-parallel training (`benchmarks/data_parallel`)", data_parallel),
    ("serve_http", "Serving over HTTP (`benchmarks/serve_http`)",
     lambda report: _serving().serve_http(report)),
    ("bucket_plan", "Planned batch buckets (`benchmarks/bucket_plan`)",
     lambda report: _serving().bucket_plan(report)),
    ("decode", "Decode: per-step graphs vs the WHILE loop (`benchmarks/decode`)",
     lambda report: _decode().decode(report)),
    ("decode_load", "Decode under open-loop load (`benchmarks/decode load`)",
     lambda report: _decode().load(report)),
    ("decode_compare_hf", "Decode in PyTorch (`benchmarks/decode/compare_hf.py`)",
     lambda report: _decode().compare_hf(report)),
    ("torch_backend", "torch.compile(backend=\"grove\"), inference "
                      "(`benchmarks/torch_backend.py`)",
     lambda report: _torch_backend().inference(report)),
    ("torch_backend_train", "torch.compile(backend=\"grove\"), training "
                            "(`benchmarks/torch_backend.py --train`)",
     lambda report: _torch_backend().training(report)),
    ("torch_zoo", "Real models and decode through torch.compile (`benchmarks/torch_zoo.py`)",
     lambda report: _torch_zoo().render(report)),
    ("torch_zoo_train", "Real models trained through torch.compile "
                        "(`benchmarks/torch_zoo.py --train`)",
     lambda report: _torch_zoo().training(report)),
    ("ddp_door", "Data parallel through the torch door (`benchmarks/ddp_door.py`)",
     lambda report: _ddp_door().render(report)),
]


def _floors():
    import write_results_floors  # noqa: E402  (next to this file; imports this module)
    return write_results_floors


def _torch_backend():
    import write_results_torch_backend  # noqa: E402  (next to this file; imports this module)
    return write_results_torch_backend


def _decode():
    import write_results_decode  # noqa: E402  (next to this file; imports this module)
    return write_results_decode


def _torch_zoo():
    import write_results_torch_zoo  # noqa: E402  (next to this file; imports this module)
    return write_results_torch_zoo


def _ddp_door():
    import write_results_ddp_door  # noqa: E402  (next to this file; imports this module)
    return write_results_ddp_door


def _serving():
    import write_results_serving  # noqa: E402  (next to this file; imports this module)
    return write_results_serving


# ------------------------------------------------------------- lookups


MET, NOT_MET, UNMEASURED = "met", "**NOT met**", "not measured"


def verdict(ok):
    return MET if ok else NOT_MET


def needs(*values_and_names):
    """Why a goal is not measured: the numbers it lacked, from (value, name)
    pairs given flat: needs(a, "a's source", b, "b's source", ...)."""
    pairs = zip(values_and_names[::2], values_and_names[1::2])
    return " and ".join("no %s number" % name for value, name in pairs if not value)


def batch1_case(rows, model):
    """The first case label of `model` at batch 1 ('mlp16x512 b=1', 'gpt4x256 b=1 T=32')."""
    for row in rows:
        case = str(row.get("case", ""))
        if case.startswith(model + " ") and (" b=1 " in case + " "):
            return case
    return None


def find(rows, **match):
    for row in rows:
        if all(row.get(key) == value for key, value in match.items()):
            return row
    return None


def median_of(row):
    if not row or row.get("status", "measured") != "measured" or "error" in row:
        return None
    return median(row.get("latency", row))


def first(rows, key, default):
    for row in rows:
        if key in row:
            return row[key]
    return default


def binding_ratio_text(copy_cost, zero_cost):
    if copy_cost is None or zero_cost is None:
        return "-"
    if zero_cost <= 0.05:
        return "zero-copy at bare replay (cost ≤ 0.05 µs)"
    return ratio(copy_cost / zero_cost)


def comparable_torch_rows(report):
    """compare_torch's rows that grove's numbers are compared with: f32, and for
    training SGD momentum 0.9 (fused or not); of several rows of one (mode, case,
    config) the fastest measured one (the first when none was measured)."""
    chosen, order = {}, []
    for r in rows_of(report or {}):
        if (r.get("dtype") or "f32") != "f32":
            continue
        if r.get("mode") == "training" and r.get("optimizer") not in SGD_MOMENTUM:
            continue
        key = (r.get("mode"), r.get("case"), r.get("config"))
        if key not in chosen:
            chosen[key] = r
            order.append(key)
        elif median_of(r) and (not median_of(chosen[key]) or
                               median_of(r) < median_of(chosen[key])):
            chosen[key] = r
    return [chosen[key] for key in order]


def latency_matrix(reports):
    """[(mode, [(case, {series: median us})])] for the side-by-side table and the plot."""
    panels = []
    grove = {"inference": ("backend_latency", {"eager": "grove eager",
                                               "cudagraphs": "grove cudagraphs",
                                               "bare replay": "bare replay"}),
             "training": ("train_step", {"eager": "grove eager",
                                         "cudagraphs": "grove cudagraphs"})}
    torch_rows = comparable_torch_rows(reports.get("torch"))
    for mode in ("inference", "training"):
        source, names = grove[mode]
        grove_rows = rows_of(reports.get(source, {}))
        mode_torch = [r for r in torch_rows if r.get("mode") == mode]
        cases = []
        for case in cases_in_order(grove_rows + mode_torch):
            values = {}
            for r in grove_rows:
                if r.get("case") == case and r.get("backend") in names:
                    values[names[r["backend"]]] = median_of(r)
            for r in mode_torch:
                if r.get("case") == case and r.get("config") in TORCH_SERIES:
                    values[TORCH_SERIES[r["config"]]] = median_of(r)
                elif r.get("case") == case and r.get("config") in HAND_CAPTURED_CONFIGS:
                    values[HAND_CAPTURED_SERIES] = median_of(r)
            cases.append((case, values))
        panels.append((mode, cases))
    return panels


def side_by_side(context):
    panels = latency_matrix(context.reports)
    if not any(cases for _, cases in panels):
        return []
    floors = _floors().floors(context)
    lines = ["## grove and PyTorch side by side", "",
             "Median latency per call (inference) or per step (training), µs, from the "
             "sections above (PyTorch: f32; training with SGD momentum 0.9, the faster of "
             "foreach and fused). Floor: the larger of the node floor and the memory floor "
             "(the next section). The last three columns: grove cudagraphs' time over the floor, "
             "over PyTorch's fastest configuration that torch.compile users get (the "
             "hand-captured graph aside; below 1: grove is faster), and grove eager's speedup "
             "over PyTorch eager.", ""]
    used = [s for s in PLOT_SERIES if any(v.get(s) for _, cases in panels for _, v in cases)]
    rows = []
    for mode, cases in panels:
        for case, values in cases:
            torch_best = best_torch(values)
            graph = values.get("grove cudagraphs")
            floor = (floors.get((mode, case)) or {}).get("floor_us")
            rows.append([mode, case] + [us(values.get(s)) for s in used] + [
                _floors().floor_cell(floors.get((mode, case))),
                ratio(graph / floor) if graph and floor else "-",
                ratio(graph / torch_best[1]) if graph and torch_best else "-",
                ratio(values["PyTorch eager"] / values["grove eager"])
                if values.get("grove eager") and values.get("PyTorch eager") else "-"])
    lines += table(["mode", "case"] + used + ["floor", "grove cudagraphs / floor",
                                              "grove cudagraphs / PyTorch best",
                                              "PyTorch eager / grove eager"],
                   rows, ["l", "l"] + ["r"] * (len(used) + 4))
    return lines + [""]


def best_torch(values):
    """(series, us) of PyTorch's fastest measured configuration, or None."""
    measured = [(values[s], s) for s in TORCH_SERIES.values() if values.get(s)]
    return (min(measured)[1], min(measured)[0]) if measured else None


def render_all(context):
    lines = []
    known = {name for name, _, _ in SECTIONS}
    for name, title, render in SECTIONS:
        lines += ["## %s" % title, ""]
        report = context.reports.get(name)
        if report is None:
            lines += not_run(context, name)
            continue
        if report.get("read_from"):
            lines += ["From `%s` (its benchmark field names this section)." % report["read_from"],
                      ""]
        try:
            lines += render(report) + [""]
        except SHAPE_ERRORS as error:
            lines += ["`%s.json` has a shape this script did not expect (%s: %s); its "
                      "numbers are in gpu_logs." % (name, type(error).__name__, error), ""]
    try:
        lines += side_by_side(context)
    except SHAPE_ERRORS as error:
        lines += ["## grove and PyTorch side by side", "",
                  "Not written: a report has an unexpected shape (%s)." % error, ""]
    try:
        lines += _floors().section(context)
    except SHAPE_ERRORS as error:
        lines += ["## Floors: graph nodes and bytes that must move", "",
                  "Not written: a report has an unexpected shape (%s: %s)."
                  % (type(error).__name__, error), ""]
    for name in sorted(set(context.reports) - known):
        lines += ["## %s (`%s.json`)" % (name, name), ""] + generic(context.reports[name]) + [""]
    return lines

