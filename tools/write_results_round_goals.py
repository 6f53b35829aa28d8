"""RESULTS.md's goals of issues 33, 34, 35 and 38, each recomputed from one
session's numbers (Note [Goals are judged from the numbers] in
write_results.py; a missing input is "not measured" and names the report it
needs):

- issue 33 (torch_zoo.json): per zoo model 0 ops left to PyTorch and one
  graph replay per call; grove ≤ 0.5× reduce-overhead at batch 1 and ≤ 0.9×
  at batch 16; HF static-cache decode through grove ≥ 2× eager's tokens/s
  and faster than reduce-overhead where reduce-overhead ran;
- issue 34: the door's default `grove` row ≤ 0.5× reduce-overhead per model
  (torch_backend_train.json, torch_zoo_train.json; grove.torch.optim and
  update-in-backward rows are listed as information), gpt4x256's whole step
  ≤ 0.7× PyTorch's hand-captured whole step, the whole step (SGD momentum) ≤
  1.2× grove's own C++ trainer (train_step.json), DDP through the door on 2 GPUs ≤
  0.5× torch DDP reduce-overhead (ddp_door.json), native data parallel ≥ 90%
  weak-scaling efficiency on 2 GPUs (data_parallel.json);
- issue 35 (serve_http.json, serve.json): cudagraphs ≥ 2× eager's best
  answered/s at max batch 16 and 64 for every encoding; the HTTP front ≥
  0.8× the in-process server's best (cudagraphs, same max batch); with 10,000
  idle and 500 slowloris connections held open, p99 within 2× of it without;
- issue 38 (decode.json, decode load's report): LLaMA-1B-class batch-1 MBU ≥
  70%; the small config's WHILE loop ≥ 1.3× per-step graphs; 64 concurrent
  streams ≥ 10× batch-1 tokens/s with ITL p99 ≤ 2× p50.

A report is found by its name or by its "benchmark" field (ddp_door_2gpu.json,
torch_zoo_rest.json, data_parallel_2gpu.json count), the one named after the
benchmark first. Tests: tests/tools/write_results_test.sh (round goals).
"""
import write_results_decode as decode_sections  # noqa: E402  (lives next to this file)
import write_results_floors as floors  # noqa: E402  (lives next to this file)
import write_results_sections as sections  # noqa: E402  (lives next to this file)
import write_results_serving as serving  # noqa: E402  (lives next to this file)

us, ratio, verdict = sections.us, sections.ratio, sections.verdict
MET, NOT_MET, UNMEASURED = sections.MET, sections.NOT_MET, sections.UNMEASURED
# A row that shows a number beside the goals but is no goal (not counted).
INFORMATION = "information"

# benchmarks/torch_zoo.py's MODELS: the goals hold on every one of them.
ZOO_MODELS = ("gpt2", "llama", "bert", "bart", "vit", "resnet18", "mlp_mixer",
              "transformer_decoder")
ZOO_LIMITS = ((1, 0.5), (16, 0.9))
# The door's variants other than its default (benchmarks/torch_backend.py).
DOOR_INFORMATION = (("grove_optim", "grove.torch.optim's AdamW"),
                    ("grove_optim_in_backward", "grove.torch.optim, update in backward"),
                    ("grove_direct", "gradients set directly"),
                    ("grove_optim_direct", "grove.torch.optim, gradients set directly"))
DDP_VARIANTS = (("grove_ddp", "grove.torch.DistributedDataParallel"),
                ("grove", "torch DDP under backend=\"grove\""))
ENCODINGS = ("json", "binary", "grpc")
SERVE_MAX_BATCHES = (16, 64)


# ------------------------------------------------------------------ lookups


def reports_of(reports, benchmark, name=None):
    """[(file name, report)] of `benchmark`'s reports: the one named `name`
    (default: the benchmark's own name) first, then any other whose
    "benchmark" field says it, by name."""
    name = name or benchmark
    first = [(name, reports[name])] if name in reports else []
    return first + [(other, report) for other, report in sorted(reports.items())
                    if other != name and report.get("benchmark") == benchmark]


