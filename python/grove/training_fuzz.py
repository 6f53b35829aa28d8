"""A fuzzer for the training door: the door fuzzer's random programs
(grove/door_fuzz.py) as modules with a trained weight, their gradients taken
through grove in both modes, every step of every phase compared with PyTorch
eager (Note [Training door fuzzer]).

    python3 -m grove.training_fuzz --seconds 60 --device sim    # CI's torch 1.13: aot_module
    python3 -m grove.training_fuzz --seconds 60 --device cuda   # torch.compile(backend="grove")
"""

import argparse
import random
import sys

import torch

from grove import door_fuzz

# Note [Training door fuzzer]: a program of the door fuzzer (pointwise ops
# but the discontinuous `where`, matmuls with a weight, softmax, layer norm,
# row sums, and ops PyTorch runs between grove's segments) without its
# in-place state, wrapped in a module whose weight is a Parameter (the first
# output passes through it once more, tanh(first @ weight), so that every
# program trains it). Each of STEPS steps takes fresh or reused inputs (some
# needing a gradient), a loss that weighs every returned value by fixed
# random coefficients (a mean: steps small enough that training does not
# amplify rounding chaotically), and backward(); then an SGD update of the
# weight, so later steps see moved values in place. The loss, the weight's
# gradient and the inputs' gradients of each step (warm-up, recording,
# replays) are compared with PyTorch eager's on a copy of the module in
# float64, within a tolerance set by PyTorch's own float32 error
# (TOLERANCE_FLOOR, ERROR_FACTOR), and cudagraphs' equal grove eager's
# bitwise. On PyTorch 1.13 (sim) the module trains through
# grove.training.compile_module (AOTAutograd's partition), on 2.x through
# torch.compile(backend="grove"). The whole step (grove.training.compile_step:
# forward, loss, backward and optimizer step replayed back to back, on sim)
# is fuzzed too, over programs without PyTorch's ops (the whole step takes
# only grove's): PyTorch's SGD with momentum and weight decay or AdamW, the
# loss of every step within the same tolerance, and SGD's weight after the
# last step. On the host, programs may draw random numbers after some steps
# (the door fuzzer's RANDOM_DRAWS, Note [Random draws run first]): each step of
# PyTorch's runs and of grove's starts from one seed (host masks do not depend
# on the dtype; CUDA's do, so the cuda run has no draws). A failure names the seed, the step
# and the program. Tests:
# TrainingFuzzTest (tests/python/training_fuzz_test.py).

STEPS = 5  # warm-up, recording, three replays
# The oracle is PyTorch in float64 on the same program and data. grove's
# value passes when its error (relative to the reference's largest
# magnitude, at least 1) is at most TOLERANCE_FLOOR or ERROR_FACTOR times
# the error of PyTorch's own float32 run: updates compound f32 rounding
# (with a summed loss, whole-step seed 599, SGD with momentum, 5 steps:
# PyTorch f32's weight was 8.2e-4 from f64's), while a real fault is off by
# far more.
TOLERANCE_FLOOR = 1e-4
ERROR_FACTOR = 4.0
LEARNING_RATE = 0.05
# Ops whose value jumps where an operand crosses a threshold: as the weight
# moves, an operand of grove's run and one of PyTorch's may land on two sides
# of it (seed 1310: where(a > 0.25) in the whole step's fourth step).
DISCONTINUOUS = ("where",)


class FuzzFailure(AssertionError):
    pass


class Reference:
    """PyTorch's values of a run in float32 and float64: check(value, index)
    is grove's error and the tolerance it must meet."""

    def __init__(self, single, double):
        self.single, self.double = single, double

    def check(self, got, index):
        want, want32 = self.double[index], self.single[index]
        if got is None or want is None:
            same = got is None and want is None
            return (0.0 if same else float("inf")), TOLERANCE_FLOOR
        own = door_fuzz.relative_error(want32.double(), want)
        return (door_fuzz.relative_error(got.double(), want),
                max(TOLERANCE_FLOOR, ERROR_FACTOR * own))


class ProgramModule(torch.nn.Module):
    """A door-fuzzer program over its inputs and a trained weight."""

    def __init__(self, program, weight):
        super().__init__()
        self.program = program
        self.weight = torch.nn.Parameter(weight.clone())

    def forward(self, *inputs):
        # The first output through the weight once more, so that every
        # program trains it (its own matmuls may be dead or absent).
        first, *rest = self.program(*inputs, self.weight)
        return (torch.tanh(first @ self.weight), *rest)


def trained(module, mode, device):
    """The module trained through grove in `mode`."""
    if device.startswith("cuda") and hasattr(torch, "compile"):
        import grove.torch  # noqa: F401 (registers the backend)

        torch._dynamo.reset()
        return torch.compile(module, backend="grove", options={"mode": mode}, dynamic=False)
    import grove.training

    return grove.training.compile_module(module, mode)


