"""Data parallel through the torch door: one training step of mlp16x512 (b32
per rank) and gpt4x256 (b8, T32 per rank) under PyTorch's
DistributedDataParallel (NCCL, one process per GPU) with torch eager,
torch.compile(mode="reduce-overhead") (and backend="aot_eager": torch_aot_eager, grove-free
AOTAutograd on the DDP module) and torch.compile(backend="grove") of
the DDP-wrapped module (dynamo's DDP optimizer splits the graph at bucket
boundaries; DDP's all-reduces run between grove's graphs), grove's own
wrapper grove.torch.DistributedDataParallel ("grove_ddp": the gradient
all-reduces inside grove's backward graph, issue 34 part 3), and the whole
step in grove (grove.training.compile_step with process_group: one all-reduce
of one flat gradient buffer between its two graphs; "grove_step"); for
reference, "grove_plain": backend="grove" without DDP (gradients not
averaged: the one-GPU door, what DDP adds to it; its losses match only on
one GPU); a variant name ending in "_fn" (grove_fn, grove_ddp_fn) is that
variant with grove's own autograd function (GROVE_DOOR_FUNCTION=1, Note [The
door's own autograd function]), ending in "_nosplit" (grove_nosplit) with
dynamo's DDP optimizer off (torch._dynamo.config.optimize_ddp=False: one
graph, not one per bucket; DDP's all-reduces after the whole backward),
ending in "_direct" (grove_ddp_direct) with GROVE_DOOR_GRADIENTS=direct (Note
[Gradients set directly by the door's function]), ending in "_bucketview"
(grove_bucketview) with torch DDP's gradient_as_bucket_view=True (each .grad
a view of DDP's bucket: no copy into the bucket before its all-reduce nor
back after), ending in "_static" with DDP's static_graph=True; suffixes
combine (grove_nosplit_fn); --profile VARIANT prints rank 0's cProfile of
that variant, --torch-profile VARIANT rank 0's torch.profiler table (host
and device time per op and kernel: where a variant's step goes).

    torchrun --nproc_per_node 4 benchmarks/ddp_door.py --json ddp_door.json

Rank 0 prints a table and writes JSON: per (case, variant) the median step
time over blocks of 10 steps (each block ended by a device synchronization
on every rank) with its p10-p90 spread, samples/s over all ranks, the first
steps' losses (averaged over ranks) and the largest difference of those
losses from torch eager's, relative. The same steps, data and seeds for
every variant, so the losses must agree (grove: within f32 rounding of a
different reduction order). The goal of the 4-GPU issue: grove <= 0.5x
reduce-overhead.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, os.path.join(here, "..", "python"))

BLOCK = 10
LOSS_STEPS = 5


def _first_step_under(step, setting):
    """`step`, whose first call (the one that compiles) runs inside the
    context manager `setting()`."""
    first = [True]

    def stepped():
        if not first:
            return step()
        first.clear()
        with setting():
            return step()

    return stepped


def _door_function():
    # Note [The door's own autograd function] (opt-in, read at compilation).
    from torch_backend import environment  # this folder

    return environment({"GROVE_DOOR_FUNCTION": "1"})


def _whole_graph():
    # dynamo's DDP optimizer off: one graph, DDP's all-reduces after its backward.
    return torch._dynamo.config.patch(optimize_ddp=False)


def _direct_gradients():
    # Note [Gradients set directly by the door's function] (opt-in, read at
    # compilation).
    from torch_backend import environment  # this folder

    return environment({"GROVE_DOOR_GRADIENTS": "direct"})


SUFFIXES = {"_fn": _door_function, "_nosplit": _whole_graph, "_direct": _direct_gradients}
# Suffixes that are arguments of torch's DistributedDataParallel.
DDP_SUFFIXES = {"_bucketview": {"gradient_as_bucket_view": True}, "_static": {"static_graph": True}}
VARIANTS = ("torch_eager", "torch_reduce_overhead", "torch_aot_eager", "grove", "grove_ddp",
            "grove_step", "grove_plain")


def base_variant(variant):
    """The variant without its suffixes, or SystemExit for an unknown one."""
    base = variant
    suffixes = list(SUFFIXES) + list(DDP_SUFFIXES)
    while any(base.endswith(suffix) for suffix in suffixes):
        base = base[:-len(next(s for s in suffixes if base.endswith(s)))]
    if base not in VARIANTS:
        raise SystemExit("ddp_door: unknown variant %r (known: %s, each with the suffixes %s)"
                         % (variant, ", ".join(VARIANTS), ", ".join(SUFFIXES)))
    return base


def step_function(module, inputs, loss_of, variant, rank, ddp_options=None):
    ddp_options = dict(ddp_options or {})
    for suffix, options in DDP_SUFFIXES.items():
        if variant.endswith(suffix):
            ddp_options.update(options)
            return step_function(module, inputs, loss_of, variant[:-len(suffix)], rank,
                                 ddp_options)
    for suffix, setting in SUFFIXES.items():
        if variant.endswith(suffix):
            return _first_step_under(
                step_function(module, inputs, loss_of, variant[:-len(suffix)], rank,
                              ddp_options), setting)
    model = copy.deepcopy(module)
    if variant == "grove_step":
        import grove.training

        # The whole step in grove: forward, loss and backward one graph, one
        # all-reduce of the flat gradient, the SGD update another graph.
        whole = grove.training.compile_step(
            model, lambda forward, *args: loss_of(forward(*args)),
            torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9),
            process_group=dist.group.WORLD)
        return lambda: whole(*inputs)
    torch._dynamo.reset()
    if variant == "grove_plain":
        # No DDP at all (the one-GPU door, gradients not averaged): what
        # data parallel adds to the door's step at this world size.
        import grove.torch  # noqa: F401 (registers the backend)

        run = torch.compile(model, backend="grove", dynamic=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        return _step(run, inputs, loss_of, optimizer)
    if variant == "grove_ddp":
        import grove.torch

        ddp = grove.torch.DistributedDataParallel(model)
    else:
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank], **ddp_options)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)
    if variant == "torch_reduce_overhead":
        run = torch.compile(ddp, mode="reduce-overhead", dynamic=False)
    elif variant == "torch_aot_eager":
        # PyTorch's own AOTAutograd backend on the DDP module: what the door
        # does (dynamo's DDP optimizer, AOTAutograd's partition) without
        # grove, e.g. for an abort at exit seen with "grove".
        run = torch.compile(ddp, backend="aot_eager", dynamic=False)
    elif variant == "grove_ddp":
        run = ddp  # compiles itself (backend grove, all-reduces in the backward)
    elif variant == "grove":
        import grove.torch  # noqa: F401 (registers the backend)

        run = torch.compile(ddp, backend="grove", dynamic=False)
    else:
        run = ddp
    return _step(run, inputs, loss_of, optimizer)


def _step(run, inputs, loss_of, optimizer):
    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(run(*inputs))
        loss.backward()
        optimizer.step()
        return loss

    return step


def profile(step, steps=200, top=30):
    """Rank 0's host time per function over `steps` warm steps (cProfile)."""
    import cProfile
    import io
    import pstats

    for _ in range(BLOCK):
        step()
    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def torch_profile(step, steps=50, top=40):
    """Rank 0's torch.profiler table over `steps` warm steps: per op and
    kernel, host (self CPU) and device (self CUDA) time, sorted by host time,
    then by device time."""
    from torch.profiler import ProfilerActivity, profile as torch_profiler

    for _ in range(BLOCK):
        step()
    torch.cuda.synchronize()
    with torch_profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    return ("per %d steps, by self CPU time\n%s\nby self CUDA time\n%s" % (
        steps, averages.table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=70),
        averages.table(sort_by="self_cuda_time_total", row_limit=top // 2,
                       max_name_column_width=70)))


