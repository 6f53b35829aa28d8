"""RESULTS.md sections for benchmarks/torch_backend.py: torch.compile(backend=
"grove") against PyTorch's eager and reduce-overhead, for inference
(torch_backend.json: per model the Python call's latency, and the same compiled
model called from C++) and training (torch_backend_train.json, from --train:
forward, loss, backward and optimizer step per variant). Kept apart from
write_results_sections.py, which lists them in SECTIONS."""
import write_results_sections as sections  # noqa: E402  (lives next to this file)

TRAIN_VARIANTS = [("torch_eager", "torch eager"), ("torch_reduce_overhead", "reduce-overhead"),
                  ("torch_reduce_overhead_opt", "r-o, optimizer compiled"),
                  ("cuda_graph", "hand-captured step"), ("grove_eager", "grove eager"),
                  ("grove", "grove"), ("grove_optim", "grove_optim"),
                  ("grove_direct", "grove, direct .grad"),
                  ("grove_optim_direct", "grove_optim, direct .grad"),
                  ("grove_optim_in_backward", "grove_optim, update in backward"),
                  ("grove_step", "grove whole step")]

median = sections.median


def inference(report):
    rows = []
    for r in sections.rows_of(report, "rows"):
        rows.append([r.get("model", "?"), sections.us(median(r.get("torch_eager"))),
                     sections.us(median(r.get("torch_reduce_overhead"))),
                     sections.us(median(r.get("grove"))),
                     sections.ratio(r.get("grove_over_reduce_overhead")),
                     sections.us(r.get("grove_cxx_us")), sections.us(r.get("python_capi_cost_us"))])
    lines = ["`torch.compile(backend=\"grove\")` on PyTorch %s (%s calls each; median µs): PyTorch "
             "eager and `mode=\"reduce-overhead\"`, grove's backend called from Python, the same "
             "compiled model called from C++ (`grove C++`), and what dynamo, Python and the C "
             "API add to it (`py+C`)." % (report.get("torch", "?"), report.get("repeats", "?")),
             ""]
    lines += sections.table(["model", "torch eager", "reduce-overhead", "grove", "grove / r-o",
                             "grove C++", "py+C"], rows, ["l"] + ["r"] * 6)
    return lines + [""]


def training(report):
    rows = []
    for r in sections.rows_of(report, "rows"):
        rows.append([r.get("model", "?")] +
                    [sections.us(median(r.get(key))) if median(r.get(key)) is not None
                     else ("failed" if isinstance(r.get(key), dict) and "error" in r[key] else "-")
                     for key, _ in TRAIN_VARIANTS] +
                    [sections.ratio(r.get("grove_over_reduce_overhead")),
                     sections.ratio(r.get("grove_optim_over_reduce_overhead_opt"))])
    lines = ["Training through `torch.compile(backend=\"grove\")` on PyTorch %s (median µs per "
             "step: forward, loss, backward, optimizer): `grove` runs PyTorch's optimizer, "
             "`grove_optim` grove.torch.optim's, one graph; `r-o, optimizer compiled` is "
             "reduce-overhead with `torch.compile(optimizer.step)` (inductor's default mode; in "
             "reduce-overhead mode it fails) too, like with like for grove_optim; `direct .grad`: with "
             "GROVE_DOOR_GRADIENTS=direct (the door's backward sets `.grad`, no AccumulateGrad "
             "per parameter); `update in backward`: grove_optim made with update_in_backward=True "
             "(the update replayed at the end of the door's backward, `step()` a no-op); `grove "
             "whole step`: grove.training.compile_step (forward, loss, backward and AdamW as grove "
             "graphs)." % report.get("torch", "?"), ""]
    lines += sections.table(["model"] + [label for _, label in TRAIN_VARIANTS] +
                            ["grove_optim / r-o", "grove_optim / r-o opt"], rows,
                            ["l"] + ["r"] * (len(TRAIN_VARIANTS) + 2))
    return lines + [""]
