"""Calls whose inputs share memory with an input the graph writes (Note
[Inputs that share memory with a written input], below)."""
import bisect

import torch

# Note [Inputs that share memory with a written input]
# grove traces a graph on example inputs that are distinct tensors and runs it
# as a program whose inputs are distinct buffers. A call may bring inputs that
# overlap in memory (two views of one buffer), and where the graph writes one
# of them in place eager PyTorch's later reads see the write through the other:
# grove's did not (`a.mul_(2); return b + 1` with a = t[:4], b = t[2:6] was off
# by 3.0 through the door on an H200, in both modes, session 33 call H).
# Dynamo passes one tensor given twice as one input, and AOTAutograd (the
# training path) rewrites aliased inputs itself, but an inference graph gets
# each view as an input of its own. So a graph that writes inputs checks each
# call: where a written input's memory span (its first to its last element's
# byte) meets another input's, the call runs the graph in PyTorch, which is
# eager's answer, and a warning says so once. Spans that merely interleave
# count as overlapping (the PyTorch run is right either way). The spans of the
# static inputs grove binds (parameters, caches) are fixed, so they are taken
# once; a call measures only the others, a few tensors for a decode step.
# Tests: AliasedWritesTest (tests/python/aliased_writes_test.py, sim) and, through
# the door on an H200, session 33 call I.


def span(value):
    """(first byte, one past the last byte) a tensor's elements occupy; None
    for a tensor with no strided memory of its own (sparse, nested)."""
    if value.layout != torch.strided:
        return None
    start = value.data_ptr()
    extent = 1
    for size, stride in zip(value.shape, value.stride()):
        extent += (size - 1) * stride
    return start, start + extent * value.element_size()


def _spans(args, positions):
    """(span, position) of each tensor argument at `positions` that has elements
    and memory of its own."""
    for position in positions:
        value = args[position]
        if isinstance(value, torch.Tensor) and value.numel():
            extent = span(value)
            if extent is not None:
                yield extent, position


class _Spans:
    """Fixed spans, sorted by start, asked whether any meets [start, end)."""

    def __init__(self, spans):
        spans = sorted(spans)
        self.starts = [first for first, _ in spans]
        self.reach = []  # the largest end among the spans up to each one
        furthest = 0
        for _, end in spans:
            furthest = max(furthest, end)
            self.reach.append(furthest)

    def meets(self, start, end):
        count = bisect.bisect_left(self.starts, end)  # the spans that begin before `end`
        return count > 0 and self.reach[count - 1] > start


class WrittenInputOverlap:
    """Answers whether a call's inputs overlap where one of them is written.
    written: positions of the inputs the graph writes; fixed: positions of
    inputs whose address and layout stay as at the first call (bound static
    inputs)."""

    def __init__(self, written, fixed):
        self.written = frozenset(written)
        self.fixed = frozenset(fixed)
        self._all_fixed = None  # _Spans of every fixed input, taken at the first call
        self._written_fixed = None  # _Spans of the fixed inputs the graph writes
        self._fixed_conflict = None  # two fixed inputs that overlap, one written

    def _take_fixed(self, args):
        spans = list(_spans(args, sorted(self.fixed)))
        written = [(s, position) for s, position in spans if position in self.written]
        self._all_fixed = _Spans([s for s, _ in spans])
        self._written_fixed = _Spans([s for s, _ in written])
        for (start, end), position in written:
            for (other_start, other_end), other in spans:
                if other != position and other_start < end and start < other_end:
                    self._fixed_conflict = (position, other)
                    return

    def __call__(self, args):
        """Positions of inputs that overlap where one is written (a tuple), or None."""
        if not self.written:
            return None
        if self._all_fixed is None:
            self._take_fixed(args)
        if self._fixed_conflict is not None:
            return self._fixed_conflict
        free = list(_spans(args, [position for position in range(len(args))
                                  if position not in self.fixed]))
        for index, ((start, end), position) in enumerate(free):
            written = position in self.written
            for (other_start, other_end), other in free[index + 1:]:
                if other_start < end and start < other_end and (written or other in self.written):
                    return position, other
            fixed = self._all_fixed if written else self._written_fixed
            if fixed.meets(start, end):
                return (position,)
        return None