def file_of(name, report):
    """The file a report came from (write_results.read_as_section may have renamed it)."""
    return report.get("read_from") or name + ".json"


def source(name, benchmark, report):
    """' (NAME.json)' where a report other than <benchmark>.json gave a number."""
    found = file_of(name, report)
    return "" if found == benchmark + ".json" else " (%s)" % found


def entry_median(entry):
    """The median µs of a variant's entry ({"median_us": ...}), None if it failed."""
    if not isinstance(entry, dict) or "error" in entry:
        return None
    return entry.get("median_us")


def failure(entry, variant):
    """Why a variant has no number: its error, or its absence."""
    if isinstance(entry, dict) and entry.get("error"):
        if entry.get("did_not_finish"):
            return "%s did not finish" % variant
        return "%s failed: %s" % (variant, sections.short_error(entry["error"], 80))
    return "no %s number" % variant


def near_ratio(value, limit):
    """ratio(value), with a third digit where two would print the limit itself."""
    return "%.3f×" % value if abs(value - limit) < 0.005 else ratio(value)


def ratio_goal(goal, over, under, over_name, under_name, limit, suffix=""):
    """[goal, measured, verdict] of over / under ≤ limit from two entries."""
    top, bottom = entry_median(over), entry_median(under)
    if top and bottom:
        return [goal, "%s / %s = %s%s" % (us(top), us(bottom), near_ratio(top / bottom, limit),
                                          suffix), verdict(top / bottom <= limit)]
    missing = [failure(e, n) for e, n in ((over, over_name), (under, under_name))
               if not entry_median(e)]
    return [goal, "; ".join(missing) + suffix, UNMEASURED]


# ------------------------------------------------------------ issue 33: zoo


def zoo_rows(reports):
    """{(model, batch): (row, report name)}: of rows for the same case, the first
    with a grove number (torch_zoo.json's before the others')."""
    found = {}
    for name, report in reports_of(reports, "torch_zoo"):
        for row in sections.rows_of(report, "rows"):
            key = (row.get("model"), row.get("batch"))
            if key not in found or (entry_median(found[key][0].get("grove")) is None and
                                    entry_median(row.get("grove")) is not None):
                found[key] = (row, name)
    return found


def zoo_inference(context):
    if not reports_of(context.reports, "torch_zoo"):
        return [["zoo: 0 ops left to PyTorch, 1 graph replay per call; grove ≤ 0.5× / 0.9× "
                 "reduce-overhead at batch 1 / 16", "needs torch_zoo.json "
                 "(benchmarks/torch_zoo.py)", UNMEASURED]]
    found = zoo_rows(context.reports)
    models = list(ZOO_MODELS) + [m for m, _ in found if m not in ZOO_MODELS]
    goals = []
    for model in dict.fromkeys(models):
        batches = sorted(batch for m, batch in found if m == model)
        goal = "0 ops left to PyTorch, 1 graph replay per call, %s" % model
        if not batches:
            goals.append([goal, "torch_zoo.json has no %s row" % model, UNMEASURED])
        else:
            goals.append(zoo_placement(goal, [(b, found[(model, b)][0]) for b in batches]))
        for batch, limit in ZOO_LIMITS:
            goal = "grove ≤ %.1f× reduce-overhead, %s b=%d" % (limit, model, batch)
            if (model, batch) not in found:
                goals.append([goal, "torch_zoo.json has no %s b=%d row" % (model, batch),
                              UNMEASURED])
                continue
            row, name = found[(model, batch)]
            if row.get("error"):
                goals.append([goal, "the case failed: %s" % sections.short_error(row["error"], 80),
                              UNMEASURED])
                continue
            goals.append(ratio_goal(goal, row.get("grove"), row.get("torch_reduce_overhead"),
                                    "grove", "reduce-overhead", limit,
                                    " (%s)" % row["from"] if row.get("from") else
                                    source(name, "torch_zoo", context.reports[name])))
    return goals