def measure(step, iters):
    losses = []
    for _ in range(LOSS_STEPS):
        loss = step().detach().clone()
        dist.all_reduce(loss)
        losses.append(loss.item() / dist.get_world_size())
    for _ in range(BLOCK):
        step()
    torch.cuda.synchronize()
    blocks = []
    for _ in range(max(1, iters // BLOCK)):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(BLOCK):
            step()
        torch.cuda.synchronize()
        blocks.append((time.perf_counter() - start) / BLOCK * 1e6)
    blocks.sort()
    return {"median_us": statistics.median(blocks), "p10_us": blocks[int(0.1 * (len(blocks) - 1))],
            "p90_us": blocks[int(0.9 * (len(blocks) - 1))], "losses": losses}


def print_table(rows, variants, world):
    """One line per case: the median step (us) of every variant and the
    door's ratios to torch DDP reduce-overhead (the goal: <= 0.5)."""
    ratios = [v for v in variants if v.startswith("grove")]
    header = ("%-18s" % ("us/step, %d GPU" % world) + "".join("%23s" % v for v in variants)
              + "".join("%16s" % ("%s/r-o" % key) for key in ratios))
    print(header)
    print("-" * len(header))
    for row in rows:
        cells = ["%23s" % ("%.1f" % row[v]["median_us"] if "median_us" in row[v] else "failed")
                 for v in variants]
        quotients = [row.get("%s_over_reduce_overhead" % key) for key in ratios]
        print("%-18s" % row["case"] + "".join(cells)
              + "".join("%16s" % ("-" if q is None else "%.2f" % q) for q in quotients))


def _past_on_any_rank(deadline_s, began):
    """Whether `deadline_s` seconds (None: no deadline) have passed since
    `began` on any rank: one answer for all, so every rank leaves out the
    same variants (a rank starting a variant alone would wait on its
    collectives forever)."""
    if deadline_s is None:
        return False
    past = torch.tensor([float(time.perf_counter() - began > deadline_s)], device="cuda")
    dist.all_reduce(past, op=dist.ReduceOp.MAX)
    return bool(past.item())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="ddp_door.json")
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--variants",
                        default="torch_eager,torch_reduce_overhead,grove,grove_ddp,grove_step")
    parser.add_argument("--cases", default="",
                        help="comma-separated case names (default: all)")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="seconds from the start after which no further variant begins "
                             "(each left out is reported as not run; the table still prints), "
                             "for a call with a time limit")
    parser.add_argument("--torch-profile", default="",
                        help="after the timings, torch.profiler over 50 steps of this variant "
                             "per case (rank 0 prints host and device time per op)")
    parser.add_argument("--profile", default="",
                        help="after the timings, cProfile 200 steps of this variant per case "
                             "(rank 0 prints the functions of most host time)")
    args = parser.parse_args()
    began = time.perf_counter()
    for variant in args.variants.split(",") + [v for v in args.torch_profile.split(",") if v]:
        base_variant(variant)
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    torch.backends.cuda.matmul.allow_tf32 = False
    world = dist.get_world_size()
    import torch_backend  # this folder: the training cases of the one-GPU benchmark

    rows = []
    for name, module, inputs, loss_of in torch_backend.training_cases():
        if args.cases and name not in args.cases.split(","):
            continue
        batch = inputs[0].shape[0]
        row = {"case": name, "per_rank_batch": batch}
        for variant in args.variants.split(","):
            started = time.perf_counter()
            if _past_on_any_rank(args.deadline_s, began):
                row[variant] = {"error": "not run (past --deadline-s %.0f)" % args.deadline_s}
                if rank == 0:
                    print("%s %s: not run (past --deadline-s)" % (name, variant), flush=True)
                continue
            try:
                result = measure(step_function(module, inputs, loss_of, variant, rank),
                                 args.iters)
                result["samples_per_s"] = batch * world / (result["median_us"] * 1e-6)
            except Exception as error:  # one variant failing leaves the others' numbers
                result = {"error": "%s: %s" % (type(error).__name__, str(error)[:300])}
            result["seconds"] = time.perf_counter() - started  # compilation included
            row[variant] = result
            if rank == 0:  # as it comes, so a run cut short still shows what it measured
                print("%s %s: %s (%.1f s with compilation, %.1f s since the start)" % (
                    name, variant, "%.1f us" % result["median_us"] if "median_us" in result
                    else result["error"], result["seconds"], time.perf_counter() - began),
                    flush=True)
        reference = row.get("torch_eager", {}).get("losses")
        for variant in args.variants.split(","):
            losses = row[variant].get("losses")
            if reference and losses:
                row[variant]["loss_difference"] = max(
                    abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference))
        base = row.get("torch_reduce_overhead", {}).get("median_us")
        for variant in set(args.variants.split(",")) | {"grove", "grove_ddp", "grove_step"}:
            if variant.startswith("grove"):
                mine = row.get(variant, {}).get("median_us")
                row["%s_over_reduce_overhead" % variant] = (mine / base if base and mine
                                                            else None)
        rows.append(row)
        for profiled in [v for v in args.torch_profile.split(",") if v]:
            text = torch_profile(step_function(module, inputs, loss_of, profiled, rank))
            if rank == 0:
                print("== torch.profiler of %s %s\n%s" % (row["case"], profiled, text), flush=True)
        if args.profile:
            text = profile(step_function(module, inputs, loss_of, args.profile, rank))
            if rank == 0:
                print("== cProfile of %s %s, 200 steps\n%s" % (row["case"], args.profile, text))
    if rank == 0:
        print("DDP through the door, %d GPUs (%s), torch %s" % (
            world, torch.cuda.get_device_name(), torch.__version__))
        for row in rows:
            for variant in args.variants.split(","):
                entry = row[variant]
                if "error" in entry:
                    print("%-18s %-24s failed: %s" % (row["case"], variant, entry["error"]))
                    continue
                print("%-18s %-24s %9.1f us  (p10 %.1f, p90 %.1f)  %10.0f samples/s  loss %s  "
                      "diff %.2g" % (row["case"], variant, entry["median_us"], entry["p10_us"],
                                     entry["p90_us"], entry["samples_per_s"],
                                     ", ".join("%.5f" % v for v in entry["losses"][:3]),
                                     entry.get("loss_difference", 0.0)))
            for key in [v for v in args.variants.split(",") if v.startswith("grove")]:
                ratio = row["%s_over_reduce_overhead" % key]
                print("%-18s %s / reduce-overhead: %s" % (
                    row["case"], key, "-" if ratio is None else "%.2f" % ratio))
        print_table(rows, args.variants.split(","), world)
        with open(args.json, "w") as out:
            json.dump({"benchmark": "ddp_door", "world_size": world,
                       "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, out, indent=2)
        print("wrote %s" % args.json)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
