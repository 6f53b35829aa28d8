"""A survey of models outside the zoo through torch.compile(backend="grove")
(GPU host, TF32 off, random weights, small configs where the family has
one): Hugging Face decoders, encoders and encoder-decoders, timm and
torchvision image models; the core set (zoo_survey_models.py), a wide set
(zoo_survey_wide.py) or both. Per model, at batch 1, inference in f32 or
bf16: the calls' largest difference from eager PyTorch over eager's largest
magnitude (three calls: warm-up, recording, replay, each on new random
inputs), the ATen ops grove left to PyTorch, the dynamo graphs and grove
replays per call, and the compile time; a model that fails is reported with
its error and the survey goes on; one its library cannot build is reported as
not built. Issue 33: op coverage and exactness for the class of models users
bring, not only the zoo's eight.

With --train, each model is trained instead (issue 34's door, the same class
of models): batch 2, train mode with every random draw's probability set to
0, TRAIN_STEPS SGD steps on a fixed random projection of the output under
eager PyTorch, each step also run through backend="grove", in float64 and
in eager f32 from weights and inputs moved by a few roundings and with
cuDNN off, from the same weights (train_one says why). Per model: the losses' largest
relative difference, the gradients that fail (over each gradient's largest
magnitude, floored at 1e-3 of the model's largest), the parameters whose
gradient is None in one run only, and the ops grove left to PyTorch in the
forward and backward graphs.

    python3 benchmarks/zoo_survey.py [--set core|wide|all] [--models NAME,...]
        [--json zoo_survey.json] [--budget-s 400] [--train] [--dtype bfloat16]

Exit status 1 where a model's result differs from eager past the tolerance
or it failed to run (ops left to PyTorch alone, and models not built, are
reported, not failures).
"""
import argparse
import importlib
import json
import os
import sys
import time
import traceback

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import torch_zoo  # noqa: E402  (puts python/ and tests/python on the path)
from zoo_survey_models import MODELS  # noqa: E402

# Relative to the reference's largest magnitude, per dtype the models run in
# (bf16 keeps 8 bits; grove and PyTorch round intermediates at other places).
TOLERANCES = {"float32": 2e-3, "bfloat16": 4e-2}
CALLS = 3
# --train: f32 sums in another order through a few layers' backward and three
# updates; a wrong gradient is off by far more.
TRAIN_TOLERANCE = 1e-2
TRAIN_STEPS = 3
TRAIN_BATCH = 2  # batch norm in train mode needs more than one value per channel
# Eager f32 runs from weights and inputs moved by a few f32 roundings each
# (relative PERTURBATION, below the 1e-5 by which grove's and eager's f32
# losses differ), per step: how far rounding alone carries a gradient from
# float64's (train_one says why).
PERTURBED_RUNS = 8
PERTURBATION = 1e-6


class NotBuilt(Exception):
    """The model's library lacks its class or refuses its config: not grove's."""


def _built(make):
    try:
        return make()
    except Exception as error:
        raise NotBuilt("%s: %s" % (type(error).__name__, str(error)[:300])) from error


def _in_dtype(value, dtype):
    return value.to(dtype) if value.is_floating_point() else value


