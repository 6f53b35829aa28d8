"""The zoo's training table (`torch_zoo.py --train`): small-config Hugging
Face GPT-2 and LLaMA and timm ViT-tiny at batch 8, random weights, trained
with AdamW and with SGD (momentum) under PyTorch eager, mode="reduce-overhead",
backend="grove" (the door: the model compiled, the optimizer PyTorch's) and
grove.training.compile_step (the whole step: forward, loss, backward and
update as grove graphs). Per row: the median step time (torch_backend.py's
time_steps: blocks of 20 steps, median and p10-p90 over blocks) and the
losses of the first LOSS_STEPS steps against eager's from the same weights
and batch (largest relative difference).

Every variant runs in its own try: one that fails (a library missing, a
model this transformers cannot build, an op grove refuses, a compilation
error) is reported as such in its row and the table goes on; cases left
when the time budget is spent are reported as not run. f32, TF32 off.
"""
import copy
import importlib
import time

import torch

LOSS_STEPS = 5
BATCH = 8
VARIANTS = ("torch_eager", "torch_reduce_overhead", "grove", "grove_step")
# Like with like when the optimizer's step is captured too (torch_zoo.py
# --train-variants): grove's own update (grove.torch.optim) through the door,
# and reduce-overhead with torch.compile(optimizer.step, mode="reduce-overhead").
EXTRA_VARIANTS = ("grove_optim", "torch_reduce_overhead_opt")
OPTIMIZERS = ("adamw", "sgd")


def _lm(make_model, vocab):
    """(model, batch, loss_fn): a causal LM over random tokens, its logits'
    cross entropy against the next tokens."""
    model = make_model()
    tokens = torch.randint(0, vocab, (BATCH, 33))

    def loss_fn(forward, inputs, labels):
        logits = forward(inputs)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 labels.reshape(-1))
    return model, (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()), loss_fn


def gpt2():
    from torch_zoo import gpt2 as picked

    return _lm(lambda: picked(BATCH)[0], 1000)


def llama():
    from torch_zoo import llama as picked

    return _lm(lambda: picked(BATCH)[0], 1000)


def vit():
    from torch_zoo import vit as picked

    model, (images,) = picked(BATCH)
    labels = torch.randint(0, 10, (BATCH,))

    def loss_fn(forward, inputs, targets):
        return torch.nn.functional.cross_entropy(forward(inputs), targets)
    return model, (images, labels), loss_fn


MODELS = [("vit_tiny", vit, "timm"), ("llama", llama, "transformers"),
          ("gpt2", gpt2, "transformers")]


def optimizer_of(name, parameters, grove_optim=False):
    if grove_optim:
        import grove.torch

        if name == "adamw":
            return grove.torch.optim.AdamW(parameters, lr=1e-4)
        return grove.torch.optim.SGD(parameters, lr=1e-2, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(parameters, lr=1e-4)
    return torch.optim.SGD(parameters, lr=1e-2, momentum=0.9)


def step_of(variant, module, batch, loss_fn, optimizer_name):
    """A function running one training step of `variant` on a copy of
    `module` and returning the loss (a tensor)."""
    model = copy.deepcopy(module)
    optimizer = optimizer_of(optimizer_name, model.parameters(),
                             grove_optim=variant == "grove_optim")
    if variant == "grove_step":
        import grove.training

        whole = grove.training.compile_step(model, loss_fn, optimizer)
        return lambda: whole(*batch)
    torch._dynamo.reset()
    update = optimizer.step
    if variant in ("torch_reduce_overhead", "torch_reduce_overhead_opt"):
        run = torch.compile(model, mode="reduce-overhead", dynamic=False)
        if variant == "torch_reduce_overhead_opt":
            update = torch.compile(optimizer.step, mode="reduce-overhead")
    elif variant in ("grove", "grove_optim"):
        run = torch.compile(model, backend="grove", dynamic=False)
    else:
        run = model

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(run, *batch)
        loss.backward()
        update()
        return loss
    return step


def losses_of(step):
    """The first LOSS_STEPS losses, as floats."""
    return [float(step().detach()) for _ in range(LOSS_STEPS)]


def largest_relative_difference(losses, reference):
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference))