def zoo_placement(goal, rows):
    """Every batch's row: no op left to PyTorch and exactly one replay per call."""
    parts, unknown, ok = [], False, True
    for batch, row in rows:
        ops, replays = row.get("ops_in_pytorch"), row.get("graph_replays_per_call")
        if ops is None or replays is None:
            unknown = True
            parts.append("b=%s: %s" % (batch, sections.short_error(row["error"], 60)
                                       if row.get("error") else "not counted"))
            continue
        ok = ok and not ops and replays == 1
        parts.append("b=%s: %s, %g replay%s per call" % (
            batch, ", ".join(ops) if ops else "0 ops", replays, "" if replays == 1 else "s"))
    if not ok:
        return [goal, "; ".join(parts), NOT_MET]
    return [goal, "; ".join(parts), UNMEASURED if unknown else MET]


def rate_of(entry):
    if not isinstance(entry, dict) or "error" in entry:
        return None
    return entry.get("tokens_per_s")


def zoo_decode(context):
    model = "hf_llama_static_cache"
    faster = "HF static-cache decode through grove ≥ 2× eager's tokens/s"
    beats = "HF static-cache decode through grove faster than reduce-overhead (where it runs)"
    row = None
    for _, report in reports_of(context.reports, "torch_zoo"):
        row = row or sections.find(sections.rows_of(report, "decode"), model=model)
    if row is None:
        why = "needs torch_zoo.json's decode rows (torch_zoo.py --decode): no %s row" % model
        return [[faster, why, UNMEASURED], [beats, why, UNMEASURED]]
    grove, eager, reduce = (row.get(k) for k in ("grove", "torch_eager",
                                                  "torch_reduce_overhead"))
    differ = isinstance(grove, dict) and grove.get("tokens_match_eager") is False
    note = "; grove's tokens differ from eager's" if differ else ""
    goals = []
    for goal, base, base_name, limit in ((faster, eager, "eager", 2.0),
                                         (beats, reduce, "reduce-overhead", 1.0)):
        if rate_of(grove) and rate_of(base):
            speed = rate_of(grove) / rate_of(base)
            ok = speed >= limit if limit > 1 else speed > limit
            goals.append([goal, "%.1f / %.1f tokens/s = %s%s" % (
                rate_of(grove), rate_of(base), ratio(speed), note), verdict(ok and not differ)])
        else:
            missing = [failure(e, n) for e, n in ((grove, "grove"), (base, base_name))
                       if not rate_of(e)]
            goals.append([goal, "; ".join(missing), UNMEASURED])
    return goals


# -------------------------------------------------------- issue 34: training


def door_training(context):
    limit = 0.5
    found = []
    for name, report in reports_of(context.reports, "torch_backend_train"):
        found += [(str(r.get("model", "?")), r) for r in sections.rows_of(report, "rows")]
    for name, report in reports_of(context.reports, "torch_zoo_train"):
        found += [("%s b=%s %s (zoo)" % (r.get("model", "?"), r.get("batch", "?"),
                                         r.get("optimizer", "?")), r)
                  for r in sections.rows_of(report, "rows")]
    goal = "grove through the door (default `grove`, PyTorch's optimizer) ≤ 0.5× reduce-overhead"
    if not found:
        return [[goal, "needs torch_backend_train.json or torch_zoo_train.json", UNMEASURED]]
    goals = []
    for label, row in found:
        base = row.get("torch_reduce_overhead")
        goals.append(ratio_goal("%s, %s" % (goal, label), row.get("grove"), base, "grove",
                                "reduce-overhead", limit))
        for variant, what in DOOR_INFORMATION:
            if entry_median(row.get(variant)) and entry_median(base):
                top = entry_median(row[variant])
                text = "%s / %s = %s" % (us(top), us(entry_median(base)),
                                         ratio(top / entry_median(base)))
                opt = entry_median(row.get("torch_reduce_overhead_opt"))
                if opt and variant == "grove_optim":
                    text += "; over reduce-overhead with its optimizer compiled: %s" % ratio(
                        top / opt)
                goals.append(["%s (%s) over reduce-overhead, %s" % (variant, what, label),
                              text, INFORMATION])
    return goals


