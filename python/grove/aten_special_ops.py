"""Converters of ATen's less common pointwise functions and reductions that
real models reach, written out in grove ops: logit, xlogy (kl_div's),
copysign, signbit, frac, logaddexp, soft and hard shrinkage, sgn, heaviside,
sinc, deg2rad/rad2deg, amin and nansum of floats, the backwards of logit and
of the shrinkages. Before, each split its graph and ran in PyTorch (the
losses that came with them are aten_loss_ops.py's). Importing this module
adds them to aten_ops.CONVERTERS."""

import math

import torch

from grove.aten_ops import CONVERTERS, _dims, magnitude, reduced_over
from grove.aten_nonfinite_ops import is_nan
from grove.aten_pointwise_ops import floating_operands, in_floats
from grove.fx_common import Unsupported

def _where(c, condition, if_true, if_false):
    return c.emit("where", [condition, if_true, if_false])


def _signbit_of(c, x, dtype):
    """Bool: x's sign bit (true for -0.0, as 1 / -0.0 is -inf)."""
    zero = c.scalar(0.0, dtype)
    reciprocal = c.emit("div", [c.scalar(1.0, dtype), x])
    return _where(c, c.emit("eq", [x, zero]), c.emit("lt", [reciprocal, zero]),
                  c.emit("lt", [x, zero]))


def _signbit(c, a):
    x = a["self"]
    dtype = c.dtype(x)
    if not dtype.is_floating_point:
        return c.emit("lt", [c.tensor(x), c.scalar(0, dtype)])
    return _signbit_of(c, c.tensor(x), dtype)


def _copysign(c, a):
    """|self| with other's sign (its sign bit: -0.0 counts as negative)."""
    dtype, (x, sign) = floating_operands(c, a, ("self", "other"))
    size = magnitude(c, x, dtype)
    return _where(c, _signbit_of(c, sign, dtype), c.emit("neg", [size]), size)


def _logit(c, a):
    """log(x / (1 - x)), x clamped to [eps, 1 - eps] where eps is given."""
    dtype, (x,) = floating_operands(c, a)
    eps = a.get("eps")
    if eps is not None:
        x = c.emit("minimum", [c.emit("maximum", [x, c.scalar(eps, dtype)]),
                               c.scalar(1.0 - eps, dtype)])
    return c.emit("log", [c.emit("div", [x, c.emit("sub", [c.scalar(1.0, dtype), x])])])


def _xlogy(c, a):
    """x log(y), 0 where x is 0, NaN where y is NaN."""
    dtype = c.result().dtype
    if not dtype.is_floating_point:
        raise Unsupported("xlogy with a %s result" % dtype)
    x, y = c.operand(a["self"], dtype), c.operand(a["other"], dtype)
    product = c.emit("mul", [x, c.emit("log", [y])])
    zero = c.scalar(0.0, dtype)
    out = _where(c, c.emit("eq", [x, zero]), zero, product)
    return _where(c, is_nan(c, y), y, out)


def _logaddexp(c, a):
    """log(e^a + e^b) as max + log1p(e^-|a - b|); a + log 2 where a == b
    (both infinite alike: a - b would be NaN)."""
    dtype, (x, y) = floating_operands(c, a, ("self", "other"))
    top = c.emit("maximum", [x, y])
    gap = magnitude(c, c.emit("sub", [x, y]), dtype)
    out = c.emit("add", [top, c.emit("log1p", [c.emit("exp", [c.emit("neg", [gap])])])])
    return _where(c, c.emit("eq", [x, y]), c.emit("add", [x, c.scalar(math.log(2.0), dtype)]),
                  out)


# PyTorch 2.x's softshrink gives NaN for NaN (x * 0 inside the band); 1.13's gave 0.
_SOFTSHRINK_KEEPS_NAN = int(torch.__version__.split(".")[0]) >= 2


def _softshrink(c, a):
    dtype, (x,) = floating_operands(c, a)
    level = float(a.get("lambd", 0.5))
    low, high = c.scalar(-level, dtype), c.scalar(level, dtype)
    zero = c.scalar(0.0, dtype)
    band = c.emit("mul", [x, zero]) if _SOFTSHRINK_KEEPS_NAN else zero
    inside = _where(c, c.emit("lt", [x, low]), c.emit("add", [x, high]), band)
    return _where(c, c.emit("gt", [x, high]), c.emit("sub", [x, high]), inside)


def _hardshrink(c, a):
    dtype, (x,) = floating_operands(c, a)
    level = float(a.get("lambd", 0.5))
    inside = c.emit("bitwise_and", [c.emit("ge", [x, c.scalar(-level, dtype)]),
                                    c.emit("le", [x, c.scalar(level, dtype)])])
    return _where(c, inside, c.scalar(0.0, dtype), x)