def training_rows(repeats, deadline, models=None, optimizers=OPTIMIZERS, variants=VARIANTS):
    from torch_backend import time_steps  # benchmarks/, this script's folder

    rows = []
    for name, make, library in MODELS:
        if models and name not in models:
            continue
        for optimizer_name in optimizers:
            row = {"model": name, "batch": BATCH, "optimizer": optimizer_name}
            rows.append(row)
            try:
                importlib.import_module(library)
                torch.manual_seed(0)
                module, batch, loss_fn = make()
                module = module.cuda().train()
                batch = tuple(value.cuda() for value in batch)
            except Exception as error:  # a library missing, a model it cannot build
                row["error"] = "%s: %s" % (type(error).__name__, error)
                print_row(row)
                continue
            for variant in variants:
                if time.time() > deadline:
                    row[variant] = {"error": "not run: the time budget (--budget-s) was spent"}
                    continue
                try:
                    step = step_of(variant, module, batch, loss_fn, optimizer_name)
                    entry = {"losses": losses_of(step)}
                    entry.update(time_steps(step, repeats))
                    if variant in ("grove", "grove_optim"):
                        entry.update(door_shape(step))
                    row[variant] = entry
                except Exception as error:  # one variant failing leaves the others' numbers
                    row[variant] = {"error": "%s: %s" % (type(error).__name__, error)}
            finish_row(row, variants)
            print_row(row, variants)
    return rows


def door_shape(step):
    """What the door made of the model: the ops left to PyTorch, grove
    segments per graph, and the tree's counters per step (replays, eager
    calls, recordings, input copies: torch_backend.tree_per_step)."""
    import gc

    from grove import dynamo_backend
    from torch_backend import tree_per_step

    gc.collect()  # earlier rows' runners go
    runners = list(dynamo_backend._live_runners)
    ops = sorted({op for runner in runners for _, op, _ in runner.unsupported})
    return {"ops_in_pytorch": ops,
            "segments": sorted(len(runner.segments) for runner in runners),
            "tree_per_step": tree_per_step(step, 10)}


def finish_row(row, variants=VARIANTS):
    """Ratios to reduce-overhead (grove_optim's to reduce-overhead with its
    optimizer's step compiled, where measured: like with like) and the loss
    differences from eager."""
    base = row.get("torch_reduce_overhead", {}).get("median_us")
    base_opt = row.get("torch_reduce_overhead_opt", {}).get("median_us")
    reference = row.get("torch_eager", {}).get("losses")
    for variant in variants:
        entry = row.get(variant, {})
        if base and "median_us" in entry:
            entry["over_reduce_overhead"] = entry["median_us"] / base
        if variant == "grove_optim" and base_opt and "median_us" in entry:
            entry["over_reduce_overhead_opt"] = entry["median_us"] / base_opt
        if reference and "losses" in entry:
            entry["loss_difference"] = largest_relative_difference(entry["losses"], reference)


def print_header(variants=VARIANTS):
    print("%-10s %-6s" % ("model", "optim") + "".join("%26s" % v for v in variants))


def print_row(row, variants=VARIANTS):
    if "error" in row:
        print("%-10s %-6s failed: %s" % (row["model"], row.get("optimizer", "-"),
                                         row["error"][:300]))
        return
    cells = []
    for variant in variants:
        entry = row.get(variant, {})
        if "median_us" in entry:
            ratio = entry.get("over_reduce_overhead")
            difference = entry.get("loss_difference")
            cells.append("%26s" % ("%.0f us %s d%s" % (
                entry["median_us"], "-" if ratio is None else "%.2fx" % ratio,
                "-" if difference is None else "%.0e" % difference)))
        else:
            cells.append("%26s" % "failed")
    print("%-10s %-6s" % (row["model"], row["optimizer"]) + "".join(cells), flush=True)
    if row.get("grove_optim", {}).get("over_reduce_overhead_opt") is not None:
        print("  grove_optim / reduce-overhead with its optimizer compiled: %.2fx"
              % row["grove_optim"]["over_reduce_overhead_opt"])
    for variant in variants:
        if "error" in row.get(variant, {}):
            print("  %s: %s" % (variant, row[variant]["error"][:300]))
    door = row.get("grove", {})
    if "segments" in door:
        print("  grove: segments per graph %s, PyTorch ops %s, per step %s" % (
            door["segments"], door["ops_in_pytorch"] or "none",
            ", ".join("%s %.1f" % item for item in sorted(door["tree_per_step"].items())
                      if item[1])))