def stateless_program(rng, split=True, draws_rng=None):
    """A door-fuzzer program without the in-place state (drawn again until
    one has none: the state is an inference-path case); split: whether ops
    left to PyTorch may appear; draws_rng: door_fuzz.Program's (random draws
    after some steps)."""
    while True:
        program = door_fuzz.Program(rng, inputs=rng.choice([1, 2, 3]),
                                    length=rng.randrange(4, 12), split=split,
                                    exclude=DISCONTINUOUS, draws_rng=draws_rng)
        if not program.has_state:
            return program


def run_program(seed, device="sim", counters=None):
    """Trains one random program in both modes; raises FuzzFailure naming the
    seed, the program and the step that differs (any other error too)."""
    rng = random.Random(seed)
    # Random draws on the host only: CUDA's dropout maps random numbers to
    # elements by dtype (Note [Random draws run first]), so the float64
    # oracle would draw other masks than the float32 runs.
    draws = None if device.startswith("cuda") else door_fuzz.draws_rng(seed)
    program = stateless_program(rng, draws_rng=draws)
    try:
        _train_in_both_modes(seed, rng, program, device, counters)
    except FuzzFailure:
        raise
    except Exception as error:
        raise FuzzFailure("training fuzz seed %d: %s: %s\n%s" % (
            seed, type(error).__name__, error, program.describe())) from error


def _step(module, model, inputs, coefficients, seed=None):
    """One step: (loss, weight's gradient, inputs' gradients) and the update;
    seed: torch's seed for the forward's random draws (the same masks in
    float32, float64 and grove: CPU draws do not depend on the dtype)."""
    module.zero_grad(set_to_none=True)
    leaves = [x.detach().clone().requires_grad_(needs) for x, needs in inputs]
    if seed is not None:
        torch.manual_seed(seed)
    outputs = model(*leaves)
    loss = sum((value * weight).mean() for value, weight in zip(outputs, coefficients))
    loss.backward()
    # None where a value gets no gradient (an input the program never reads).
    gradients = [None if tensor.grad is None else tensor.grad.detach().clone()
                 for tensor in [module.weight] + [leaf for leaf in leaves if leaf.requires_grad]]
    if module.weight.grad is not None:
        with torch.no_grad():
            module.weight.sub_(LEARNING_RATE * module.weight.grad)
    return [loss.detach().clone()] + gradients


def _train_in_both_modes(seed, rng, program, device, counters):
    width = rng.choice([16, 32, 64])
    batch = rng.choice([1, 3, 8])
    torch.manual_seed(seed)
    target = "cuda" if device.startswith("cuda") else "cpu"
    weight = (torch.randn(width, width) / width ** 0.5).to(target)
    needs = [rng.random() < 0.5 for _ in range(program.inputs)]
    fixed = [torch.randn(batch, width).to(target) for _ in range(program.inputs)]
    steps = []
    for _ in range(STEPS):
        fresh = rng.random() < 0.5
        values = [torch.randn(batch, width).to(target) for _ in range(program.inputs)] \
            if fresh else fixed
        steps.append(list(zip(values, needs)))
    coefficients = [torch.randn(batch, width).to(target) for _ in program.outputs]
    single, double = ProgramModule(program, weight), ProgramModule(program, weight.double())
    wide = [torch.as_tensor(c).double() for c in coefficients]
    expected = [Reference(_step(single, single, inputs, coefficients, seed * 31 + step),
                          _step(double, double, [(x.double(), n) for x, n in inputs], wide,
                                seed * 31 + step))
                for step, inputs in enumerate(steps)]
    results = {}
    for mode in ("eager", "cudagraphs"):
        module = ProgramModule(program, weight)
        model = trained(module, mode, device)
        results[mode] = []
        for step, inputs in enumerate(steps):
            got = _step(module, model, inputs, coefficients, seed * 31 + step)
            if len(got) != len(expected[step].double):
                raise FuzzFailure("training fuzz seed %d: %s step %d gave %d values, PyTorch %d"
                                  % (seed, mode, step, len(got), len(expected[step].double)))
            for index, value in enumerate(got):
                error, tolerance = expected[step].check(value, index)
                if not error <= tolerance:
                    what = "the loss" if index == 0 else (
                        "the weight's gradient" if index == 1 else
                        "input gradient %d" % (index - 2))
                    raise FuzzFailure(
                        "training fuzz seed %d: %s step %d (batch %d): %s differs from "
                        "PyTorch eager (f64) by %.3g relative, over %.3g\n%s" % (
                            seed, mode, step, batch, what, error, tolerance,
                            program.describe()))
            results[mode].append(got)
            if counters is not None:
                counters["steps"] += 1
        del model
    for step in range(STEPS):
        pairs = zip(results["eager"][step], results["cudagraphs"][step])
        if not all((a is None and b is None) or (a is not None and b is not None
                                                 and torch.equal(a, b)) for a, b in pairs):
            raise FuzzFailure("training fuzz seed %d: step %d: cudagraphs differs from grove "
                              "eager\n%s" % (seed, step, program.describe()))
    if counters is not None:
        counters["programs"] += 1


