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
import time

import torch

from grove import door_fuzz

# Note [Training door fuzzer]: a program of the door fuzzer (pointwise ops,
# matmuls with a weight, softmax, layer norm, row sums, and on 2.x the ops
# PyTorch runs between grove's segments) without its in-place state, wrapped
# in a module whose weight is a Parameter (the first output passes through it
# once more, tanh(first @ weight), so that every program trains it). Each of STEPS steps takes fresh or
# reused inputs (some needing a gradient), a loss that weighs every returned
# value by fixed random coefficients, and backward(); then an SGD update of
# the weight, so later steps see moved values in place. The weight's and the
# inputs' gradients and the loss of each step (warm-up, recording, replays)
# are compared with PyTorch eager's on a copy of the module within
# GRADIENT_TOLERANCE of the largest magnitude, and cudagraphs' equal grove
# eager's bitwise. On PyTorch 1.13 (sim) the module trains through
# grove.training.compile_module (AOTAutograd's partition), on 2.x through
# torch.compile(backend="grove"). A failure names the seed, the step and the
# program. Tests: TrainingFuzzTest (tests/python/training_fuzz_test.py).

STEPS = 5  # warm-up, recording, three replays
# Of the reference's largest magnitude (at least 1). Looser than the
# inference fuzzer's 1e-4: each side updates its own weight, so f32 rounding
# of earlier steps compounds (seed 284: 1.16e-4 at step 3, batch 8); a real
# fault is off by far more.
GRADIENT_TOLERANCE = 1e-3
LEARNING_RATE = 0.05


class FuzzFailure(AssertionError):
    pass


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


def stateless_program(rng):
    """A door-fuzzer program without the in-place state (drawn again until
    one has none: the state is an inference-path case)."""
    while True:
        program = door_fuzz.Program(rng, inputs=rng.choice([1, 2, 3]),
                                    length=rng.randrange(4, 12))
        if not program.has_state:
            return program


def run_program(seed, device="sim", counters=None):
    """Trains one random program in both modes; raises FuzzFailure naming the
    seed, the program and the step that differs (any other error too)."""
    rng = random.Random(seed)
    program = stateless_program(rng)
    try:
        _train_in_both_modes(seed, rng, program, device, counters)
    except FuzzFailure:
        raise
    except Exception as error:
        raise FuzzFailure("training fuzz seed %d: %s: %s\n%s" % (
            seed, type(error).__name__, error, program.describe())) from error


def _step(module, model, inputs, coefficients):
    """One step: (loss, weight's gradient, inputs' gradients) and the update."""
    module.zero_grad(set_to_none=True)
    leaves = [x.detach().clone().requires_grad_(needs) for x, needs in inputs]
    outputs = model(*leaves)
    loss = sum((value * weight).sum() for value, weight in zip(outputs, coefficients))
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
    reference_module = ProgramModule(program, weight)
    expected = [_step(reference_module, reference_module, inputs, coefficients)
                for inputs in steps]
    results = {}
    for mode in ("eager", "cudagraphs"):
        module = ProgramModule(program, weight)
        model = trained(module, mode, device)
        results[mode] = []
        for step, inputs in enumerate(steps):
            got = _step(module, model, inputs, coefficients)
            for index, (value, want) in enumerate(zip(got, expected[step])):
                if value is None or want is None:
                    error = 0.0 if value is None and want is None else float("inf")
                else:
                    error = door_fuzz.relative_error(value, want)
                if not error <= GRADIENT_TOLERANCE:
                    what = "the loss" if index == 0 else (
                        "the weight's gradient" if index == 1 else
                        "input gradient %d" % (index - 2))
                    raise FuzzFailure(
                        "training fuzz seed %d: %s step %d (batch %d): %s differs from "
                        "PyTorch eager by %.3g relative\n%s" % (
                            seed, mode, step, batch, what, error, program.describe()))
            if len(got) != len(expected[step]):
                raise FuzzFailure("training fuzz seed %d: %s step %d gave %d values, PyTorch %d"
                                  % (seed, mode, step, len(got), len(expected[step])))
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


def fuzz(seconds, device="sim", first_seed=0, max_programs=None):
    """Trains programs until `seconds` pass; returns the counters."""
    counters = {"programs": 0, "steps": 0, "seconds": 0.0, "first_seed": first_seed}
    start = time.monotonic()
    seed = first_seed
    while time.monotonic() - start < seconds:
        if max_programs is not None and counters["programs"] >= max_programs:
            break
        run_program(seed, device, counters)
        seed += 1
    counters["seconds"] = time.monotonic() - start
    return counters


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--device", default="sim")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        counters = fuzz(args.seconds, args.device, args.seed)
    except FuzzFailure as failure:
        print(failure)
        return 1
    print("training fuzz: %d programs, %d steps in %.1f s on %s (seeds %d..%d), no difference"
          % (counters["programs"], counters["steps"], counters["seconds"], args.device,
             args.seed, args.seed + counters["programs"] - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