def gpt_step_hand_captured(context):
    goal = ("gpt4x256 whole step (grove_step) ≤ 0.7× PyTorch's hand-captured whole step "
            "(cuda_graph), torch_backend_train")
    rows = [r for _, report in reports_of(context.reports, "torch_backend_train")
            for r in sections.rows_of(report, "rows")
            if str(r.get("model", "")).startswith("gpt4x256")]
    if not rows:
        return [[goal, "needs torch_backend_train.json with a gpt4x256 row", UNMEASURED]]
    return [ratio_goal(goal + (" %s" % r["model"] if len(rows) > 1 else ""), r.get("grove_step"),
                       r.get("cuda_graph"), "grove_step", "cuda_graph", 0.7) for r in rows]


def squeezed(label):
    """'mlp16x512_b32' and 'mlp16x512 b=32' alike: lower case, letters and digits only."""
    return "".join(c for c in str(label).lower() if c.isalnum())


def whole_step_vs_trainer(context):
    goal = ("grove.training.compile_step's whole step (grove_step_sgd) ≤ 1.2× grove's C++ "
            "trainer (train_step cudagraphs), SGD momentum 0.9")
    rows = [r for _, report in reports_of(context.reports, "torch_backend_train")
            for r in sections.rows_of(report, "rows")]
    steps = sections.rows_of(context.reports.get("train_step", {}))
    if not rows or not steps:
        return [[goal, " and ".join(need for need, missing in (
            ("needs torch_backend_train.json", not rows), ("needs train_step.json", not steps))
            if missing), UNMEASURED]]
    goals = []
    for row in rows:
        trainer = next((r for r in steps if r.get("backend") == "cudagraphs" and
                        squeezed(r.get("case")) == squeezed(row.get("model"))), None)
        entry = {"median_us": sections.median_of(trainer)} if sections.median_of(trainer) \
            else None
        goals.append(ratio_goal("%s, %s" % (goal, row.get("model", "?")), row.get("grove_step_sgd"),
                                entry, "grove_step_sgd", "train_step cudagraphs", 1.2))
    return goals


def ddp_door(context):
    sources = reports_of(context.reports, "ddp_door")
    if not sources:
        return [["DDP through the door on 2 GPUs ≤ 0.5× torch DDP reduce-overhead, %s" % variant,
                 "needs ddp_door.json (torchrun --nproc_per_node 2 benchmarks/ddp_door.py)",
                 UNMEASURED] for variant, _ in DDP_VARIANTS]
    goals = []
    for name, report in sources:
        world = report.get("world_size")
        for row in sections.rows_of(report, "rows"):
            for variant, what in DDP_VARIANTS:
                goal = ("DDP through the door on 2 GPUs ≤ 0.5× torch DDP reduce-overhead, "
                        "%s (%s), %s" % (variant, what, row.get("case", "?")))
                if world != 2:
                    goals.append([goal, "%s ran on %s GPUs; the goal is on 2" % (
                        file_of(name, report), world),
                                  UNMEASURED])
                    continue
                goals.append(ratio_goal(goal, row.get(variant), row.get("torch_reduce_overhead"),
                                        variant, "torch_reduce_overhead", 0.5,
                                        source(name, "ddp_door", report)))
    return goals or [["DDP through the door on 2 GPUs ≤ 0.5× torch DDP reduce-overhead",
                      "ddp_door.json has no rows", UNMEASURED]]