def _logit_backward(c, a):
    """g / (x (1 - x)); with eps, 0 where x lies outside [eps, 1 - eps]."""
    dtype, (grad, x) = floating_operands(c, a, ("grad_output", "self"))
    one = c.scalar(1.0, dtype)
    out = c.emit("div", [grad, c.emit("mul", [x, c.emit("sub", [one, x])])])
    eps = a.get("eps")
    if eps is None:
        return out
    outside = c.emit("bitwise_or", [c.emit("lt", [x, c.scalar(eps, dtype)]),
                                    c.emit("gt", [x, c.scalar(1.0 - eps, dtype)])])
    return _where(c, outside, c.scalar(0.0, dtype), out)


def _shrink_backward(grad_name):
    """soft and hard shrinkage: the gradient where |x| > lambd, else 0."""
    def convert(c, a):
        dtype, (grad, x) = floating_operands(c, a, (grad_name, "self"))
        level = c.scalar(float(a["lambd"]), dtype)
        passes = c.emit("gt", [magnitude(c, x, dtype), level])
        return _where(c, passes, grad, c.scalar(0.0, dtype))

    return convert


def _sgn(c, a):
    x = a["self"]
    if c.dtype(x).is_complex:
        raise Unsupported("sgn of complex tensors")
    return CONVERTERS["aten.sign"](c, a)


def _heaviside(c, a):
    """values where x is 0, else 1 where x > 0 and 0 elsewhere (NaN too)."""
    dtype = c.result().dtype
    x, values = c.operand(a["self"], dtype), c.operand(a["values"], dtype)
    zero = c.scalar(0, dtype)
    step = _where(c, c.emit("gt", [x, zero]), c.scalar(1, dtype), zero)
    return _where(c, c.emit("eq", [x, zero]), values, step)


def _sinc(c, x, dtype):
    scaled = c.emit("mul", [x, c.scalar(math.pi, dtype)])
    ratio = c.emit("div", [c.emit("sin", [scaled]), scaled])
    return _where(c, c.emit("eq", [x, c.scalar(0.0, dtype)]), c.scalar(1.0, dtype), ratio)


def _scaled_by(factor):
    return in_floats(lambda c, x, dtype: c.emit("mul", [x, c.scalar(factor, dtype)]))


def _frac(c, x, dtype):
    return c.emit("sub", [x, c.emit("trunc", [x])])


def _amin(c, a):
    """-amax(-x), for floats (NaN propagates, as in PyTorch)."""
    x = a["self"]
    if not c.dtype(x).is_floating_point:
        raise Unsupported("amin of %s tensors" % c.dtype(x))
    rank = len(c.shape(x))
    if rank == 0:
        return c.tensor(x)
    top = reduced_over(c, "max", c.emit("neg", [c.tensor(x)]), rank,
                       _dims(a.get("dim"), rank), bool(a.get("keepdim")))
    return c.emit("neg", [top])


def _nansum(c, a):
    """The sum with NaN counted as 0, for floats."""
    x = a["self"]
    dtype = c.dtype(x)
    if not dtype.is_floating_point or a.get("dtype") not in (None, dtype):
        raise Unsupported("nansum of %s to %s" % (dtype, a.get("dtype")))
    rank = len(c.shape(x))
    name = c.tensor(x)
    kept = _where(c, is_nan(c, name), c.scalar(0.0, dtype), name)
    if rank == 0:
        return kept
    return reduced_over(c, "sum", kept, rank, _dims(a.get("dim"), rank), bool(a.get("keepdim")))


CONVERTERS.update({
    "aten.signbit": _signbit,
    "aten.copysign": _copysign,
    "aten.logit": _logit,
    "aten.xlogy": _xlogy,
    "aten.logaddexp": _logaddexp,
    "aten.softshrink": _softshrink,
    "aten.hardshrink": _hardshrink,
    "aten.logit_backward": _logit_backward,
    "aten.softshrink_backward": _shrink_backward("grad_output"),
    "aten.hardshrink_backward": _shrink_backward("grad_out"),
    "aten.sgn": _sgn,
    "aten.heaviside": _heaviside,
    "aten.sinc": in_floats(_sinc),
    "aten.deg2rad": _scaled_by(math.pi / 180.0),
    "aten.rad2deg": _scaled_by(180.0 / math.pi),
    "aten.frac": in_floats(_frac),
    "aten.amin": _amin,
    "aten.nansum": _nansum,
})
