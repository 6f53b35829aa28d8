"""RESULTS.md sections for the decode benchmarks (issue 38): benchmarks/decode
(grove's decode loop, one graph launch per step against one conditional WHILE
graph per run), `decode load` (the LLM service under an open-loop load) and
benchmarks/decode/compare_hf.py (transformers' generate and a
gpt-fast-style decoder under torch.compile on the same checkpoint). Kept apart
from write_results_sections.py, which lists them in SECTIONS."""
import write_results_sections as sections  # noqa: E402  (lives next to this file)


def pct(value):
    return "—" if value is None else "%.1f%%" % (100 * value)


def decode(report):
    lines = ["Greedy decode of %s steps after a %s-token prompt (max_seq_len %s, %s, random "
             "weights from a Hugging Face checkpoint the benchmark wrote), median step time of "
             "%s runs: per-step = one graph launch per step with the host waiting for each "
             "step's tokens; while = all steps in one launch of a conditional WHILE graph. Both "
             "replay the same recorded step (decode program, one-position KV write, device "
             "sampling, stop test) and gave identical tokens. MBU = (weights less the input "
             "embedding table + the batch's KV cache over max_seq_len) per step / step time / "
             "%s TB/s." % (report.get("steps", "?"), report.get("prompt", "?"),
                           report.get("max_seq_len", "?"), report.get("dtype", "?"),
                           report.get("repeats", "the"), report.get("hbm_tbs", "?")), ""]
    rows = []
    for config in report.get("configs") or []:
        for r in config.get("results") or []:
            per_step, looped = r.get("per_step") or {}, r.get("while") or {}
            rows.append([config.get("config"), r.get("batch"), sections.us(per_step.get("step_us")),
                         sections.us(looped.get("step_us")), sections.ratio(r.get("while_speedup")),
                         "%.0f" % per_step.get("tokens_per_s", 0),
                         "%.0f" % looped.get("tokens_per_s", 0), pct(per_step.get("mbu")),
                         pct(looped.get("mbu"))])
    lines += sections.table(["config", "batch", "per-step step (µs)", "while step (µs)", "while speed-up",
                             "tokens/s per-step", "tokens/s while", "MBU per-step", "MBU while"],
                            rows, ["l", "r", "r", "r", "r", "r", "r", "r", "r"])
    return lines


def compare_hf(report):
    lines = ["PyTorch %s (transformers %s) on the same checkpoint (%s): generate's eager "
             "decode with its dynamic and static caches, and a gpt-fast-style decoder (KV "
             "cache buffers written in place, one step under torch.compile(mode="
             "\"reduce-overhead\", fullgraph=True)). A failed variant shows its error." % (
                 report.get("torch", "?"), report.get("transformers", "—"),
                 report.get("model_dir", "?")), ""]
    rows = []
    for r in sections.rows_of(report):
        if r.get("error"):
            rows.append([r.get("variant"), r.get("batch"), "failed: " +
                         sections.short_error(r["error"]), "", ""])
        else:
            rows.append([r.get("variant"), r.get("batch"), sections.us(r.get("step_us")),
                         "%.1f" % r.get("tokens_per_s", 0), pct(r.get("mbu"))])
    lines += sections.table(["variant", "batch", "step (µs)", "tokens/s", "MBU"], rows,
                            ["l", "r", "r", "r", "r"])
    return lines


def load(report):
    """`decode load`'s report: one row per run (prefills allowed per decode step)."""
    lines = ["`decode load`: config %s (%s), %s requests arriving open-loop (Poisson) at %s/s "
             "with prompt lengths %s and output lengths %s, through the LLM service's "
             "continuous batching (buckets %s, up to %s decode steps per WHILE launch, "
             "prefill chunk %s). Time to first token from each request's arrival, inter-token "
             "latency (ITL) between a stream's tokens, both where a client gets them; tokens/s "
             "answered over the run's wall time; the most streams that ran in one step." % (
                 report.get("config", "?"), report.get("dtype", "?"),
                 report.get("requests", "?"), report.get("rate_per_s", "?"),
                 _listed(report.get("prompt_lengths")), _listed(report.get("output_lengths")),
                 _listed(report.get("buckets")), report.get("loop_steps", "?"),
                 report.get("prefill_chunk", "?")), ""]
    rows = []
    for run in report.get("runs") or [report]:
        ttft, itl = run.get("ttft_ms") or {}, run.get("itl_ms") or {}
        peak = peak_streams(run)
        rows.append([run.get("prefills_per_step", "-"), _ms(ttft.get("p50")),
                     _ms(ttft.get("p99")), _ms(itl.get("p50")), _ms(itl.get("p99")),
                     sections.ratio(itl["p99"] / itl["p50"]) if itl.get("p50") and
                     itl.get("p99") is not None else "-",
                     "%.0f" % run["tokens_per_s"] if run.get("tokens_per_s") else "-",
                     "-" if peak is None else peak,
                     "%s (%s in %s WHILE launches)" % (run.get("decode_steps", "-"),
                                                       run.get("loop_steps_run", "-"),
                                                       run.get("loop_launches", "-")),
                     "-" if run.get("wall_s") is None else "%.2f" % run["wall_s"]])
    lines += sections.table(["prefills per step", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms",
                             "ITL p99 ms", "ITL p99 / p50", "tokens/s", "most streams",
                             "decode steps", "wall s"], rows,
                            ["r", "r", "r", "r", "r", "r", "r", "r", "l", "r"])
    return lines


def peak_streams(run):
    """The most streams one decode step of a load run ran (from rows_per_step in
    reports from before max_running_rows), or None."""
    if run.get("max_running_rows") is not None:
        return run["max_running_rows"]
    if isinstance(run.get("rows_per_step"), dict):
        return max((int(count) for count in run["rows_per_step"]), default=None)
    return None


def _ms(value):
    return "-" if value is None else "%.3f" % value


def _listed(values):
    return ",".join(str(v) for v in values) if isinstance(values, list) else "?"
