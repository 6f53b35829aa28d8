"""A fuzzer for the torch door: random PyTorch programs that mix ops grove
takes with ops it leaves to PyTorch, run through the backend in both modes,
every call of every phase compared with PyTorch eager (Note [Door fuzzer]).

    python3 -m grove.door_fuzz --seconds 60 --device sim      # CI's torch 1.13: make_fx
    python3 -m grove.door_fuzz --seconds 60 --device cuda     # dynamo's torch.compile

See Note [Door fuzzer] below.
"""

import argparse
import random
import sys
import time

import torch
import torch.nn.functional as F

from grove import aten_layout_ops, importer, input_writes

# Note [Door fuzzer]: a program is a random DAG over a few [B, D] inputs and a
# static weight: pointwise, matmul, softmax, layer norm and reductions that
# grove takes, and "splitters" (ops the importer has no converter for, found at
# run time from importer.CONVERTERS) that run in PyTorch between segments, and
# strided windows (STRIDED_VIEWS) among them. Any
# earlier value may feed any later op, so outputs of early segments are read
# by late ones across splits (the bug class of HF LLaMA on cuda); several
# intermediate values are returned (held outputs). Each program runs at two
# batch sizes, on fresh and on reused input tensors (inputs that change
# address), in "eager" and "cudagraphs": each call (warm-up, recording,
# replays) is compared with PyTorch eager on the same inputs within
# F32_TOLERANCE, and cudagraphs equals grove eager bitwise. Outputs stay uncopied, as
# PyTorch >= 2.1's door leaves them (on 1.13 the importer is driven directly;
# with dynamo through torch.compile). A failure prints the seed and the
# program. About a third of the programs also carry a state vector that one
# step updates in place (state = state / 2 + mean of a value, the shape of a
# running statistic) and later steps read: passed as a static input, so the
# graph writes it itself (Note [Writes into graph inputs]); after every call
# the state is compared with PyTorch's own copy, and cudagraphs' with grove
# eager's bitwise. On the make_fx path every third such program is traced
# plainly, without functionalization (the trace input_writes.aten_graph keeps
# where functionalization fails): its in-place updates then run in PyTorch
# and the importer sees in-place ops on intermediates, such as the squeeze_
# of a 1-D operand's matmul that PyTorch 2.11's functionalized trace keeps too
# (Note [In-place view ops keep their argument's shape], importer.py). About
# 30% of the programs draw random numbers after some steps (RANDOM_DRAWS),
# every call of both sides from one seed. Tests: DoorFuzzTest (tests/python/door_fuzz_test.py),
# which also proves the fuzzer finds the split-generation bug with
# grove.invocation disabled.

F32_TOLERANCE = 1e-4  # of the reference's largest magnitude (at least 1)
CALLS = 5  # warm-up, recording, three replays

# (name, arity, function): ops grove's importer takes.
GROVE_OPS = [
    ("add", 2, lambda a, b: a + b),
    ("sub", 2, lambda a, b: a - b),
    ("mul", 2, lambda a, b: a * b),
    # A threshold away from 0: a cancellation (the mean of a layer norm's
    # output) leaves rounding noise around 0 whose sign decides nothing real.
    ("where", 2, lambda a, b: torch.where(a > 0.25, a, b)),
    ("tanh", 1, torch.tanh),
    ("relu", 1, torch.relu),
    ("sigmoid", 1, torch.sigmoid),
    ("neg", 1, lambda a: -a),
    ("scaled_exp", 1, lambda a: torch.exp(a * 0.1)),
    ("softmax", 1, lambda a: torch.softmax(a, dim=-1)),
    ("row_sum", 1, lambda a: a.sum(dim=-1, keepdim=True) * a / a.shape[-1]),
    # eps 0.1: a row that is nearly constant (softmax, then sigmoid) is not
    # amplified past f32 rounding (seed 83635 differed by 1.2e-4 with 1e-5).
    ("layer_norm", 1, lambda a: F.layer_norm(a, a.shape[-1:], eps=0.1)),
]
MATMUL = "matmul"
STATE_UPDATE = "update_state"
# Candidate ops for PyTorch to run; those with a converter are dropped.
SPLITTER_CANDIDATES = [
    ("flip", "aten.flip", lambda a: torch.flip(a, dims=[-1])),
    ("roll", "aten.roll", lambda a: torch.roll(a, shifts=1, dims=-1)),
    ("cumsum", "aten.cumsum", lambda a: torch.cumsum(a, dim=-1) * 0.1),
    ("cumprod", "aten.cumprod", lambda a: torch.cumprod(1.0 + 0.01 * torch.tanh(a), dim=-1)),
    # One result each (sort's pair adds a getitem that PyTorch runs too), and
    # smooth: a jump (frac) or a kink (softshrink) turns f32 rounding upstream
    # into a difference the oracle cannot tell from a bug.
    ("asinh", "aten.asinh", torch.asinh),
    ("sinc", "aten.sinc", torch.sinc),  # bounded, as its gradient: nothing amplified
    ("sort", "aten.sort", lambda a: torch.sort(a, dim=-1).values),
    ("cos", "aten.cos", torch.cos),
    ("sin", "aten.sin", torch.sin),
    # Still PyTorch's (session 32 took sinc and others): smooth on the
    # values the fuzzer makes.
    ("logcumsumexp", "aten.logcumsumexp", lambda a: torch.logcumsumexp(a, dim=-1) * 0.1),
    ("erfinv", "aten.erfinv", lambda a: torch.erfinv(0.5 * torch.tanh(a))),
    ("lgamma", "aten.lgamma", lambda a: torch.lgamma(2.0 + torch.tanh(a))),
]

