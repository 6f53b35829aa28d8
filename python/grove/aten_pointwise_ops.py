"""Converters of ATen's pointwise math beyond aten_ops.py: trigonometry,
log1p/expm1, rounding, clamp, maximum/minimum, sign, remainder/fmod, the
gated and parametric activations (glu, prelu), and the bitwise and logical
ops on bool and integer tensors. Importing this module
adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported, dtype_name, op_name


def floating_operands(c, a, names=("self",)):
    """(the result's dtype, the named operands cast to it) for an op whose
    result is a float: an integer operand is cast first (torch.sin of an int
    tensor is a float tensor); Unsupported for another result."""
    dtype = c.result().dtype
    if not dtype.is_floating_point:
        raise Unsupported("%s with a %s result" % (op_name(c.node.target), dtype))
    return dtype, [c.operand(a[name], dtype) for name in names]


def in_floats(build):
    """The converter of build(c, x, dtype) over the op's one operand x, a
    float of the result's dtype (floating_operands)."""

    def convert(c, a):
        dtype, (x,) = floating_operands(c, a)
        return build(c, x, dtype)

    convert.__module__ = build.__module__  # the op's row in tools/op_table.py
    return convert


def floating_op(op):
    """An op of grove's that takes floats (floating_operands)."""
    return in_floats(lambda c, x, dtype: c.emit(op, [x]))


_tan = in_floats(lambda c, x, dtype: c.emit("div", [c.emit("sin", [x]), c.emit("cos", [x])]))


def _rounding(op):
    """floor/ceil/round/trunc: the identity on integers."""

    def convert(c, a):
        x = a["self"]
        dtype = c.dtype(x)
        if not dtype.is_floating_point:
            return c.tensor(x)
        decimals = a.get("decimals") or 0
        if decimals == 0:
            return c.emit(op, [c.tensor(x)])
        # PyTorch's round(x, decimals): round(x * 10^d) / 10^d.
        scale = c.scalar(10.0 ** decimals, dtype)
        return c.emit("div", [c.emit(op, [c.emit("mul", [c.tensor(x), scale])]), scale])

    return convert


def _elementwise_extreme(op):
    def convert(c, a):
        dtype = c.result().dtype
        if dtype == torch.bool:
            raise Unsupported("%s of bool tensors" % op)
        return c.emit(op, [c.operand(a["self"], dtype), c.operand(a["other"], dtype)])

    return convert


def _clamp(c, a):
    """clamp, clamp_min, clamp_max, hardtanh: maximum then minimum."""
    dtype = c.result().dtype
    if dtype == torch.bool:
        raise Unsupported("clamp of bool tensors")
    name = op_name(c.node.target)
    low = a.get("min", a.get("min_val"))
    high = a.get("max", a.get("max_val"))
    if name == "aten.clamp_min":
        high = None
    if name == "aten.clamp_max":
        low = None
    x = c.operand(a["self"], dtype)
    if low is not None:
        x = c.emit("maximum", [x, c.operand(low, dtype)])
    if high is not None:
        x = c.emit("minimum", [x, c.operand(high, dtype)])
    return x


def _sign(c, a):
    x = a["self"]
    dtype = c.dtype(x)
    if dtype == torch.bool:
        return c.tensor(x)
    name = c.tensor(x)
    zero, one, minus_one = (c.scalar(v, dtype) for v in (0, 1, -1))
    negative = c.emit("where", [c.emit("lt", [name, zero]), minus_one, zero])
    return c.emit("where", [c.emit("gt", [name, zero]), one, negative])


def _modulo(rounding):
    """remainder (sign of the divisor: a - floor(a/b) b) and fmod (sign of
    the dividend: a - trunc(a/b) b): grove's integer ops, written out on floats."""

    def convert(c, a):
        dtype = c.result().dtype
        x = c.operand(a["self"], dtype)
        y = c.operand(a["other"], dtype)
        if dtype == torch.bool:
            raise Unsupported("remainder of bools")
        if not dtype.is_floating_point:
            return c.emit("remainder" if rounding == "floor" else "fmod", [x, y])
        quotient = c.emit(rounding, [c.emit("div", [x, y])])
        return c.emit("sub", [x, c.emit("mul", [quotient, y])])

    return convert


def _bitwise(op):
    def convert(c, a):
        dtype = c.result().dtype
        if dtype.is_floating_point:
            raise Unsupported("%s of %s tensors" % (op, dtype))
        return c.emit(op, [c.operand(a["self"], dtype), c.operand(a["other"], dtype)])

    return convert


def _bitwise_not(c, a):
    x = a["self"]
    if c.dtype(x).is_floating_point:
        raise Unsupported("bitwise_not of a %s tensor" % c.dtype(x))
    return c.emit("bitwise_not", [c.tensor(x)])


def _as_bool(c, arg):
    if isinstance(arg, torch.fx.Node) and c.dtype(arg) == torch.bool:
        return c.tensor(arg)
    if not isinstance(arg, torch.fx.Node):
        return c.scalar(bool(arg), torch.bool)
    dtype = c.dtype(arg)
    return c.emit("ne", [c.tensor(arg), c.scalar(0, dtype)])


def _logical(op):
    def convert(c, a):
        if c.result().dtype != torch.bool:
            raise Unsupported("logical op with a %s result" % c.result().dtype)
        return c.emit(op, [_as_bool(c, a["self"]), _as_bool(c, a["other"])])

    return convert


def _logical_not(c, a):
    if c.result().dtype != torch.bool:
        raise Unsupported("logical_not with a %s result" % c.result().dtype)
    return c.emit("bitwise_not", [_as_bool(c, a["self"])])


def _copy(c, a):
    """copy (copy_ of an intermediate, functional): src in self's dtype and shape."""
    result = c.result()
    name = c.operand(a["src"], result.dtype)
    if list(c.shape(a["src"])) != list(result.shape):
        # Broadcast by combining with zeros (False) of the result's shape.
        zeros = c.emit("full", [], {"value": 0.0, "shape": list(result.shape),
                                    "dtype": dtype_name(result.dtype)})
        name = c.emit("bitwise_or" if result.dtype == torch.bool else "add", [name, zeros])
    return name


def _hard_gate(c, x, dtype):
    """min(max(x + 3, 0), 6): hardsigmoid's and hardswish's gate before / 6."""
    shifted = c.emit("add", [x, c.scalar(3.0, dtype)])
    return c.emit("minimum", [c.emit("maximum", [shifted, c.scalar(0.0, dtype)]),
                              c.scalar(6.0, dtype)])


def _hardsigmoid(c, a):
    """hardsigmoid: min(max(x + 3, 0), 6) / 6, in PyTorch's order."""
    dtype = c.result().dtype
    gate = _hard_gate(c, c.operand(a["self"], dtype), dtype)
    return c.emit("div", [gate, c.scalar(6.0, dtype)])


def _hardswish(c, a):
    """hardswish: x min(max(x + 3, 0), 6) / 6, in PyTorch's order."""
    dtype = c.result().dtype
    x = c.operand(a["self"], dtype)
    return c.emit("div", [c.emit("mul", [x, _hard_gate(c, x, dtype)]), c.scalar(6.0, dtype)])


def _leaky_relu(c, a):
    """x > 0 ? x : x * negative_slope."""
    dtype = c.result().dtype
    x = c.operand(a["self"], dtype)
    slope = float(a.get("negative_slope", 0.01))
    return c.emit("where", [c.emit("gt", [x, c.scalar(0.0, dtype)]), x,
                            c.emit("mul", [x, c.scalar(slope, dtype)])])


def _elu(c, a):
    """x > 0 ? x scale : expm1(x input_scale) alpha scale (ELU, SELU, CELU)."""
    dtype = c.result().dtype
    x = c.operand(a["self"], dtype)
    alpha, scale = float(a.get("alpha", 1.0)), float(a.get("scale", 1.0))
    input_scale = float(a.get("input_scale", 1.0))
    negative = c.emit("mul", [c.emit("expm1", [c.emit("mul", [x, c.scalar(input_scale, dtype)])]),
                              c.scalar(alpha * scale, dtype)])
    return c.emit("where", [c.emit("le", [x, c.scalar(0.0, dtype)]), negative,
                            c.emit("mul", [x, c.scalar(scale, dtype)])])


def _celu(c, a):
    """CELU: ELU with scale 1 and input scale 1 / alpha."""
    alpha = float(a.get("alpha", 1.0))
    return _elu(c, {"self": a["self"], "alpha": alpha, "scale": 1.0, "input_scale": 1.0 / alpha})


def _softplus(c, a):
    """x beta > threshold ? x : log1p(exp(x beta)) / beta."""
    dtype = c.result().dtype
    x = c.operand(a["self"], dtype)
    beta, threshold = float(a.get("beta", 1.0)), float(a.get("threshold", 20.0))
    scaled = c.emit("mul", [x, c.scalar(beta, dtype)])
    soft = c.emit("div", [c.emit("log1p", [c.emit("exp", [scaled])]), c.scalar(beta, dtype)])
    return c.emit("where", [c.emit("gt", [scaled, c.scalar(threshold, dtype)]), x, soft])


def _mish(c, a):
    """x tanh(log1p(exp(x)))."""
    dtype = c.result().dtype
    x = c.operand(a["self"], dtype)
    return c.emit("mul", [x, c.emit("tanh", [c.emit("log1p", [c.emit("exp", [x])])])])


def _zero(c, a):
    result = c.result()
    return c.emit("full", [], {"value": 0.0, "shape": list(result.shape),
                               "dtype": dtype_name(result.dtype)})


def _glu_halves(c, x, dim, what):
    """(dim, x's first half, its second half) along glu's dim."""
    shape = c.shape(x)
    dim %= len(shape)
    if not c.dtype(x).is_floating_point or shape[dim] % 2:
        raise Unsupported("%s of a %s tensor of %d along dim %d" % (what, c.dtype(x), shape[dim],
                                                                   dim))
    half = shape[dim] // 2
    name = c.tensor(x)
    return (dim, c.emit("slice", [name], {"dim": dim, "start": 0, "end": half}),
            c.emit("slice", [name], {"dim": dim, "start": half, "end": 2 * half}))


def _glu(c, a):
    """glu(x, dim): the first half times the sigmoid of the second."""
    _, first, second = _glu_halves(c, a["self"], a.get("dim", -1), "glu")
    return c.emit("mul", [first, c.emit("sigmoid", [second])])


def _glu_backward(c, a):
    """glu's gradient: g * sigmoid(b) for the first half a, and
    g * a * sigmoid(b) * (1 - sigmoid(b)) for the second half b."""
    dim, first, second = _glu_halves(c, a["self"], a.get("dim", -1), "glu_backward")
    grad = c.tensor(a["grad_output"])
    gate = c.emit("sigmoid", [second])
    through_first = c.emit("mul", [grad, gate])
    slope = c.emit("mul", [gate, c.emit("sub", [c.scalar(1.0, c.dtype(a["self"])), gate])])
    through_second = c.emit("mul", [c.emit("mul", [grad, first]), slope])
    return c.emit("concat", [through_first, through_second], {"dim": dim})


def _prelu(c, a):
    """prelu and _prelu_kernel: x where x > 0, else weight * x, the weight one
    value or one per channel (dim 1), or already shaped to broadcast."""
    x, weight = a["self"], a["weight"]
    dtype = c.result().dtype
    if not dtype.is_floating_point:
        raise Unsupported("prelu with a %s result" % dtype)
    shape, count = c.shape(x), c.value(weight).numel()
    w = c.operand(weight, dtype)
    if len(c.shape(weight)) != len(shape):
        if count == 1:
            w = c.emit("reshape", [w], {"shape": [1] * len(shape)})
        elif len(shape) >= 2 and count == shape[1]:
            w = c.emit("reshape", [w], {"shape": [1, count] + [1] * (len(shape) - 2)})
        else:
            raise Unsupported("prelu with %d weights for shape %s" % (count, shape))
    name = c.operand(x, dtype)
    positive = c.emit("gt", [name, c.scalar(0, dtype)])
    return c.emit("where", [positive, name, c.emit("mul", [name, w])])


CONVERTERS.update({
    "aten.glu": _glu,
    "aten.glu_backward": _glu_backward,
    "aten.prelu": _prelu,
    "aten._prelu_kernel": _prelu,
    "aten.copy": _copy,
    "aten.zero": _zero,
    "aten.sin": floating_op("sin"),
    "aten.cos": floating_op("cos"),
    "aten.tan": _tan,
    "aten.atan": floating_op("atan"),
    "aten.log1p": floating_op("log1p"),
    "aten.expm1": floating_op("expm1"),
    "aten.floor": _rounding("floor"),
    "aten.ceil": _rounding("ceil"),
    "aten.round": _rounding("round"),
    "aten.trunc": _rounding("trunc"),
    "aten.fix": _rounding("trunc"),
    "aten.maximum": _elementwise_extreme("maximum"),
    "aten.minimum": _elementwise_extreme("minimum"),
    "aten.clamp": _clamp,
    "aten.clip": _clamp,
    "aten.clamp_min": _clamp,
    "aten.clamp_max": _clamp,
    "aten.hardtanh": _clamp,
    "aten.hardsigmoid": _hardsigmoid,
    "aten.hardswish": _hardswish,
    "aten.leaky_relu": _leaky_relu,
    "aten.elu": _elu,
    "aten.celu": _celu,
    "aten.softplus": _softplus,
    "aten.mish": _mish,
    "aten.sign": _sign,
    "aten.remainder": _modulo("floor"),
    "aten.fmod": _modulo("trunc"),
    "aten.bitwise_and": _bitwise("bitwise_and"),
    "aten.bitwise_or": _bitwise("bitwise_or"),
    "aten.bitwise_xor": _bitwise("bitwise_xor"),
    "aten.__and__": _bitwise("bitwise_and"),
    "aten.__or__": _bitwise("bitwise_or"),
    "aten.__xor__": _bitwise("bitwise_xor"),
    "aten.bitwise_not": _bitwise_not,
    "aten.logical_and": _logical("bitwise_and"),
    "aten.logical_or": _logical("bitwise_or"),
    "aten.logical_xor": _logical("bitwise_xor"),
    "aten.logical_not": _logical_not,
})
