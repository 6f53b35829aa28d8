"""RESULTS.md sections for grove serve's benchmarks: serve_http (the whole HTTP
path under open-loop load) and bucket_plan (planned buckets against powers of
two). Kept apart from write_results_sections.py, which lists them in SECTIONS."""
import copy
import statistics

import write_results_sections as sections  # noqa: E402  (lives next to this file)


def clients_text(report):
    """"64 keep-alive clients", or with --connections K "64 clients x K connections each"."""
    clients, connections = report.get("clients", "?"), report.get("connections_per_client", 1)
    if connections == 1:
        return "%s keep-alive clients" % clients
    return ("%s clients × %s keep-alive connections each (a request in flight on each)"
            % (clients, connections))


def held_open_pairs(rows):
    """[(held, alone)]: per max batch, backend, encoding, offered rate and held counts, the
    runs with idle and slowloris connections held open and the runs without them, each
    as one row whose p99 is the median of its runs' (serve_http --held-repeats N measures
    each N times, alternately: Note [Held verdict from repeats]; `p99_runs_us` lists them);
    alone is None where no run without them exists."""
    def key(r):
        return tuple(r.get(k) for k in ("max_batch", "backend", "encoding", "offered_per_s"))

    groups = []  # [(key, (idle, slowloris), [held runs])]
    for r in rows:
        if not r.get("held_open"):
            continue
        counts = (r["held_open"].get("idle"), r["held_open"].get("slowloris"))
        group = next((g for g in groups if g[0] == key(r) and g[1] == counts), None)
        if group is None:
            groups.append((key(r), counts, [r]))
        else:
            group[2].append(r)
    pairs = []
    for k, _, held in groups:
        alone = [a for a in rows if not a.get("held_open") and key(a) == k]
        pairs.append((median_run(held), median_run(alone) if alone else None))
    return pairs


def median_run(runs):
    """A copy of the first of `runs` whose p99 is the median of theirs, with `p99_runs_us`
    (each run's) and, for held runs, the connections reopened in all of them."""
    row = copy.deepcopy(runs[0])
    p99s = [(r.get("latency") or {}).get("p99_us") for r in runs]
    p99s = [p for p in p99s if p is not None]
    if p99s:
        row.setdefault("latency", {})["p99_us"] = statistics.median(p99s)
    row["p99_runs_us"] = p99s
    if row.get("held_open"):
        row["held_open"]["reopened"] = sum((r["held_open"].get("reopened") or 0) for r in runs)
    return row


def p99_cell(run):
    """The run's p99, and where it is a median, every run's p99 beside it."""
    if not run:
        return sections.us(None)
    p99 = (run.get("latency") or {}).get("p99_us")
    runs = run.get("p99_runs_us") or []
    if len(runs) < 2:
        return sections.us(p99)
    return "%s (median of %s)" % (sections.us(p99), ", ".join(sections.us(p) for p in runs))