# Strided windows over an earlier value (HF Longformer's overlapping chunks: a
# column-major read and overlapping windows, aten.as_strided that moves
# elements). Grove gathers them (Note [Strided windows over a value's own
# elements], fx_common.py); for every other seed the fuzzer leaves them to
# PyTorch (_windows_in_pytorch), whose steps hand later segments strided views
# of pool memory (Note [Private copies keep each element], prepared_program.cc).
# Over a contiguous operand, so that the elements read are the operand's own.
# A 1-D operand (the state) is read as it is.
def _column_read(a):
    return a.contiguous().as_strided(a.shape, (1, a.shape[0]) if a.dim() == 2 else (1,))


def _overlapping_windows(a):
    return a.contiguous().as_strided(a.shape, (1,) * a.dim())


STRIDED_VIEWS = [("column_read", _column_read), ("overlapping_windows", _overlapping_windows)]

# Random draws after some steps' values (Note [Random draws run first],
# random_draws.py): training dropouts (of a strided window's value too: its
# mask follows the traced layout) and additive noise drawn like the value
# (rand_like reads its operand's layout: it stays where it is, and so do the
# draws after it). Every call of grove and of PyTorch starts from one seed, so
# both draw the same numbers. Only after steps whose values reach an output:
# PyTorch's tracers (make_fx from 2.1, dynamo) drop a draw nothing reads, and
# every later draw then takes its numbers, in torch.compile as in grove (seed
# 40145 on PyTorch 2.11's make_fx: an unread dropout before a read one).
RANDOM_DRAWS = [
    ("dropout(0.3)", lambda a: F.dropout(a, 0.3, True)),
    ("dropout(0.1)", lambda a: F.dropout(a, 0.1, True)),
    ("noise", lambda a: a + 0.05 * torch.rand_like(a)),
]
DRAWS_SHARE = 0.3  # of the programs


class _windows_in_pytorch:
    """While active, the importer leaves every strided window to PyTorch (its
    gather limit at 0): the steps then hand later segments strided views of
    pool memory, the path of Note [Private copies keep each element]. The
    fuzzer does so for every other seed."""

    def __init__(self, active):
        self.active = active
        self.saved = None

    def __enter__(self):
        if self.active:
            self.saved = aten_layout_ops._MOST_GATHERED
            aten_layout_ops._MOST_GATHERED = 0
        return self

    def __exit__(self, *exc):
        if self.active:
            aten_layout_ops._MOST_GATHERED = self.saved
        return False


def splitters():
    """The ops drawn among the splitters (STRIDED_VIEWS whatever grove takes)."""
    return [(name, function) for name, aten, function in SPLITTER_CANDIDATES
            if aten not in importer.CONVERTERS] + STRIDED_VIEWS


