"""Converters of ATen's tests for and replacements of non-finite values:
isnan, isinf, isposinf, isneginf, isfinite, nan_to_num, and fmax/fmin (the
maximum and minimum that ignore a NaN), on any dtype grove computes. T5's
fp16 clamp and models that guard their logits test with these; without them
the graph split at every test. Importing this module adds them to
aten_ops.CONVERTERS."""

import torch

from grove.aten_ops import CONVERTERS, magnitude
from grove.fx_common import Unsupported

_INFINITY = float("inf")


def is_nan(c, name):
    """Bool: where `name` is NaN (x != x holds for NaN alone; never for integers)."""
    return c.emit("ne", [name, name])


def _isnan(c, a):
    return is_nan(c, c.tensor(a["self"]))


def _equals(value):
    """isposinf (+inf), isneginf (-inf): x == value; never true for integers."""
    def convert(c, a):
        x = a["self"]
        if not c.dtype(x).is_floating_point:
            return is_nan(c, c.tensor(x))  # all false
        return c.emit("eq", [c.tensor(x), c.scalar(value, c.dtype(x))])

    return convert


def _isinf(c, a):
    x = a["self"]
    dtype = c.dtype(x)
    if not dtype.is_floating_point:
        return is_nan(c, c.tensor(x))  # all false
    return c.emit("eq", [magnitude(c, c.tensor(x), dtype), c.scalar(_INFINITY, dtype)])


def _isfinite(c, a):
    x = a["self"]
    dtype = c.dtype(x)
    if not dtype.is_floating_point:
        return c.emit("eq", [c.tensor(x), c.tensor(x)])  # all true
    # |x| < inf is false for inf and for NaN.
    return c.emit("lt", [magnitude(c, c.tensor(x), dtype), c.scalar(_INFINITY, dtype)])


def _nan_to_num(c, a):
    x = a["self"]
    dtype = c.dtype(x)
    if not dtype.is_floating_point:
        return c.tensor(x)
    largest = torch.finfo(dtype).max
    nan = a.get("nan")
    posinf = a.get("posinf")
    neginf = a.get("neginf")
    name = c.tensor(x)
    # The replacement values as PyTorch stores them: rounded to the dtype.
    values = [torch.tensor(v, dtype=dtype).item() for v in (
        0.0 if nan is None else nan, largest if posinf is None else posinf,
        -largest if neginf is None else neginf)]
    out = c.emit("where", [c.emit("eq", [name, c.scalar(_INFINITY, dtype)]),
                           c.scalar(values[1], dtype), name])
    out = c.emit("where", [c.emit("eq", [name, c.scalar(-_INFINITY, dtype)]),
                           c.scalar(values[2], dtype), out])
    return c.emit("where", [is_nan(c, name), c.scalar(values[0], dtype), out])


def _ignoring_nan(op):
    """fmax/fmin: maximum/minimum where both are numbers, the number where one
    is NaN, NaN where both are."""
    def convert(c, a):
        dtype = c.result().dtype
        if dtype == torch.bool:
            raise Unsupported("%s of bool tensors" % op)
        left, right = c.operand(a["self"], dtype), c.operand(a["other"], dtype)
        both = c.emit(op, [left, right])
        if not dtype.is_floating_point:
            return both
        out = c.emit("where", [is_nan(c, right), left, both])
        return c.emit("where", [is_nan(c, left), right, out])

    return convert


CONVERTERS.update({
    "aten.isnan": _isnan,
    "aten.isinf": _isinf,
    "aten.isposinf": _equals(_INFINITY),
    "aten.isneginf": _equals(-_INFINITY),
    "aten.isfinite": _isfinite,
    "aten.nan_to_num": _nan_to_num,
    "aten.fmax": _ignoring_nan("maximum"),
    "aten.fmin": _ignoring_nan("minimum"),
})