def _optimizer(kind, parameters):
    if kind == "sgd":
        return torch.optim.SGD(parameters, lr=LEARNING_RATE, momentum=0.9, weight_decay=1e-3)
    return torch.optim.AdamW(parameters, lr=1e-2, weight_decay=1e-2)


def run_whole_step(seed, counters=None):
    """Trains one random program (grove's ops only) as a whole step on sim in
    both modes; raises FuzzFailure naming the seed, the optimizer and the
    step that differs."""
    rng = random.Random(seed)
    program = stateless_program(rng, split=False)
    kind = rng.choice(["sgd", "adamw"])
    try:
        _whole_step_in_both_modes(seed, rng, program, kind, counters)
    except FuzzFailure:
        raise
    except Exception as error:
        raise FuzzFailure("whole-step fuzz seed %d (%s): %s: %s\n%s" % (
            seed, kind, type(error).__name__, error, program.describe())) from error


def _whole_step_in_both_modes(seed, rng, program, kind, counters):
    import grove.training

    width = rng.choice([16, 32, 64])
    batch = rng.choice([1, 3, 8])
    torch.manual_seed(seed)
    weight = torch.randn(width, width) / width ** 0.5
    batches = [[torch.randn(batch, width) for _ in range(program.inputs)]
               for _ in range(STEPS)]
    coefficients = [torch.randn(batch, width) for _ in program.outputs]

    def loss_fn(forward, *inputs):
        return sum((value * c).mean() for value, c in zip(forward(*inputs), coefficients))

    def eager(dtype):
        """PyTorch's losses and final weight in `dtype`."""
        module = ProgramModule(program, weight.to(dtype))
        optimizer = _optimizer(kind, list(module.parameters()))
        scale = [c.to(dtype) for c in coefficients]
        losses = []
        for inputs in batches:
            optimizer.zero_grad(set_to_none=True)
            values = module(*[x.to(dtype) for x in inputs])
            loss = sum((value * c).mean() for value, c in zip(values, scale))
            loss.backward()
            optimizer.step()
            losses.append(loss.detach().clone())
        return losses + [module.weight.detach().clone()]

    expected = Reference(eager(torch.float32), eager(torch.float64))
    results = {}
    for mode in ("eager", "cudagraphs"):
        module = ProgramModule(program, weight)
        step = grove.training.compile_step(module, loss_fn,
                                           _optimizer(kind, list(module.parameters())),
                                           mode=mode, device="sim")
        results[mode] = []
        for index, inputs in enumerate(batches):
            loss = step(*inputs).detach().clone()
            error, tolerance = expected.check(loss, index)
            if not error <= tolerance:
                raise FuzzFailure("whole-step fuzz seed %d (%s): %s step %d (batch %d): the "
                                  "loss differs from PyTorch eager (f64) by %.3g relative, over "
                                  "%.3g\n%s" % (seed, kind, mode, index, batch, error, tolerance,
                                                 program.describe()))
            results[mode].append(loss)
            if counters is not None:
                counters["steps"] += 1
        if kind == "sgd":
            # (AdamW divides by the root of its second moment: a gradient near
            # zero whose rounding differs moves a weight by up to lr, so its
            # weights are compared through the losses only.)
            error, tolerance = expected.check(module.weight.detach(), STEPS)
            if not error <= tolerance:
                raise FuzzFailure("whole-step fuzz seed %d (sgd): %s: the weight after %d steps "
                                  "differs from PyTorch eager's (f64) by %.3g relative, over "
                                  "%.3g\n%s" % (seed, mode, STEPS, error, tolerance,
                                                 program.describe()))
        del step
    for index in range(STEPS):
        if not torch.equal(results["eager"][index], results["cudagraphs"][index]):
            raise FuzzFailure("whole-step fuzz seed %d (%s): step %d: cudagraphs differs from "
                              "grove eager\n%s" % (seed, kind, index, program.describe()))
    if counters is not None:
        counters["programs"] += 1


def fuzz(seconds, device="sim", first_seed=0, max_programs=None, whole_step=False):
    """Trains programs until `seconds` pass (through the door, or as whole
    steps on sim); returns the counters."""
    counters = {"programs": 0, "steps": 0, "first_seed": first_seed}
    if whole_step:
        return door_fuzz.seeds_for(seconds, first_seed, max_programs, counters,
                                   lambda seed: run_whole_step(seed, counters))
    return door_fuzz.seeds_for(seconds, first_seed, max_programs, counters,
                               lambda seed: run_program(seed, device, counters))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--device", default="sim")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--whole-step", action="store_true",
                        help="fuzz grove.training.compile_step (sim) instead of the door")
    args = parser.parse_args(argv)
    try:
        counters = fuzz(args.seconds, args.device, args.seed, whole_step=args.whole_step)
    except FuzzFailure as failure:
        print(failure)
        return 1
    print("%s fuzz: %d programs, %d steps in %.1f s on %s (seeds %d..%d), no difference"
          % ("whole-step" if args.whole_step else "training", counters["programs"],
             counters["steps"], counters["seconds"], "sim" if args.whole_step else args.device,
             args.seed, args.seed + counters["programs"] - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