def data_parallel_scaling(context):
    goal = "native data parallel ≥ 90% weak-scaling efficiency on 2 GPUs (cudagraphs)"
    sources = reports_of(context.reports, "data_parallel")
    if not sources:
        return [[goal, "needs data_parallel.json", UNMEASURED]]
    goals = []
    for name, report in sources:
        rows = sections.rows_of(report)
        for two in rows:
            if two.get("devices") != 2 or two.get("backend") != "cudagraphs":
                continue
            label = "%s, %s%s%s" % (goal, two.get("case"), "" if two.get("overlap") is not False
                                    else " (overlap off)", source(name, "data_parallel", report))
            one = sections.find(rows, case=two.get("case"), backend="cudagraphs", devices=1,
                                overlap=two.get("overlap"), variant=two.get("variant"))
            alone = sections.median((one or {}).get("step"))
            pair = sections.median(two.get("step"))
            if alone and pair:
                goals.append([label, "step(1) / step(2) = %s / %s = %.1f%%" % (
                    us(alone), us(pair), 100 * alone / pair), verdict(alone / pair >= 0.9)])
            else:
                goals.append([label, "no %s step" % ("1-device" if not alone else "2-device"),
                              UNMEASURED])
    return goals or [[goal, "data_parallel.json has no 2-device cudagraphs row (a one-GPU "
                      "session)", UNMEASURED]]


# --------------------------------------------------------- issue 35: serving


def best_answered(rows, **match):
    values = [r.get("answered_per_s") for r in rows if r.get("answered_per_s") and
              all((r.get(k) if k != "encoding" else r.get(k) or "json") == v
                  for k, v in match.items())]
    return max(values) if values else None


def http_rows(context):
    """serve_http's runs without connections held open (those are issue 35's third goal)."""
    sources = reports_of(context.reports, "serve_http")
    return None if not sources else [r for r in sections.rows_of(sources[0][1])
                                     if not r.get("held_open")]


def in_order(*groups):
    return list(dict.fromkeys(value for group in groups for value in group))


def serving_encodings(context):
    goal = "serving over HTTP: cudagraphs ≥ 2× eager's best answered/s"
    rows = http_rows(context)
    if rows is None:
        return [[goal, "needs serve_http.json", UNMEASURED]]
    goals = []
    for max_batch in in_order(SERVE_MAX_BATCHES, [r.get("max_batch") for r in rows]):
        for encoding in in_order(ENCODINGS, [r.get("encoding") or "json" for r in rows]):
            label = "%s, max batch %s, %s" % (goal, max_batch, encoding)
            eager = best_answered(rows, max_batch=max_batch, encoding=encoding, backend="eager")
            graphs = best_answered(rows, max_batch=max_batch, encoding=encoding,
                                   backend="cudagraphs")
            if eager and graphs:
                goals.append([label, "%.0f / %.0f = %s" % (graphs, eager, ratio(graphs / eager)),
                              verdict(graphs / eager >= 2)])
            else:
                goals.append([label, " and ".join("no %s run in serve_http.json" % backend
                                                  for backend, v in (("eager", eager),
                                                                     ("cudagraphs", graphs))
                                                  if not v), UNMEASURED])
    return goals


def http_front(context):
    goal = "the HTTP front ≥ 0.8× the in-process server's best (cudagraphs)"
    rows = http_rows(context)
    serve = reports_of(context.reports, "serve")
    if rows is None or not serve:
        return [[goal, " and ".join(need for need, missing in (
            ("needs serve_http.json", rows is None), ("needs serve.json", not serve)) if missing),
            UNMEASURED]]
    inproc = sections.rows_of(serve[0][1])
    goals = []
    for max_batch in in_order(SERVE_MAX_BATCHES, [r.get("max_batch") for r in inproc + rows]):
        alone = best_answered(inproc, max_batch=max_batch, backend="cudagraphs")
        alone_row = max((r for r in inproc if r.get("max_batch") == max_batch and
                         r.get("backend") == "cudagraphs" and r.get("answered_per_s")),
                        key=lambda r: r["answered_per_s"], default={})
        note = "" if alone_row.get("saturated", True) else \
            " (the in-process run answered all it was offered: its capacity may be higher)"
        for encoding in in_order(ENCODINGS, [r.get("encoding") or "json" for r in rows]):
            label = "%s, max batch %s, %s" % (goal, max_batch, encoding)
            http = best_answered(rows, max_batch=max_batch, encoding=encoding,
                                 backend="cudagraphs")
            if http and alone:
                goals.append([label, "%.0f / %.0f = %s%s" % (http, alone, ratio(http / alone),
                                                            note),
                              verdict(http / alone >= 0.8)])
            else:
                goals.append([label, " and ".join(what for what, v in (
                    ("no cudagraphs run in serve_http.json", http),
                    ("no cudagraphs run in serve.json", alone)) if not v), UNMEASURED])
    return goals