def survey_one(name, make, dtype=torch.float32):
    """One model's row (a dict): CALLS calls, each on new random inputs of
    the example's shapes (the first on the example), each compared with eager
    PyTorch on the same inputs. In bf16 a model also runs in f32 from the same
    weights: a call further from eager than the tolerance still passes where
    grove's distance from f32 is at most twice eager bf16's own (rounding
    grown through a deep model, not a wrong answer; as train_one judges)."""
    import copy

    import grove.torch  # registers the backend

    torch.manual_seed(0)
    row = {"model": name}
    module, example = _built(make)
    module = module.cuda().eval()
    wide = copy.deepcopy(module) if dtype != torch.float32 else None
    module = module.to(dtype)
    calls = [example] + [tuple(_batch_of(value, value.shape[0]) for value in example)
                         for _ in range(CALLS - 1)]
    calls = [tuple(_in_dtype(value, dtype).cuda() for value in inputs) for inputs in calls]
    torch._dynamo.reset()
    with torch.no_grad():
        expected = [module(*inputs) for inputs in calls]
        in_f32 = [wide(*(value.float() if value.is_floating_point() else value
                         for value in inputs)) for inputs in calls] if wide is not None else None
    earlier = grove.torch.compiled_graphs()  # held, so that no new graph reuses an id
    known = {id(graph) for graph in earlier}
    run = torch.compile(module, backend="grove", dynamic=False)
    start = time.perf_counter()
    worst, rounding_only = 0.0, True
    with torch.no_grad():
        for call, inputs in enumerate(calls):
            got = run(*inputs)
            torch.cuda.synchronize()
            if call == 0:
                row["compile_s"] = round(time.perf_counter() - start, 2)
            difference = _relative(got, expected[call])
            worst = max(worst, difference)
            if in_f32 is not None:
                grove_from_f32 = _relative(got, in_f32[call])
                eager_from_f32 = _relative(expected[call], in_f32[call])
                row["from_f32"] = max(row.get("from_f32", 0.0), grove_from_f32)
                row["eager_from_f32"] = max(row.get("eager_from_f32", 0.0), eager_from_f32)
                rounding_only &= grove_from_f32 <= 2.0 * eager_from_f32
    row["difference"] = worst
    inputs = calls[-1]
    graphs = [graph for graph in grove.torch.compiled_graphs() if id(graph) not in known]
    ops, replays, eager_calls, _ = torch_zoo.grove_shape(run, inputs)
    ops = sorted(set(ops) | {op for graph in graphs for _, op, _ in graph.unsupported})
    row.update(ops_in_pytorch=ops, replays_per_call=replays, eager_runs_per_call=eager_calls,
               dynamo_graphs=len(graphs),
               why_in_pytorch=_first_reasons(graph.unsupported for graph in graphs))
    row["ok"] = worst <= TOLERANCES[str(dtype).split(".")[-1]] or (
        in_f32 is not None and rounding_only)
    return row


def _relative(got, reference):
    """max |got - reference| over reference's largest magnitude; NaN counts as
    infinite."""
    scale = reference.abs().max().item() or 1.0
    difference = (got.float() - reference.float()).abs().max().item() / scale
    return difference if difference == difference else float("inf")


def _without_dropout(module):
    """Sets every probability of a random draw in training to 0: dropout and
    stochastic-depth modules, float attributes whose name says drop (dropout,
    drop_rate, drop_prob, layerdrop: what models pass to functional dropout,
    SDPA or a layer skip) on every submodule and on a Hugging Face config, and
    a config's mask_*_prob (wav2vec2's SpecAugment). Random draws differ
    between PyTorch and grove."""
    def clear(holder):
        for key, value in list(vars(holder).items()):
            lowered = key.lower()
            if isinstance(value, float) and ("drop" in lowered or (
                    lowered.startswith("mask_") and lowered.endswith("_prob"))):
                setattr(holder, key, 0.0)

    for sub in module.modules():
        kind = type(sub).__name__
        if isinstance(sub, torch.nn.modules.dropout._DropoutNd) or (
                isinstance(getattr(sub, "p", None), float) and
                ("Drop" in kind or "Stochastic" in kind)):  # torchvision's StochasticDepth
            sub.p = 0.0
        clear(sub)
        config = getattr(sub, "config", None)
        if config is not None and hasattr(config, "__dict__"):
            clear(config)
    return module


def _batch_of(value, batch):
    """A new random input like `value` with `batch` rows: floats normal,
    integers (token ids) within the example's own range."""
    shape = (batch,) + tuple(value.shape[1:])
    if value.is_floating_point():
        return torch.randn(shape, dtype=value.dtype)
    return torch.randint(int(value.min()), int(value.max()) + 1, shape, dtype=value.dtype)


def _gradients(module, forward, inputs, projection):
    """(loss, {parameter name: gradient or None}) of one step of `module`,
    called through `forward`, on the output's projection onto `projection`
    (a list holding one tensor, made at the first call from the output)."""
    for parameter in module.parameters():
        parameter.grad = None
    out = forward(*inputs)
    if not projection:
        generator = torch.Generator(device=out.device).manual_seed(1)
        projection.append(torch.randn(out.shape, device=out.device, generator=generator,
                                      dtype=torch.float64))
    loss = (out * projection[0].to(out.dtype)).mean()
    loss.backward()
    return loss.item(), {name: None if parameter.grad is None else parameter.grad.detach().clone()
                         for name, parameter in module.named_parameters()}