class Program:
    """A random program: steps (op name, function, operand indices) over
    values 0..inputs-1 (the inputs), then one value per step."""

    def __init__(self, rng, inputs=2, length=12, split=True, exclude=(), draws_rng=None):
        """split: whether ops left to PyTorch may appear; exclude: names of
        grove's ops that may not; draws_rng: a random.Random that puts
        random draws after some steps (RANDOM_DRAWS), apart from `rng` so
        that a seed's program is otherwise the one it was."""
        self.inputs = inputs
        self.steps = []
        self.draws = {}  # step index -> (name, function) applied to its value
        split_ops = splitters() if split else []
        grove_ops = [op for op in GROVE_OPS if op[0] not in exclude]
        count = inputs
        update_at = rng.randrange(length) if rng.random() < 0.35 else None
        self.has_state = update_at is not None
        for step in range(length):
            roll = rng.random()
            if step == update_at:
                # The new state's read is the step's value.
                name, function, operands = STATE_UPDATE, None, [rng.randrange(count)]
            elif split_ops and roll < 0.25:
                name, function = rng.choice(split_ops)
                operands = [rng.randrange(count)]
            elif roll < 0.4:
                name, function, operands = MATMUL, None, [rng.randrange(count)]
            else:
                name, arity, function = rng.choice(grove_ops)
                operands = [rng.randrange(count) for _ in range(arity)]
            self.steps.append((name, function, operands))
            count += 1
        last = count - 1
        held = rng.sample(range(inputs, last), min(2, last - inputs))
        self.outputs = [last] + [index for index in held if index != last]
        if draws_rng is not None and draws_rng.random() < DRAWS_SHARE:
            live = self._live_steps()
            for step in draws_rng.sample(range(length), min(length, draws_rng.randrange(1, 4))):
                if step in live:
                    self.draws[step] = draws_rng.choice(RANDOM_DRAWS)

    def _live_steps(self):
        """Steps whose values reach an output (or update the state): a draw
        after any other step is dead code, which PyTorch's tracers (make_fx
        from 2.1, dynamo) drop, so later draws take its numbers (RANDOM_DRAWS)."""
        live = set()
        pending = [index - self.inputs for index in self.outputs]
        pending += [step for step, (name, _, _) in enumerate(self.steps) if name == STATE_UPDATE]
        while pending:
            step = pending.pop()
            if step < 0 or step in live:
                continue
            live.add(step)
            pending.extend(operand - self.inputs for operand in self.steps[step][2])
        return live

    def __call__(self, *args):
        """program(*inputs, [state,] weight): state is updated in place."""
        # Lists made explicitly: under dynamo a starred assignment may give a tuple.
        inputs, weight = list(args[:-1]), args[-1]
        state = inputs.pop() if self.has_state else None
        values = list(inputs)
        for step, (name, function, operands) in enumerate(self.steps):
            operand_values = [values[index] for index in operands]
            if name == MATMUL:
                values.append(torch.tanh(operand_values[0] @ weight))
            elif name == STATE_UPDATE:
                state.mul_(0.5).add_(operand_values[0].mean(dim=0))
                values.append(state * 1.0)
            else:
                values.append(function(*operand_values))
            if step in self.draws:
                values[-1] = self.draws[step][1](values[-1])
        return tuple(values[index] for index in self.outputs)

    def describe(self):
        lines = ["inputs: v0..v%d, %sweight" % (self.inputs - 1,
                                                "state, " if self.has_state else "")]
        for index, (name, _, operands) in enumerate(self.steps):
            if name == STATE_UPDATE:
                lines.append("state = state / 2 + mean(v%d, dim 0); v%d = state"
                             % (operands[0], self.inputs + index))
                continue
            lines.append("v%d = %s(%s)%s" % (
                self.inputs + index, name, ", ".join("v%d" % o for o in operands),
                " then %s" % self.draws[index][0] if index in self.draws else ""))
        lines.append("outputs: %s" % ", ".join("v%d" % o for o in self.outputs))
        return "\n".join(lines)


class FuzzFailure(AssertionError):
    pass


def relative_error(result, expected):
    """The largest error relative to the reference's largest magnitude (at
    least 1: values come from O(1) inputs, and a cancellation such as
    sum(x - sort(x)) leaves rounding noise only); infinite when the
    non-finite values (an overflow to inf, a NaN) differ."""
    got, want = result.double(), expected.double()
    finite = torch.isfinite(want)
    same_nonfinite = torch.equal(torch.isfinite(got), finite) and torch.equal(
        torch.nan_to_num(got[~finite], nan=0.5), torch.nan_to_num(want[~finite], nan=0.5))
    if not same_nonfinite:
        return float("inf")
    if not finite.any():
        return 0.0
    scale = max(want[finite].abs().max().item(), 1.0)
    return (got[finite] - want[finite]).abs().max().item() / scale


def compile_program(program, args, mode, device, plain_trace=False):
    """grove's callable for `program` at the shapes of `args` (the weight
    last, the state before it: both static); plain_trace: on the make_fx
    path, trace without functionalization."""
    if device.startswith("cuda") and hasattr(torch, "compile"):
        import grove.torch  # noqa: F401 (registers the backend)

        torch._dynamo.reset()
        if program.has_state:
            torch._dynamo.mark_static_address(args[-2])
        return torch.compile(lambda *values: program(*values), backend="grove",
                             options={"mode": mode}, dynamic=False)
    if plain_trace:
        from torch.fx.experimental.proxy_tensor import make_fx

        with torch.no_grad():
            graph = make_fx(program)(*input_writes.trace_clones(args))
    else:
        graph, _ = input_writes.aten_graph(program, args)  # functionalized where state is written
    static = [len(args) - 1] + ([len(args) - 2] if program.has_state else [])
    plan = importer.import_graph(graph, args, static_inputs=static, name="fuzz")
    return plan.compile(backend=mode, device=device, output_copies=lambda node: False)


