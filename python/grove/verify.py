"""Verify mode: a differential check of grove against PyTorch eager, for the
calls where a wrong answer would be born (Note [Verify mode]).

    torch.compile(model, backend="grove", options={"verify": True})
    GROVE_VERIFY=1 python train.py        # every graph the door compiles,
                                          # and every grove.compile model

See Note [Verify mode] below.
"""

import os

import torch
import torch.fx

from grove import input_writes

# Note [Verify mode]: the first calls of a graph (warm-up, recording and the
# first replay; VERIFIED_CALLS, or GROVE_VERIFY_CALLS) run step by step: before each grove segment
# runs, its fx nodes are evaluated in PyTorch eager on the same input values;
# after it runs, each output is compared with that reference within the
# dtype's tolerance (TOLERANCES; integers and bools exactly; relative to the
# output's largest magnitude, or where that is below the dtype's rounding of
# the largest value the segment reads or makes, to that: a gradient that
# cancels to 1e-12 in float32 is rounding noise, not a value to match to
# 1e-3, as HF RoBERTa's and Longformer's backward hold), the segment's
# inputs must be unchanged, and every value an earlier step produced must still
# hold what it held when it was made (a later segment that writes over memory
# an earlier output still owns is named). A divergence raises VerifyError
# naming the graph, the phase, the segment, the first diverging fx node (its
# name and ATen op) and the error. Later calls run as usual: verify mode costs
# the first calls one PyTorch evaluation of the graph and a copy of each value,
# and nothing after. grove.compile models (grove.Model) compare their first
# calls with a grove eager twin of the same program instead. Tests:
# VerifyTest (tests/python/importer_test.py).

VERIFIED_CALLS = 3  # warm-up, recording, first replay (GROVE_VERIFY_CALLS: more)
PHASES = ("warm-up", "recording", "first replay")
# Largest error relative to the reference's largest magnitude.
TOLERANCES = {torch.float32: 1e-3, torch.float64: 1e-9, torch.float16: 1e-2,
              torch.bfloat16: 4e-2}


class VerifyError(AssertionError):
    """grove's result differs from PyTorch eager's (Note [Verify mode])."""


def enabled_by_environment():
    return os.environ.get("GROVE_VERIFY", "").lower() not in ("", "0", "false", "no")


def verified_calls():
    """How many first calls verify mode checks: VERIFIED_CALLS, or
    GROVE_VERIFY_CALLS (a bug that shows only in later replays)."""
    text = os.environ.get("GROVE_VERIFY_CALLS", "")
    if not text:
        return VERIFIED_CALLS
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 1:
        raise ValueError("grove: GROVE_VERIFY_CALLS=%r; use a positive number of calls" % text)
    return count


def phase_name(call):
    return PHASES[call] if call < len(PHASES) else "replay %d" % (call - 1)


def largest_magnitude(values):
    """The largest finite magnitude among the floating tensors in values."""
    largest = 0.0
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
            magnitudes = value.detach().abs()
            magnitudes = magnitudes[torch.isfinite(magnitudes)]
            if magnitudes.numel():
                largest = max(largest, magnitudes.max().item())
    return largest


def difference(result, expected, context_magnitude=0.0):
    """None when `result` matches `expected` within the dtype's tolerance,
    else a description of the difference. The error is relative to
    expected's largest magnitude, or, where that is smaller, to the dtype's
    rounding of context_magnitude (the largest value the computation read
    or made; Note [Verify mode])."""
    if not isinstance(expected, torch.Tensor) or not isinstance(result, torch.Tensor):
        return None
    if tuple(result.shape) != tuple(expected.shape):
        return "shape %s, expected %s" % (tuple(result.shape), tuple(expected.shape))
    if result.dtype != expected.dtype:
        return "dtype %s, expected %s" % (result.dtype, expected.dtype)
    if not expected.is_floating_point():
        if torch.equal(result.cpu(), expected.cpu()):
            return None
        wrong = (result.cpu() != expected.cpu()).sum().item()
        return "%d of %d elements differ" % (wrong, expected.numel())
    if expected.numel() == 0:
        return None
    # On the host: a value PyTorch computed on the host (a lifted constant)
    # may stand against grove's on the device.
    got, want = result.detach().cpu().double(), expected.detach().cpu().double()
    finite = torch.isfinite(want)
    if not torch.equal(torch.isfinite(got), finite) or \
            not torch.equal(got[~finite].cpu(), want[~finite].cpu()):
        return "non-finite values differ"
    scale = want[finite].abs().max().item() if finite.any() else 1.0
    noise = torch.finfo(expected.dtype).eps * context_magnitude
    error = (got[finite] - want[finite]).abs().max().item() / max(scale, noise, 1e-30) \
        if finite.any() else 0.0
    tolerance = TOLERANCES.get(expected.dtype, 1e-3)
    if error > tolerance:
        return "error %.3g relative to the largest magnitude %.3g (tolerance %.0e for %s)" % (
            error, scale, tolerance, expected.dtype)
    return None