def held_connections(context):
    goal = ("serving over HTTP with 10,000 idle and 500 slowloris connections held open: "
            "p99 ≤ 2× its p99 without")
    sources = reports_of(context.reports, "serve_http")
    if not sources:
        return [[goal, "needs serve_http.json", UNMEASURED]]
    goals = []
    for held, alone in serving.held_open_pairs(sections.rows_of(sources[0][1])):
        counts = held["held_open"]
        label = "%s, max batch %s, %s, %s" % (goal, held.get("max_batch"), held.get("backend"),
                                              held.get("encoding") or "json")
        p99_held = (held.get("latency") or {}).get("p99_us")
        p99_alone = ((alone or {}).get("latency") or {}).get("p99_us")
        if (counts.get("idle") or 0) < 10000 or (counts.get("slowloris") or 0) < 500:
            goals.append([label, "held only %s idle + %s slowloris" % (
                counts.get("idle", 0), counts.get("slowloris", 0)), UNMEASURED])
        elif p99_held and p99_alone:
            runs = (len(held.get("p99_runs_us") or []), len(alone.get("p99_runs_us") or []))
            medians = (" (medians of %d held and %d alone runs)" % runs
                       if max(runs) > 1 else "")
            goals.append([label, "%s / %s µs = %s%s" % (us(p99_held), us(p99_alone),
                                                       ratio(p99_held / p99_alone), medians),
                          verdict(p99_held / p99_alone <= 2)])
        else:
            goals.append([label, "no run without held connections at %.0f/s" %
                          held.get("offered_per_s", 0) if not p99_alone else "no held p99",
                          UNMEASURED])
    return goals or [[goal, "serve_http.json has no run with connections held open "
                      "(--idle-connections, --slowloris-connections)", UNMEASURED]]


# ---------------------------------------------------------- issue 38: decode


def decode_configs(context):
    """[(report, config)] of every decode report's configs."""
    return [(report, config) for _, report in reports_of(context.reports, "decode")
            for config in report.get("configs") or [] if isinstance(config, dict)]


def batch_row(config, batch):
    return sections.find([r for r in config.get("results") or [] if isinstance(r, dict)],
                         batch=batch)


def step_of(row, mode):
    return ((row or {}).get(mode) or {}).get("step_us")


def decode_mbu(context):
    goal = "LLaMA-1B-class decode at batch 1 ≥ 70% of HBM bandwidth (MBU)"
    chosen = [(report, config) for report, config in decode_configs(context)
              if config.get("hidden_size") == 2048 and config.get("layers") == 16]
    if not chosen:
        return [[goal, "needs decode.json with the 1b config (hidden 2048, 16 layers)",
                 UNMEASURED]]
    report, config = chosen[0]
    row = batch_row(config, 1)
    tbs, where = floors.bandwidth_for(report.get("device_name") or context.device,
                                      context.hbm_tbs)
    if tbs is None and report.get("hbm_tbs"):
        tbs, where = report["hbm_tbs"], "the report's hbm_tbs"
    if (report.get("dtype") or "bf16") != "bf16":
        return [[goal, "decode.json ran in %s; the goal's config is bf16" % report["dtype"],
                 UNMEASURED]]
    steps = [(step_of(row, mode), mode) for mode in ("per_step", "while") if step_of(row, mode)]
    if not row or not steps or not row.get("bytes_read_per_step") or not tbs:
        return [[goal, "no batch-1 row with its step time and bytes read" if tbs
                 else where, UNMEASURED]]
    step, mode = min(steps)
    mbu = row["bytes_read_per_step"] / (step * 1e-6) / (tbs * 1e12)
    return [[goal, "%.3f GB per step / %s µs (%s) / %g TB/s = %.1f%% (%.0f tokens/s)" % (
        row["bytes_read_per_step"] / 1e9, us(step), mode.replace("_", "-"), tbs, 100 * mbu,
        1e6 / step), verdict(mbu >= 0.7)]]