def _set_state_from(target, source):
    """Copies `source`'s parameters and floating buffers into `target`'s, in
    place (a compiled model keeps the addresses it bound)."""
    with torch.no_grad():
        for (_, mine), (_, theirs) in zip(target.named_parameters(), source.named_parameters()):
            mine.copy_(theirs)
        for (_, mine), (_, theirs) in zip(target.named_buffers(), source.named_buffers()):
            mine.copy_(theirs)


def _perturbed(target, source, inputs, seed):
    """`target` set to `source`'s state with every floating parameter and
    input scaled by (1 + PERTURBATION * a normal draw); returns the inputs."""
    generator = torch.Generator().manual_seed(seed)

    def moved(value):
        noise = torch.randn(value.shape, generator=generator, dtype=torch.float64)
        return value * (1 + PERTURBATION * noise).to(value.device, value.dtype)

    _set_state_from(target, source)
    with torch.no_grad():
        for parameter in target.parameters():
            if parameter.is_floating_point():
                parameter.copy_(moved(parameter))
    return tuple(moved(value) if value.is_floating_point() else value for value in inputs)


def _other_eager_runs(probe, module, inputs, projection, step):
    """The gradients of eager f32 runs of `module`'s state in `probe` that sum
    in other orders: PERTURBED_RUNS from weights and inputs moved by a few
    roundings, then one with PyTorch's own convolutions instead of cuDNN's."""
    for seed in range(PERTURBED_RUNS):
        moved_inputs = _perturbed(probe, module, inputs, 1000 * step + seed)
        yield _gradients(probe, probe, moved_inputs, projection)[1]
    _set_state_from(probe, module)
    with torch.backends.cudnn.flags(enabled=False):
        yield _gradients(probe, probe, inputs, projection)[1]


def _relative_differences(got, reference, largest):
    """{name: largest |got - reference| over max(|reference|, 1e-3 of the
    model's largest gradient)} over the parameters both have a gradient for;
    NaN counts as infinite."""
    differences = {}
    for key, expected in reference.items():
        mine = got.get(key)
        if mine is None or expected is None:
            continue
        scale = max(expected.abs().max().item(), 1e-3 * largest, 1e-30)
        difference = (mine.double() - expected.double()).abs().max().item() / scale
        differences[key] = difference if difference == difference else float("inf")
    return differences