def serve_http(report):
    every = sections.rows_of(report)
    # Runs measured with idle and slowloris connections held open have a table of their own.
    results = [r for r in every if not r.get("held_open")]
    rows = []
    for r in results:
        lat = r.get("latency") or {}
        rows.append([r.get("max_batch"), r.get("backend"), r.get("encoding", "json"),
                     "%.0f" % r.get("offered_per_s", 0),
                     "%.0f" % r.get("answered_per_s", 0), r.get("rejected", 0),
                     r.get("errors", 0), sections.us(lat.get("median_us")),
                     sections.us(lat.get("p99_us")), "%.1f" % r.get("mean_batch_rows", 0),
                     "yes" if r.get("saturated") else "",
                     sections.ratio(r.get("p99_eager_over_this"))])
    lines = ["`grove serve`'s whole path under open-loop load over loopback (%s, one row per "
             "request as KServe v2 JSON, or with the binary tensor data extension where the "
             "encoding says binary, or over gRPC with raw contents where it says grpc, %s "
             "with Poisson arrivals, %s ms per "
             "rate and backend): offered and answered requests per second, latency from a "
             "request's scheduled arrival to its whole answer read by the client. A run is "
             "saturated when it got 503s or answered under 90%% of the offered rate."
             % (report.get("model", "?"), clients_text(report),
                report.get("duration_ms", "?")), ""]
    lines += sections.table(["max batch", "backend", "encoding", "offered/s", "answered/s",
                             "503s", "errors", "p50", "p99", "mean batch", "saturated",
                             "p99 eager / this"], rows,
                            ["r", "l", "l", "r", "r", "r", "r", "r", "r", "r", "l", "r"])
    best_rows = []
    encodings = []
    for r in results:
        if r.get("encoding", "json") not in encodings:
            encodings.append(r.get("encoding", "json"))
    for max_batch in sections.cases_in_order([{"case": r.get("max_batch")} for r in results]):
        for encoding in encodings:
            best = {}
            for r in results:
                if r.get("max_batch") == max_batch and r.get("encoding", "json") == encoding:
                    best[r.get("backend")] = max(best.get(r.get("backend"), 0),
                                                 r.get("answered_per_s", 0))
            if best.get("eager") and best.get("cudagraphs"):
                best_rows.append([max_batch, encoding, "%.0f" % best["eager"],
                                  "%.0f" % best["cudagraphs"],
                                  sections.ratio(best["cudagraphs"] / best["eager"])])
    if best_rows:
        lines += ["", "Best answered/s at any offered rate, per encoding (the goal: cudagraphs "
                  "≥ 2× eager's best at max batch 16 and 64):", ""]
        lines += sections.table(["max batch", "encoding", "eager", "cudagraphs",
                                 "cudagraphs / eager"], best_rows, ["r", "l", "r", "r", "r"])
    held_rows = []
    for r, alone in held_open_pairs(every):
        p99_alone = ((alone or {}).get("latency") or {}).get("p99_us")
        p99_held = (r.get("latency") or {}).get("p99_us")
        ratio = p99_held / p99_alone if p99_alone and p99_held else None
        h = r["held_open"]
        held_rows.append([r.get("max_batch"), r.get("backend"), r.get("encoding", "json"),
                          "%.0f" % r.get("offered_per_s", 0),
                          "%s + %s" % (h.get("idle", 0), h.get("slowloris", 0)),
                          p99_cell(alone), p99_cell(r), sections.ratio(ratio),
                          h.get("reopened", 0),
                          "-" if ratio is None else ("met" if ratio <= 2 else "**NOT met**")])
    if held_rows:
        lines += ["", "p99 with idle + slowloris connections held open against the same front, "
                  "over p99 without (the goal: within 2× with 10,000 idle and 500 slowloris; "
                  "reopened: held connections the server closed and the benchmark opened again; a rate "
                  "measured more than once, alone and held alternately, is judged on the median "
                  "p99s, every run's beside them):",
                  ""]
        lines += sections.table(["max batch", "backend", "encoding", "offered/s",
                                 "idle + slowloris", "p99 alone", "p99 held", "held / alone",
                                 "reopened", "goal"], held_rows,
                                ["r", "l", "l", "r", "r", "r", "r", "r", "r", "l"])
    return lines


def bucket_plan(report):
    rows = []
    for r in sections.rows_of(report):
        total = (r.get("rows") or 0) + (r.get("padded_rows") or 0)
        lat = r.get("batch_latency") or {}
        rows.append([r.get("set"), ",".join(str(b) for b in r.get("buckets", [])),
                     r.get("padded_rows", 0),
                     "%.1f%%" % (100.0 * r.get("padded_rows", 0) / total) if total else "-",
                     sections.mib(r.get("pool_reserved_bytes", 0)),
                     sections.us(lat.get("median_us")), sections.us(lat.get("p99_us"))])
    lines = ["Batch buckets planned from one skewed trace of batch sizes and measured on "
             "another of the same mix (%s, max batch %s, %s batches each), against the powers "
             "of two: padded rows, the graph pool the server holds, time per batch. The goal: "
             "less padding and no more memory." % (report.get("model", "?"),
                                                   report.get("max_batch", "?"),
                                                   report.get("batches", "?")), ""]
    lines += sections.table(["buckets", "sizes", "padded rows", "padding", "pool reserved",
                             "batch p50", "batch p99"], rows,
                            ["l", "l", "r", "r", "r", "r", "r"])
    return lines