def decode_while(context):
    goal = "decode, small config (hidden 256, 4 layers) at batch 1: WHILE loop ≥ 1.3× per-step"
    chosen = [config for _, config in decode_configs(context)
              if config.get("hidden_size") == 256 and config.get("layers") == 4]
    row = batch_row(chosen[0], 1) if chosen else None
    per_step, looped = step_of(row, "per_step"), step_of(row, "while")
    if not chosen:
        return [[goal, "needs decode.json with the small config", UNMEASURED]]
    if not per_step or not looped:
        return [[goal, "no batch-1 per-step and WHILE step times", UNMEASURED]]
    return [[goal, "per-step %s µs / WHILE %s µs = %s" % (us(per_step), us(looped),
                                                         ratio(per_step / looped)),
             verdict(per_step / looped >= 1.3)]]


def batch1_rate(context, config_name):
    """(tokens/s, mode) of grove's faster batch-1 decode of the config, or (None, None)."""
    for _, config in decode_configs(context):
        if config.get("config") == config_name:
            steps = [(step_of(batch_row(config, 1), m), m) for m in ("per_step", "while")]
            steps = [(s, m) for s, m in steps if s]
            if steps:
                return 1e6 / min(steps)[0], min(steps)[1].replace("_", "-")
    return None, None


def decode_streams(context):
    rate_goal = "decode, 64 concurrent streams (open-loop load) ≥ 10× batch-1 tokens/s"
    itl_goal = "decode, 64 concurrent streams: ITL p99 ≤ 2× p50"
    loads = reports_of(context.reports, "decode load", "decode_load")
    if not loads:
        why = "needs decode load's JSON (`decode load --json decode_load.json`)"
        closed = []
        for _, config in decode_configs(context):
            base, wide = batch1_rate(context, config.get("config"))[0], batch_row(config, 64)
            if base and step_of(wide, "per_step"):
                closed.append("%s %s" % (config.get("config"), ratio(
                    64e6 / step_of(wide, "per_step") / base)))
        extra = ("; decode.json's closed batch-64 steps give %s batch 1's rate (not the load "
                 "goal)" % ", ".join(closed)) if closed else ""
        return [[rate_goal, why + extra, UNMEASURED], [itl_goal, why, UNMEASURED]]
    goals = []
    for name, report in loads:
        config = report.get("config", "?")
        base, mode = batch1_rate(context, config)
        for run in report.get("runs") or [report]:
            label = ", %s, prefills per step: %s" % (config, run.get("prefills_per_step", "?"))
            peak = decode_sections.peak_streams(run)
            if peak is None or peak < 64:
                why = "%s's run peaked at %s running streams" % (file_of(name, report), peak)
                goals += [[rate_goal + label, why, UNMEASURED], [itl_goal + label, why,
                                                                   UNMEASURED]]
                continue
            tokens = run.get("tokens_per_s")
            if tokens and base:
                goals.append([rate_goal + label, "%.0f / %.0f (batch 1, %s) = %s" % (
                    tokens, base, mode, ratio(tokens / base)), verdict(tokens / base >= 10)])
            else:
                goals.append([rate_goal + label, "no load tokens/s" if not tokens else
                              "decode.json has no batch-1 %s row" % config, UNMEASURED])
            itl = run.get("itl_ms") or {}
            if itl.get("p50") and itl.get("p99") is not None:
                goals.append([itl_goal + label, "%.3f / %.3f ms = %s" % (
                    itl["p99"], itl["p50"], ratio(itl["p99"] / itl["p50"])),
                    verdict(itl["p99"] / itl["p50"] <= 2)])
            else:
                goals.append([itl_goal + label, "no ITL p50 and p99", UNMEASURED])
    return goals


JUDGES = (zoo_inference, zoo_decode, door_training, gpt_step_hand_captured,
          whole_step_vs_trainer, ddp_door, data_parallel_scaling, serving_encodings, http_front,
          held_connections, decode_mbu, decode_while, decode_streams)