def train_one(name, make, door_mode="cudagraphs"):
    """One model's training row (a dict): --train; `door_mode` is the
    backend's mode option (grove's eager mode runs the same kernels without
    CUDA graphs).

    Each of the TRAIN_STEPS steps (warm-up, recording, replay) starts grove's
    model and a float64 copy from eager PyTorch's current weights and buffers
    (copied in place), so each step's gradients are compared from one state:
    a training trajectory is chaotic (batch norm over a few values per
    channel), and after one SGD step of independent f32 rounding the runs no
    longer compute the same function. A gradient passes where it is within
    TRAIN_TOLERANCE of eager's, or no further from float64's than twice eager
    f32's own distance from it (rounding, not a wrong gradient), where eager
    f32's distance is the largest of its own run's, PERTURBED_RUNS runs' from
    weights and inputs moved by a few roundings, and one run's with cuDNN
    off (PyTorch's own convolutions: another summation order). Some gradients
    are ill-conditioned (torchvision's RegNetY-400MF at 64x64, batch 2: a 1e-7
    relative change of the batch, or PyTorch's CPU convolutions without
    oneDNN, move a last-stage weight's gradient by 1e-1 of its size in eager
    PyTorch itself), so eager landing near float64 in one run is luck that
    grove's other summation order need not share. The cause is the kinks of
    ReLU-like activations: a pre-activation within a rounding of zero turns
    its gate over when the summation order changes, and in a last stage of
    2x2 pixels at batch 2 one gate is one of eight positions feeding a
    weight's gradient, about a tenth of it."""
    import copy
    import gc

    from grove import dynamo_backend

    importlib.import_module("grove.torch")  # registers the backend

    torch.manual_seed(0)
    row = {"model": name}
    module, example = _built(make)
    module = _without_dropout(module).train()
    inputs = tuple(_batch_of(value, TRAIN_BATCH).cuda() for value in example)
    twin = copy.deepcopy(module).cuda()
    probe = copy.deepcopy(module).cuda()  # the perturbed eager runs
    exact = copy.deepcopy(module).cuda().double()
    exact_inputs = tuple(value.double() if value.is_floating_point() else value
                         for value in inputs)
    module = module.cuda()
    torch._dynamo.reset()
    gc.collect()
    earlier = list(dynamo_backend._live_runners)  # held, so that no new runner reuses an id
    known = {id(runner) for runner in earlier}
    projection = []
    run = torch.compile(twin, backend="grove", dynamic=False, options={"mode": door_mode})
    steps, one_sided, grove_seconds = [], set(), 0.0
    worst, worst_name, loss_difference = 0.0, None, 0.0
    for step in range(TRAIN_STEPS):
        _set_state_from(twin, module)
        if exact is not None:
            _set_state_from(exact, module)
        expected_loss, expected = _gradients(module, module, inputs, projection)
        if exact is not None:
            try:
                exact_loss, reference = _gradients(exact, exact, exact_inputs, projection)
            except Exception as error:  # f32-only kernels (grouped_mm), f32-only constants
                row["no_float64"] = "%s: %s" % (type(error).__name__, str(error)[:200])
                exact = None
        if exact is None:  # eager f32 is the reference; its perturbed runs the spread
            exact_loss, reference = expected_loss, expected
        start = time.perf_counter()
        loss, got = _gradients(twin, run, inputs, projection)
        grove_seconds += time.perf_counter() - start
        one_sided |= {key for key in expected if (got.get(key) is None) != (expected[key] is None)}
        largest = max((g.abs().max().item() for g in reference.values() if g is not None),
                      default=0.0)
        from_eager = _relative_differences(got, expected, largest)
        grove_error = _relative_differences(got, reference, largest)
        eager_error = _relative_differences(expected, reference, largest)
        for other in _other_eager_runs(probe, module, inputs, projection, step):
            for key, error in _relative_differences(other, reference, largest).items():
                eager_error[key] = max(eager_error.get(key, 0.0), error)
        failing = sorted(((from_eager[key], key) for key in from_eager
                          if from_eager[key] > TRAIN_TOLERANCE
                          and not grove_error[key] <= 2.0 * eager_error[key]), reverse=True)
        if abs(loss - exact_loss) > 2.0 * abs(expected_loss - exact_loss):
            loss_difference = max(loss_difference,
                                  abs(loss - expected_loss) / max(abs(expected_loss), 1e-6))
        steps.append({"loss": loss, "eager_loss": expected_loss,
                      "largest_from_eager": max(from_eager.values(), default=0.0),
                      "failing": [[float("%.3g" % d), key, float("%.3g" % grove_error[key]),
                                   float("%.3g" % eager_error[key])] for d, key in failing[:3]]})
        if failing and not failing[0][0] <= worst:
            worst, worst_name = failing[0]
        with torch.no_grad():  # eager's SGD step; the next step starts everyone from it
            for parameter in module.parameters():
                if parameter.grad is not None:
                    parameter.add_(parameter.grad, alpha=-1e-2)
    row["compile_and_train_s"] = round(grove_seconds, 2)
    runners = [runner for runner in dynamo_backend._live_runners if id(runner) not in known]
    reasons = _first_reasons(runner.unsupported for runner in runners)
    row.update(loss_difference=loss_difference, gradient_difference=worst,
               worst_parameter=worst_name, steps=steps,
               gradients_in_one_run_only=sorted(one_sided),
               ops_in_pytorch=sorted(reasons), why_in_pytorch=reasons,
               grove_graphs=len(runners))
    row["ok"] = worst_name is None and loss_difference <= TRAIN_TOLERANCE and not one_sided
    return row


def _first_reasons(unsupported_lists):
    """{op: the importer's reason for the first node of it left to PyTorch}."""
    reasons = {}
    for unsupported in unsupported_lists:
        for _, op, reason in unsupported:
            reasons.setdefault(op, reason)
    return reasons


def _print_reasons(row):
    for op, reason in sorted(row.get("why_in_pytorch", {}).items()):
        print("    in PyTorch: %s: %s" % (op, reason), flush=True)


def _print_train_row(name, row):
    print("%-24s %s  loss diff %.1e  failing gradient %.1e (%s)  largest from eager %.1e  "
          "graphs %d  train %.1f s  one-sided %s  PyTorch ops: %s" % (
              name, "ok  " if row["ok"] else "DIFF", row["loss_difference"],
              row["gradient_difference"], row["worst_parameter"],
              max(entry["largest_from_eager"] for entry in row["steps"]), row["grove_graphs"],
              row["compile_and_train_s"], ", ".join(row["gradients_in_one_run_only"]) or "none",
              ", ".join(row["ops_in_pytorch"]) or "none"), flush=True)
    if "no_float64" in row:
        print("    no float64 run (%s): judged against eager f32 and its perturbed runs"
              % row["no_float64"], flush=True)
    _print_reasons(row)
    if not row["ok"]:
        for step, entry in enumerate(row["steps"]):
            print("    step %d: loss %.6g (eager %.6g); failing (from eager; grove's and eager "
                  "f32's spread from f64): %s" % (step, entry["loss"], entry["eager_loss"], ", ".join(
                      "%s %.1e %.1e %.1e" % (key, d, g, e) for d, key, g, e in entry["failing"])
                      or "none"), flush=True)


