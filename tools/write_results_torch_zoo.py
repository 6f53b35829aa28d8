"""RESULTS.md section for benchmarks/torch_zoo.py (torch_zoo.json): per zoo
model and batch the ops grove left to PyTorch, grove's graph replays per
call and the latency of PyTorch eager, reduce-overhead and grove; then decode
tokens/s; and the zoo's training table (torch_zoo_train.json, benchmarks/
torch_zoo.py --train). Kept apart from write_results_sections.py, which lists it in
SECTIONS."""
import write_results_sections as sections  # noqa: E402  (lives next to this file)

VARIANTS = [("torch_eager", "torch eager"), ("torch_reduce_overhead", "reduce-overhead"),
            ("grove", "grove")]


def _latency(entry):
    if isinstance(entry, dict) and "error" in entry:
        return "failed"
    return sections.us(sections.median(entry))


def _rate(entry):
    if not isinstance(entry, dict):
        return "-"
    if "error" in entry:
        if entry.get("did_not_finish"):
            return "did not finish (%.0f s)" % entry["limit_s"] if entry.get("limit_s") \
                else "did not finish"
        return "not run" if entry["error"].startswith("not run") else "failed"
    if entry.get("tokens_per_s") is None:
        return "-"
    mark = "" if entry.get("tokens_match_eager") else " (tokens differ)"
    first = entry.get("first_call_tokens_per_s")
    if first is None:
        return "%.1f%s" % (entry["tokens_per_s"], mark)
    return "%.1f (first call %.1f)%s" % (entry["tokens_per_s"], first, mark)


def _decode_ratio(row):
    """grove's tokens/s over reduce-overhead's (higher is better), as the
    benchmark wrote it, else from the two rates; None where either is missing."""
    if row.get("grove_over_reduce_overhead") is not None:
        return row["grove_over_reduce_overhead"]
    grove = (row.get("grove") or {}).get("tokens_per_s")
    base = (row.get("torch_reduce_overhead") or {}).get("tokens_per_s")
    return grove / base if grove and base else None


def _errors(rows, keys):
    lines = []
    for row in rows:
        label = "%s%s" % (row.get("model", "?"),
                          " b=%s" % row["batch"] if "batch" in row else "")
        if "error" in row:
            lines.append("- %s: %s" % (label, sections.short_error(row["error"])))
        for key in keys:
            entry = row.get(key)
            if isinstance(entry, dict) and "error" in entry:
                lines.append("- %s, %s: %s" % (label, key, sections.short_error(entry["error"])))
    return lines


def _kernels(entry):
    """"kernels / GPU µs" per call from the row's profile (Note [Kernels per
    call in the zoo], benchmarks/torch_zoo.py), or "-"."""
    profile = entry.get("kernels") if isinstance(entry, dict) else None
    if not profile or "kernels_per_call" not in profile:
        return "-"
    return "%g / %.0f" % (profile["kernels_per_call"], profile["gpu_us_per_call"])


def _model(row):
    """The row's model, with the file it came from where the report merged several
    (write_results.merge_split_reports)."""
    return row.get("model", "?") + (" (%s)" % row["from"] if row.get("from") else "")


