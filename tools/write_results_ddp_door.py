"""RESULTS.md section for benchmarks/ddp_door.py (ddp_door.json): data parallel
through the torch door, one training step per rank under PyTorch's
DistributedDataParallel and grove's variants, per case and variant the median
µs per step with its p10-p90 spread, samples/s over all ranks, the largest
loss difference from torch eager and the ratio to torch DDP reduce-overhead
(computed here from the medians). Kept apart from write_results_sections.py,
which lists it in SECTIONS."""
import write_results_sections as sections  # noqa: E402  (lives next to this file)

# The variants in the order ddp_door.py runs them; others (suffixed _fn,
# _nosplit, _direct) follow in the row's own order.
ORDER = ("torch_eager", "torch_reduce_overhead", "grove", "grove_ddp", "grove_step",
         "grove_plain")
WHAT = {"torch_eager": "PyTorch DDP, eager",
        "torch_reduce_overhead": "PyTorch DDP, mode=\"reduce-overhead\"",
        "grove": "PyTorch DDP under backend=\"grove\"",
        "grove_ddp": "grove.torch.DistributedDataParallel",
        "grove_step": "grove.training.compile_step with process_group",
        "grove_plain": "backend=\"grove\" without DDP (reference)"}


def variants_of(row):
    """The row's variant entries (dicts with a median or an error), ddp_door's order first."""
    names = [key for key, value in row.items() if isinstance(value, dict) and
             ("median_us" in value or "error" in value)]
    return [n for n in ORDER if n in names] + [n for n in names if n not in ORDER]


def render(report):
    rows = []
    failures = []
    for row in sections.rows_of(report, "rows"):
        base = (row.get("torch_reduce_overhead") or {}).get("median_us")
        for variant in variants_of(row):
            entry = row[variant]
            label = "%s (%s)" % (variant, WHAT[variant]) if variant in WHAT else variant
            if "error" in entry:
                rows.append([row.get("case", "?"), row.get("per_rank_batch", "-"), label,
                             "failed", "-", "-", "-", "-"])
                failures.append("- %s, %s: %s" % (row.get("case", "?"), variant,
                                                  sections.short_error(entry["error"])))
                continue
            median = entry.get("median_us")
            loss = entry.get("loss_difference")
            rows.append([row.get("case", "?"), row.get("per_rank_batch", "-"), label,
                         sections.us(median),
                         "%s–%s" % (sections.us(entry.get("p10_us")),
                                    sections.us(entry.get("p90_us"))),
                         "-" if entry.get("samples_per_s") is None
                         else "%.0f" % entry["samples_per_s"],
                         "-" if loss is None else "%.1e" % loss,
                         sections.ratio(median / base) if median and base else "-"])
        if "error" in row:
            failures.append("- %s: %s" % (row.get("case", "?"), sections.short_error(row["error"])))
    lines = ["One training step per rank on %s GPUs (%s, PyTorch %s; NCCL, one process per "
             "GPU): median µs per step over blocks of steps, each block ended by a device "
             "synchronization on every rank, with its p10–p90 spread; samples/s over all ranks; "
             "the largest relative difference of the first steps' losses (averaged over ranks) "
             "from torch eager's; and the step's time over torch DDP reduce-overhead's (the "
             "goal of issue 34: grove through the door ≤ 0.5× on 2 GPUs)."
             % (report.get("world_size", "?"), report.get("device", "?"),
                report.get("torch", "?")), ""]
    lines += sections.table(["case", "per-rank batch", "variant", "median µs/step", "p10–p90",
                             "samples/s", "loss difference", "/ reduce-overhead"], rows,
                            ["l", "r", "l", "r", "r", "r", "r", "r"])
    if failures:
        lines += ["", "Failures:", ""] + failures
    return lines