def node_label(node):
    target = node.target
    op = str(target) if hasattr(target, "_schema") else getattr(target, "__name__", str(target))
    return "'%s' (%s)" % (node.name, op)


def evaluate(node, env, read):
    """PyTorch eager's value of an fx node, its operands read from env."""
    args = torch.fx.node.map_arg(node.args, lambda n: read(env, n))
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: read(env, n))
    return node.target(*args, **kwargs)


def snapshot(value):
    return value.detach().clone() if isinstance(value, torch.Tensor) else None


class StepChecker:
    """The checks of one verified call of a GraphRunner."""

    def __init__(self, runner, call):
        self.runner = runner
        self.where = "grove verify: graph '%s' (%s, %s)" % (
            runner.plan.name, runner.backend, phase_name(call))
        self.made = {}  # fx node -> (value, its copy when made, who made it)

    def reference(self, segment, env, read):
        """Evaluates the segment's fx nodes in PyTorch on the values in env;
        a node that writes an input (Note [Writes into graph inputs]) writes
        a copy, so the caller's state advances once, by grove."""
        local = dict(env)
        with torch.no_grad():
            for node in segment.nodes:
                for written in input_writes.written_arguments(node):
                    value = read(local, written)
                    if isinstance(value, torch.Tensor):
                        local[written] = value.clone()
                local[node] = evaluate(node, local, read)
        return local

    def check_segment(self, segment, inputs, copies, outputs, reference):
        diverging = []
        context = largest_magnitude(list(inputs) + [reference[node] for node, _ in segment.outputs])
        for (node, _), value in zip(segment.outputs, outputs):
            problem = difference(value, reference[node], context)
            if problem is not None:
                diverging.append((node, problem))
        if diverging:
            order = {node: index for index, node in enumerate(segment.nodes)}
            node, problem = min(diverging, key=lambda item: order.get(item[0], 0))
            raise VerifyError("%s: segment %d differs from PyTorch eager at fx node %s: %s "
                              "(%d of its %d outputs diverge)" % (
                                  self.where, segment.index, node_label(node), problem,
                                  len(diverging), len(segment.outputs)))
        written = {argument for node in segment.nodes
                   for argument in input_writes.written_arguments(node)}
        for (name, node), value, copy in zip(segment.inputs, inputs, copies):
            if node in written:
                continue  # the graph updates this input (Note [Writes into graph inputs])
            if copy is not None and difference(value, copy) is not None:
                raise VerifyError("%s: segment %d wrote over its input %s, which it must only "
                                  "read" % (self.where, segment.index, node_label(node)))

    def produced(self, node, value, maker):
        copy = snapshot(value)
        if copy is not None:
            self.made[node] = (value, copy, maker)

    def refresh(self):
        """A PyTorch step wrote a value in place (an index_copy_ into a cache):
        every value made so far is taken as it is now (views share memory)."""
        for node, (value, _, maker) in list(self.made.items()):
            self.made[node] = (value, snapshot(value), maker)

    def check_held_values(self, after):
        """Every value made earlier in the call still holds what it held."""
        for node, (value, copy, maker) in self.made.items():
            problem = difference(value, copy)
            if problem is not None:
                raise VerifyError("%s: the value of fx node %s (made by %s) changed after it "
                                  "was made, by the time %s ran: %s; a later step wrote over "
                                  "memory it still owns" % (self.where, node_label(node), maker,
                                                            after, problem))
