"""Converters of ATen's pointwise math that grove writes from its own ops:
erf, the hyperbolic functions and their inverses, asin and acos, base-2 and
base-10 logarithms and exp2, and the fused multiply-adds addcmul, addcdiv
and lerp. An integer operand is cast to the result's dtype first, as
PyTorch promotes it. Importing this module adds them to aten_ops.CONVERTERS.

Each form is chosen to keep f32's accuracy where the textbook one cancels:
sinh through expm1 (exp(x) - exp(-x) loses every digit near 0), asinh and
acosh through log1p, atanh as log1p(2x / (1 - x)) / 2, acos as twice the
atan of sqrt((1 - x) / (1 + x)) (pi/2 - asin(x) cancels near 1). Guarded by
MathOpsTest (tests/python/importer_math_ops_test.py)."""

import math

from grove.aten_ops import CONVERTERS, magnitude
from grove.aten_pointwise_ops import floating_op, floating_operands, in_floats

# Past this magnitude x*x overflows f32's range on the way: asinh and acosh
# take log(2|x|) instead, which equals them to f32 precision there.
_LARGE = 1e9


def _emit(c, op, *inputs):
    return c.emit(op, list(inputs))


def _sinh(c, x, dtype):
    half = c.scalar(0.5, dtype)
    return _emit(c, "mul", _emit(c, "sub", _emit(c, "expm1", x),
                                 _emit(c, "expm1", _emit(c, "neg", x))), half)


def _cosh(c, x, dtype):
    half = c.scalar(0.5, dtype)
    return _emit(c, "mul", _emit(c, "add", _emit(c, "exp", x), _emit(c, "exp", _emit(c, "neg", x))),
                 half)


def _log_of_twice(c, size, dtype):
    return _emit(c, "add", _emit(c, "log", size), c.scalar(math.log(2.0), dtype))


def _asinh(c, x, dtype):
    """sign(x) * log1p(|x| + x^2 / (1 + sqrt(1 + x^2)))."""
    one = c.scalar(1.0, dtype)
    size = magnitude(c, x, dtype)
    square = _emit(c, "mul", size, size)
    near = _emit(c, "log1p", _emit(c, "add", size, _emit(
        c, "div", square, _emit(c, "add", one, _emit(c, "sqrt", _emit(c, "add", one, square))))))
    large = _emit(c, "gt", size, c.scalar(_LARGE, dtype))
    result = _emit(c, "where", large, _log_of_twice(c, size, dtype), near)
    return _emit(c, "where", _emit(c, "lt", x, c.scalar(0.0, dtype)), _emit(c, "neg", result),
                 result)


def _acosh(c, x, dtype):
    """log1p(t + sqrt(2t + t^2)) with t = x - 1 (NaN below 1, as PyTorch)."""
    t = _emit(c, "sub", x, c.scalar(1.0, dtype))
    root = _emit(c, "sqrt", _emit(c, "add", _emit(c, "add", t, t), _emit(c, "mul", t, t)))
    near = _emit(c, "log1p", _emit(c, "add", t, root))
    large = _emit(c, "gt", x, c.scalar(_LARGE, dtype))
    return _emit(c, "where", large, _log_of_twice(c, x, dtype), near)


def _atanh(c, x, dtype):
    """log1p(2x / (1 - x)) / 2."""
    ratio = _emit(c, "div", _emit(c, "add", x, x), _emit(c, "sub", c.scalar(1.0, dtype), x))
    return _emit(c, "mul", _emit(c, "log1p", ratio), c.scalar(0.5, dtype))


def _asin(c, x, dtype):
    """atan(x / sqrt(1 - x^2)): +-pi/2 at +-1 (x / 0 is +-inf)."""
    one = c.scalar(1.0, dtype)
    root = _emit(c, "sqrt", _emit(c, "mul", _emit(c, "sub", one, x), _emit(c, "add", one, x)))
    return _emit(c, "atan", _emit(c, "div", x, root))


def _acos(c, x, dtype):
    """2 atan(sqrt((1 - x) / (1 + x))): pi at -1."""
    one = c.scalar(1.0, dtype)
    ratio = _emit(c, "div", _emit(c, "sub", one, x), _emit(c, "add", one, x))
    return _emit(c, "mul", _emit(c, "atan", _emit(c, "sqrt", ratio)), c.scalar(2.0, dtype))


def _scaled_log(base):
    def build(c, x, dtype):
        return _emit(c, "mul", _emit(c, "log", x), c.scalar(1.0 / math.log(base), dtype))

    return build


def _exp2(c, x, dtype):
    return _emit(c, "exp", _emit(c, "mul", x, c.scalar(math.log(2.0), dtype)))


def _addc(op):
    """addcmul / addcdiv: self + value * (tensor1 op tensor2)."""

    def convert(c, a):
        dtype, (base, left, right) = floating_operands(c, a, ["self", "tensor1", "tensor2"])
        product = _emit(c, op, left, right)
        value = a.get("value", 1)
        if value != 1:
            product = _emit(c, "mul", product, c.scalar(value, dtype))
        return _emit(c, "add", base, product)

    return convert


def _lerp(c, a):
    """start + weight * (end - start), as PyTorch computes it: from the end
    where |weight| >= 0.5, so that weight 1 gives `end` exactly."""
    dtype, (start, end, weight) = floating_operands(c, a, ["self", "end", "weight"])
    step = _emit(c, "sub", end, start)
    from_start = _emit(c, "add", start, _emit(c, "mul", weight, step))
    from_end = _emit(c, "sub", end, _emit(c, "mul", step, _emit(c, "sub", c.scalar(1.0, dtype),
                                                                  weight)))
    return _emit(c, "where", _emit(c, "lt", magnitude(c, weight, dtype), c.scalar(0.5, dtype)),
                 from_start, from_end)


CONVERTERS.update({
    "aten.erf": floating_op("erf"),
    "aten.sinh": in_floats(_sinh),
    "aten.cosh": in_floats(_cosh),
    "aten.asinh": in_floats(_asinh),
    "aten.acosh": in_floats(_acosh),
    "aten.atanh": in_floats(_atanh),
    "aten.asin": in_floats(_asin),
    "aten.acos": in_floats(_acos),
    "aten.log2": in_floats(_scaled_log(2.0)),
    "aten.log10": in_floats(_scaled_log(10.0)),
    "aten.exp2": in_floats(_exp2),
    "aten.addcmul": _addc("mul"),
    "aten.addcdiv": _addc("div"),
    "aten.lerp": _lerp,
})