def run_program(seed, device="sim", counters=None):
    """Runs one random program in both modes; raises FuzzFailure naming the
    seed, the program and the call that differs (any other error too)."""
    rng = random.Random(seed)
    program = Program(rng, inputs=rng.choice([1, 2, 3]), length=rng.randrange(6, 16),
                      draws_rng=draws_rng(seed))
    try:
        _run_in_both_modes(seed, rng, program, device, counters)
    except FuzzFailure:
        raise
    except Exception as error:
        raise FuzzFailure("door fuzz seed %d: %s: %s\n%s" % (
            seed, type(error).__name__, error, program.describe())) from error


def draws_rng(seed):
    """The generator that places a seed's random draws (RANDOM_DRAWS), apart
    from the one that makes its program."""
    return random.Random(seed + 7_000_003)


def _call_seed(seed, batch, call):
    """The torch seed both sides of one call start from (RANDOM_DRAWS)."""
    return (seed * 131 + batch * 17 + call) % (2 ** 31)


def _run_in_both_modes(seed, rng, program, device, counters):
    width = rng.choice([16, 32, 64])
    torch.manual_seed(seed)
    target = "cuda" if device.startswith("cuda") else "cpu"
    weight = (torch.randn(width, width) / width ** 0.5).to(target)
    initial_state = torch.randn(width).to(target)
    results = {}
    for batch in rng.sample([1, 3, 8], 2):
        fixed = [torch.randn(batch, width).to(target) for _ in range(program.inputs)]
        calls = []
        for call in range(CALLS):
            fresh = rng.random() < 0.5
            inputs = [torch.randn(batch, width).to(target) for _ in range(program.inputs)] \
                if fresh else fixed
            calls.append(inputs)
        for mode in ("eager", "cudagraphs"):
            # Each mode updates its own state; PyTorch its own copy of it.
            state = [initial_state.clone()] if program.has_state else []
            reference = [initial_state.clone()] if program.has_state else []
            with _windows_in_pytorch(seed % 2 == 1):  # dynamo compiles at the first call
                compiled = compile_program(program, fixed + state + [weight], mode, device,
                                           plain_trace=program.has_state and seed % 3 == 0)
                with torch.no_grad():
                    torch.manual_seed(_call_seed(seed, batch, 0))
                    first = list(compiled(*calls[0], *state, weight)) + state
            for call, inputs in enumerate(calls):
                with torch.no_grad():
                    torch.manual_seed(_call_seed(seed, batch, call))
                    expected = list(program(*inputs, *reference, weight)) + reference
                    if call == 0:
                        got = first
                    else:
                        torch.manual_seed(_call_seed(seed, batch, call))
                        got = list(compiled(*inputs, *state, weight)) + state
                got = [value.clone() for value in got]
                for index, (value, want) in enumerate(zip(got, expected)):
                    error = relative_error(value, want)
                    if not error <= F32_TOLERANCE:
                        raise FuzzFailure(
                            "door fuzz seed %d: %s call %d (batch %d) output %d differs from "
                            "PyTorch eager by %.3g relative\n%s" % (
                                seed, mode, call, batch, index, error, program.describe()))
                results[(batch, mode, call)] = got
                if counters is not None:
                    counters["calls"] += 1
        for call in range(CALLS):
            pairs = zip(results[(batch, "eager", call)], results[(batch, "cudagraphs", call)])
            if not all(torch.equal(a, b) for a, b in pairs):
                raise FuzzFailure("door fuzz seed %d: batch %d call %d: cudagraphs differs "
                                  "from grove eager\n%s" % (seed, batch, call,
                                                            program.describe()))
    if counters is not None:
        counters["programs"] += 1


def fuzz(seconds, device="sim", first_seed=0, max_programs=None):
    """Runs programs until `seconds` pass; returns the counters."""
    counters = {"programs": 0, "calls": 0, "first_seed": first_seed}
    return seeds_for(seconds, first_seed, max_programs, counters,
                     lambda seed: run_program(seed, device, counters))


def seeds_for(seconds, first_seed, max_programs, counters, run_one):
    """Calls run_one(seed) for seeds from first_seed on until `seconds` pass
    or counters["programs"] reaches max_programs; returns the counters with
    the seconds taken."""
    start = time.monotonic()
    seed = first_seed
    while time.monotonic() - start < seconds:
        if max_programs is not None and counters["programs"] >= max_programs:
            break
        run_one(seed)
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
    print("door fuzz: %d programs, %d calls in %.1f s on %s (seeds %d..%d), no difference" % (
        counters["programs"], counters["calls"], counters["seconds"], args.device, args.seed,
        args.seed + counters["programs"] - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