def render(report):
    rows = sections.rows_of(report, "rows")
    table = []
    for r in rows:
        ops = r.get("ops_in_pytorch")
        table.append([_model(r), r.get("batch", "?"),
                      "-" if ops is None else (", ".join(ops) if ops else "0"),
                      "-" if r.get("graph_replays_per_call") is None
                      else "%g" % r["graph_replays_per_call"]] +
                     [_latency(r.get(key)) for key, _ in VARIANTS] +
                     [sections.ratio(r.get("grove_over_reduce_overhead"))] +
                     [_kernels(r.get(key)) for key in ("torch_reduce_overhead", "grove")])
    lines = ["Models with random weights on PyTorch %s, %s, f32 (TF32 off), %s calls per variant "
             "(median µs): ops grove left to PyTorch, grove graph replays per call, latency of "
             "PyTorch eager, `mode=\"reduce-overhead\"` and `backend=\"grove\"`, and the "
             "kernels per call with their GPU time (torch.profiler; µs) of reduce-overhead and "
             "grove (%.0f s in all)."
             % (report.get("torch", "?"), report.get("device", "?"), report.get("repeats", "?"),
                report.get("seconds") or 0), ""]
    if report.get("merged_from"):
        lines[-1:-1] = ["", "One table of %s (the benchmark run in more than one call; the "
                        "header above is the first's): a row from a later file names it."
                        % ", ".join("`%s`" % name for name in report["merged_from"])]
    lines += sections.table(["model", "batch", "ops in PyTorch", "replays/call"] +
                            [label for _, label in VARIANTS] +
                            ["grove / r-o", "r-o kernels / µs", "grove kernels / µs"], table,
                            ["l", "r", "l", "r", "r", "r", "r", "r", "r", "r"])
    decode = sections.rows_of(report, "decode")
    if decode:
        rows_out = [[_model(d), d.get("new_tokens", "?")] +
                    [_rate(d.get(key)) for key, _ in VARIANTS] +
                    [sections.ratio(_decode_ratio(d)),
                     "-" if d.get("grove_recordings") is None else d["grove_recordings"]]
                    for d in decode]
        lines += ["", "Greedy decode, tokens/s over the new tokens: the median of the "
                  "generate calls after the first (the first call's rate, compilation "
                  "included, in parentheses where measured; \"tokens differ\": not the tokens "
                  "of eager PyTorch in every call; \"did not finish\": stopped at its time "
                  "limit), grove's rate over reduce-overhead's, and the graphs grove recorded "
                  "during the calls after the first:", ""]
        lines += sections.table(["decode", "new tokens"] + [label for _, label in VARIANTS] +
                                ["grove / r-o", "grove recordings"], rows_out,
                                ["l", "r", "r", "r", "r", "r", "r"])
    errors = _errors(rows, [key for key, _ in VARIANTS]) + \
        _errors(decode, [key for key, _ in VARIANTS])
    if errors:
        lines += ["", "Failures:", ""] + errors
    return lines + [""]


TRAIN_VARIANTS = [("torch_eager", "torch eager"), ("torch_reduce_overhead", "reduce-overhead"),
                  ("grove", "grove door"), ("grove_step", "grove whole step")]


def _loss(entry):
    """The largest loss difference from eager over the steps, or "-"."""
    if not isinstance(entry, dict) or entry.get("loss_difference") is None:
        return "-"
    return "%.1e" % entry["loss_difference"]


def training(report):
    """torch_zoo_train.json: per model, batch and optimizer the median µs per
    step of each variant, the door's and the whole step's ratio to
    reduce-overhead (as the benchmark wrote them) and their largest loss
    difference from eager."""
    rows = sections.rows_of(report, "rows")
    table = []
    for r in rows:
        door, step = r.get("grove"), r.get("grove_step")
        table.append([_model(r), r.get("batch", "?"), r.get("optimizer", "?")] +
                     [_latency(r.get(key)) for key, _ in TRAIN_VARIANTS] +
                     [sections.ratio((door or {}).get("over_reduce_overhead")),
                      sections.ratio((step or {}).get("over_reduce_overhead")),
                      _loss(door), _loss(step)])
    lines = ["Training steps (forward, loss, backward, optimizer) of zoo models with random "
             "weights on PyTorch %s, %s, f32, %s steps per variant (median µs per step): "
             "PyTorch eager and `mode=\"reduce-overhead\"`, grove through the door (PyTorch's "
             "optimizer) and grove's whole step (one compiled step function); the ratios to "
             "reduce-overhead and the largest loss difference from eager over the steps "
             "(%.0f s in all)."
             % (report.get("torch", "?"), report.get("device", "?"), report.get("repeats", "?"),
                report.get("seconds") or 0), ""]
    lines += sections.table(["model", "batch", "optimizer"] +
                            [label for _, label in TRAIN_VARIANTS] +
                            ["door / r-o", "whole step / r-o", "door loss diff",
                             "whole step loss diff"], table,
                            ["l", "r", "l", "r", "r", "r", "r", "r", "r", "r", "r"])
    errors = _errors(rows, [key for key, _ in TRAIN_VARIANTS])
    if errors:
        lines += ["", "Failures:", ""] + errors
    return lines + [""]