def _print_row(name, row):
    spread = ""
    if "from_f32" in row:
        spread = "  from f32 %.1e (eager %.1e)" % (row["from_f32"], row["eager_from_f32"])
    print("%-24s %s  diff %.1e%s  graphs %d  replays/call %.1f  eager runs/call %.1f  "
          "compile %.1f s  PyTorch ops: %s" % (
              name, "ok  " if row["ok"] else "DIFF", row["difference"], spread,
              row["dynamo_graphs"], row["replays_per_call"],
              row["eager_runs_per_call"], row["compile_s"],
              ", ".join(row["ops_in_pytorch"]) or "none"), flush=True)
    _print_reasons(row)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated names (default: all)")
    parser.add_argument("--json", default="zoo_survey.json")
    parser.add_argument("--budget-s", type=float, default=400.0,
                        help="models not started within this many seconds are skipped")
    parser.add_argument("--train", action="store_true",
                        help="train each model (gradients against eager) instead")
    parser.add_argument("--door-mode", default="cudagraphs", choices=("cudagraphs", "eager"),
                        help="the backend's mode option (--train)")
    parser.add_argument("--set", default="core", choices=("core", "wide", "all"),
                        help="the core models, the wide set (zoo_survey_wide.py) or both")
    parser.add_argument("--dtype", default="float32", choices=sorted(TOLERANCES),
                        help="the models' and inputs' dtype (inference)")
    args = parser.parse_args()
    from torch_backend import skipped_without_cuda_or_dynamo

    if skipped_without_cuda_or_dynamo("zoo_survey"):
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from zoo_survey_wide import WIDE_MODELS

    models = {"core": MODELS, "wide": WIDE_MODELS, "all": MODELS + WIDE_MODELS}[args.set]
    if args.models:
        models = MODELS + WIDE_MODELS
    wanted = [name for name in args.models.split(",") if name]
    unknown = sorted(set(wanted) - {name for name, _ in models})
    if unknown:
        parser.error("unknown models: %s" % ", ".join(unknown))
    start = time.perf_counter()
    rows = []
    for name, make in models:
        if wanted and name not in wanted:
            continue
        if time.perf_counter() - start > args.budget_s:
            rows.append({"model": name, "ok": None, "error": "not run: past --budget-s"})
            print("%-24s not run (budget)" % name, flush=True)
            continue
        try:
            if args.train:
                row = train_one(name, make, args.door_mode)
                _print_train_row(name, row)
            else:
                row = survey_one(name, make, getattr(torch, args.dtype))
                _print_row(name, row)
        except NotBuilt as error:
            row = {"model": name, "ok": None, "error": "not built: %s" % error}
            print("%-24s not built: %s" % (name, str(error)[:300]), flush=True)
        except Exception as error:
            row = {"model": name, "ok": False,
                   "error": "%s: %s" % (type(error).__name__, str(error)[:500]),
                   "where": traceback.format_exc().splitlines()[-40:]}
            print("%-24s FAIL %s" % (name, row["error"][:300]), flush=True)
        rows.append(row)
    with open(args.json, "w") as out:
        json.dump({"rows": rows, "tolerance": TRAIN_TOLERANCE if args.train else TOLERANCES[args.dtype],
                   "dtype": args.dtype,
                   "train": args.train, "torch": torch.__version__}, out, indent=1)
    failed = [row["model"] for row in rows if row.get("ok") is False]
    not_built = [row["model"] for row in rows if row.get("error", "").startswith("not built")]
    left = sorted({op for row in rows for op in row.get("ops_in_pytorch", [])})
    print("models %d, failed or different %d (%s); not built %d (%s); ops left to PyTorch "
          "anywhere: %s" % (len(rows), len(failed), ", ".join(failed) or "none", len(not_built),
                            ", ".join(not_built) or "none", ", ".join(left) or "none"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
