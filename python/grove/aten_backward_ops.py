"""Converters of the ATen ops a backward graph holds (what AOTAutograd's
partition hands the backward compiler, or make_fx of a function calling
torch.autograd.grad), written out in grove ops (the losses' backwards are
with their forwards in aten_loss_ops.py). Importing this module adds them to
aten_ops.CONVERTERS."""

import functools
import math

import torch
import torch.fx

from grove.aten_index_ops import one_hot_rows
from grove.aten_layout_ops import strided_slice_backward
from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported, dtype_name, node_arguments, op_name


def _native_dropout_backward(c, a):
    """native_dropout_backward(grad, mask, scale): the gradient where the
    forward's mask kept the element, times the forward's scale, else 0 (the
    mask is the forward's saved output, drawn by PyTorch: Note [Random
    draws are never constants])."""
    grad, mask = a["grad_output"], a["mask"]
    dtype = c.result().dtype
    keep = c.operand(mask, torch.bool)
    scaled = c.emit("mul", [c.operand(grad, dtype), c.scalar(float(a["scale"]), dtype)])
    return c.emit("where", [keep, scaled, c.scalar(0.0, dtype)])


def _threshold_backward(c, a):
    """grad where self > threshold, else 0 (relu's backward reads its output)."""
    dtype = c.result().dtype
    x = a["self"]
    at_or_below = c.emit("le", [c.tensor(x), c.scalar(a["threshold"], c.dtype(x))])
    return c.emit("where", [at_or_below, c.scalar(0.0, dtype), c.operand(a["grad_output"], dtype)])


def _gelu_backward(c, a):
    dtype = c.result().dtype
    g, x = c.operand(a["grad_output"], dtype), c.operand(a["self"], dtype)
    if a.get("approximate", "none") == "tanh":
        return c.emit("gelu_backward", [g, x])  # grove's gelu is the tanh form
    if not c.importer.has_erf:
        raise Unsupported("gelu_backward(approximate='none') needs erf, which this grove lacks")
    # d/dx [x Phi(x)] = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
    cdf = c.emit("mul", [c.emit("add", [c.emit("erf", [c.emit(
        "mul", [x, c.scalar(1 / math.sqrt(2.0), dtype)])]), c.scalar(1.0, dtype)]),
        c.scalar(0.5, dtype)])
    square = c.emit("mul", [x, x])
    pdf = c.emit("mul", [c.emit("exp", [c.emit("mul", [square, c.scalar(-0.5, dtype)])]),
                         c.scalar(1 / math.sqrt(2 * math.pi), dtype)])
    return c.emit("mul", [g, c.emit("add", [cdf, c.emit("mul", [x, pdf])])])


def _sigmoid_backward(c, a):
    dtype = c.result().dtype
    y = c.operand(a["output"], dtype)
    one_minus = c.emit("sub", [c.scalar(1.0, dtype), y])
    return c.emit("mul", [c.operand(a["grad_output"], dtype), c.emit("mul", [y, one_minus])])


def _tanh_backward(c, a):
    dtype = c.result().dtype
    y = c.operand(a["output"], dtype)
    one_minus = c.emit("sub", [c.scalar(1.0, dtype), c.emit("mul", [y, y])])
    return c.emit("mul", [c.operand(a["grad_output"], dtype), one_minus])


def _silu_backward(c, a):
    """g s (1 + x (1 - s)), s = sigmoid(x)."""
    dtype = c.result().dtype
    x = c.operand(a["self"], dtype)
    s = c.emit("sigmoid", [x])
    inner = c.emit("add", [c.scalar(1.0, dtype),
                           c.emit("mul", [x, c.emit("sub", [c.scalar(1.0, dtype), s])])])
    return c.emit("mul", [c.operand(a["grad_output"], dtype), c.emit("mul", [s, inner])])


@functools.lru_cache(maxsize=None)
def _hard_corners():
    """Which side of -3 and 3 PyTorch's hardswish and hardsigmoid gradients
    put the corners on, asked of the PyTorch in use (1.13's hardswish gradient
    is g / 2 at -3 and 3g / 2 at 3; 2.x's 0 and g): (hardswish's middle slope
    includes -3, includes 3; hardsigmoid's g / 6 includes -3, includes 3)."""
    corners = torch.tensor([-3.0, 3.0])
    ones = torch.ones(2)
    swish = torch.ops.aten.hardswish_backward(ones, corners).tolist()
    sigmoid = torch.ops.aten.hardsigmoid_backward(ones, corners).tolist()
    return (swish[0] != 0.0, swish[1] != 1.0, sigmoid[0] != 0.0, sigmoid[1] != 0.0)


def _inside(c, x, dtype, low_closed, high_closed):
    """-3 < x < 3, each end closed where asked (a bool mask)."""
    low = c.emit("ge" if low_closed else "gt", [x, c.scalar(-3.0, dtype)])
    high = c.emit("le" if high_closed else "lt", [x, c.scalar(3.0, dtype)])
    return c.emit("bitwise_and", [low, high])


def _hardswish_backward(c, a):
    """g (x / 3 + 1/2) between -3 and 3, g above, 0 below; the corners as
    the PyTorch in use puts them (_hard_corners)."""
    dtype = c.result().dtype
    low_closed, high_closed, _, _ = _hard_corners()
    x = c.operand(a["self"], dtype)
    g = c.operand(a["grad_output"], dtype)
    slope = c.emit("add", [c.emit("div", [x, c.scalar(3.0, dtype)]), c.scalar(0.5, dtype)])
    below = c.emit("lt" if low_closed else "le", [x, c.scalar(-3.0, dtype)])
    return c.emit("where", [_inside(c, x, dtype, low_closed, high_closed),
                            c.emit("mul", [g, slope]),
                            c.emit("where", [below, c.scalar(0.0, dtype), g])])


def _hardsigmoid_backward(c, a):
    """g / 6 between -3 and 3, else 0; the corners as the PyTorch in use
    puts them (_hard_corners)."""
    dtype = c.result().dtype
    _, _, low_closed, high_closed = _hard_corners()
    x = c.operand(a["self"], dtype)
    scaled = c.emit("mul", [c.operand(a["grad_output"], dtype), c.scalar(1.0 / 6.0, dtype)])
    return c.emit("where", [_inside(c, x, dtype, low_closed, high_closed), scaled,
                            c.scalar(0.0, dtype)])


def _leaky_relu_backward(c, a):
    """x > 0 ? g : g negative_slope."""
    dtype = c.result().dtype
    x = c.operand(a["self"], dtype)
    g = c.operand(a["grad_output"], dtype)
    return c.emit("where", [c.emit("gt", [x, c.scalar(0.0, dtype)]), g,
                            c.emit("mul", [g, c.scalar(float(a["negative_slope"]), dtype)])])


def _elu_backward(c, a):
    """g scale above 0; below, from the input: g input_scale alpha scale
    exp(x input_scale), from the result y: g input_scale (y + alpha scale)."""
    dtype = c.result().dtype
    x = c.operand(a["self_or_result"], dtype)
    g = c.operand(a["grad_output"], dtype)
    alpha, scale = float(a["alpha"]), float(a["scale"])
    input_scale = float(a["input_scale"])
    if a["is_result"]:
        negative = c.emit("mul", [c.emit("mul", [g, c.scalar(input_scale, dtype)]),
                                  c.emit("add", [x, c.scalar(alpha * scale, dtype)])])
    else:
        grown = c.emit("exp", [c.emit("mul", [x, c.scalar(input_scale, dtype)])])
        negative = c.emit("mul", [c.emit("mul", [g, c.scalar(input_scale * alpha * scale,
                                                             dtype)]), grown])
    return c.emit("where", [c.emit("le", [x, c.scalar(0.0, dtype)]), negative,
                            c.emit("mul", [g, c.scalar(scale, dtype)])])


def _softplus_backward(c, a):
    """x beta > threshold ? g : g z / (z + 1), z = exp(x beta)."""
    dtype = c.result().dtype
    x = c.operand(a["self"], dtype)
    g = c.operand(a["grad_output"], dtype)
    scaled = c.emit("mul", [x, c.scalar(float(a["beta"]), dtype)])
    z = c.emit("exp", [scaled])
    inside = c.emit("div", [c.emit("mul", [g, z]), c.emit("add", [z, c.scalar(1.0, dtype)])])
    return c.emit("where", [c.emit("gt", [scaled, c.scalar(float(a["threshold"]), dtype)]), g,
                            inside])


def _mish_backward(c, a):
    """g (t + x s (1 - t^2)), s = sigmoid(x), t = tanh(softplus(x))."""
    dtype = c.result().dtype
    x = c.operand(a["self"], dtype)
    g = c.operand(a["grad_output"], dtype)
    s = c.emit("sigmoid", [x])
    t = c.emit("tanh", [c.emit("log1p", [c.emit("exp", [x])])])
    one_minus = c.emit("sub", [c.scalar(1.0, dtype), c.emit("mul", [t, t])])
    return c.emit("mul", [g, c.emit("add", [t, c.emit("mul", [c.emit("mul", [x, s]),
                                                              one_minus])])])


def _hardtanh_backward(c, a):
    """g strictly between min_val and max_val, else 0 (ReLU6's gradient)."""
    dtype = c.result().dtype
    x = c.operand(a["self"], dtype)
    outside = c.emit("bitwise_or", [c.emit("le", [x, c.scalar(float(a["min_val"]), dtype)]),
                                    c.emit("ge", [x, c.scalar(float(a["max_val"]), dtype)])])
    return c.emit("where", [outside, c.scalar(0.0, dtype), c.operand(a["grad_output"], dtype)])


def _softmax_backward(c, a):
    """y (g - sum(g y, dim)) for y = softmax(x)."""
    dtype = c.dtype(a["output"])
    y = c.tensor(a["output"])
    g = c.operand(a["grad_output"], dtype)
    dim = a["dim"] % len(c.shape(a["output"]))
    dot = c.emit("sum", [c.emit("mul", [g, y])], {"dims": [dim], "keepdim": 1})
    result = c.emit("mul", [y, c.emit("sub", [g, dot])])
    return c.cast(result, dtype, c.result().dtype)


def _log_softmax_backward(c, a):
    """g - exp(y) sum(g, dim) for y = log_softmax(x)."""
    dtype = c.dtype(a["output"])
    y = c.tensor(a["output"])
    g = c.operand(a["grad_output"], dtype)
    dim = a["dim"] % len(c.shape(a["output"]))
    total = c.emit("sum", [g], {"dims": [dim], "keepdim": 1})
    result = c.emit("sub", [g, c.emit("mul", [c.emit("exp", [y]), total])])
    return c.cast(result, dtype, c.result().dtype)


# Note [Layer-norm input gradient in one kernel]: native_layer_norm_backward
# reads the forward's saved mean and rstd but not its eps. Where the forward
# is in the same graph (make_fx of a whole training step, grove/step.py) and
# normalized the same input, its eps is known and the input gradient is
# grove's layer_norm_backward op (one row kernel that recomputes the row
# statistics from x the way layer_norm does, Note [Layer-norm input gradient]
# in compiler/ops/reduction_ops.cc) instead of the five kernels its primitives
# lower to; the weight and bias gradients still read the saved statistics.
# A backward graph of its own (AOTAutograd's partition: the statistics are
# placeholders) keeps the primitives. Tests: StepTest.
# test_layer_norm_input_gradient_is_one_kernel_in_a_whole_step
# (tests/python/step_test.py) and the whole-step losses against PyTorch.
def _forward_eps(a):
    """The eps of the native_layer_norm whose saved mean and rstd a
    native_layer_norm_backward's arguments `a` read, where that forward is a
    node of the same graph over the same input; else None."""
    sources = []
    for name, position in (("mean", 1), ("rstd", 2)):
        value = a.get(name)
        if (not isinstance(value, torch.fx.Node) or op_name(value.target) != "getitem"
                or value.args[1] != position):
            return None
        sources.append(value.args[0])
    forward = sources[0]
    if (forward is not sources[1] or not isinstance(forward, torch.fx.Node)
            or op_name(forward.target) != "aten.native_layer_norm"
            or forward.args[0] is not a["input"]):
        return None
    eps = node_arguments(forward).get("eps")
    return float(eps) if isinstance(eps, (int, float)) and eps > 0 else None


def _layer_norm_backward(c, a):
    """native_layer_norm_backward from the forward's saved mean and rstd:
    xhat = (x - mean) rstd, gw = g weight,
    dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), dweight = sum(g xhat),
    dbias = sum(g), the sums over every dim but the normalized one."""
    x = a["input"]
    normalized = list(a["normalized_shape"])
    if len(normalized) != 1:
        raise Unsupported("layer_norm backward over %d dims" % len(normalized))
    shape = c.shape(x)
    rank = len(shape)
    dtype = c.dtype(x)
    mask = list(a.get("output_mask") or [True, True, True])
    g = c.operand(a["grad_out"], dtype)
    xhat = c.emit("mul", [c.emit("sub", [c.tensor(x), c.operand(a["mean"], dtype)]),
                          c.operand(a["rstd"], dtype)])
    batch_dims = list(range(rank - 1))
    results = [None, None, None]
    eps = _forward_eps(a)
    weight = a.get("weight")
    if mask[0] and eps is not None and (weight is None or c.dtype(weight) == dtype):
        # Note [Layer-norm input gradient in one kernel]
        weight_name = c.tensor(weight) if weight is not None else c.emit(
            "full", [], {"value": 1.0, "shape": [shape[-1]], "dtype": dtype_name(dtype)})
        results[0] = c.emit("layer_norm_backward", [g, c.tensor(x), weight_name], {"eps": eps})
    elif mask[0]:
        gw = c.emit("mul", [g, c.tensor(weight)]) if weight is not None else g
        mean_gw = c.emit("mean", [gw], {"dims": [rank - 1], "keepdim": 1})
        mean_gw_xhat = c.emit("mean", [c.emit("mul", [gw, xhat])],
                              {"dims": [rank - 1], "keepdim": 1})
        inner = c.emit("sub", [c.emit("sub", [gw, mean_gw]), c.emit("mul", [xhat, mean_gw_xhat])])
        results[0] = c.emit("mul", [c.operand(a["rstd"], dtype), inner])
    if mask[1] and a.get("weight") is not None:
        results[1] = c.emit("sum", [c.emit("mul", [g, xhat])], {"dims": batch_dims, "keepdim": 0})
    if mask[2] and a.get("bias") is not None:
        results[2] = c.emit("sum", [g], {"dims": batch_dims, "keepdim": 0})
    return tuple(results)


def _embedding_backward(c, a):
    """The rows of grad_output summed into the table rows their indices name,
    as one_hot(indices)^T @ grad (padding_idx rows get nothing)."""
    if a.get("scale_grad_by_freq"):
        raise Unsupported("embedding backward with scale_grad_by_freq")
    grad = a["grad_output"]
    dtype = c.result().dtype
    width = c.shape(grad)[-1]
    count = c.value(a["indices"]).numel()
    padding = a.get("padding_idx")
    picks = one_hot_rows(c, a["indices"], a["num_weights"], dtype,
                          padding if padding is not None and padding >= 0 else None)
    rows = c.emit("reshape", [c.operand(grad, dtype)], {"shape": [count, width]})
    return c.emit("matmul", [c.emit("transpose", [picks], {"dim0": 0, "dim1": 1}), rows])


def _pad_into(c, grad_name, sizes, dim, start, end, dtype):
    """grad placed at [start, end) of `dim` in zeros of `sizes` (a slice's backward)."""
    parts = []
    if start > 0:
        shape = list(sizes)
        shape[dim] = start
        parts.append(c.emit("full", [], {"value": 0.0, "shape": shape, "dtype": dtype_name(dtype)}))
    parts.append(grad_name)
    if end < sizes[dim]:
        shape = list(sizes)
        shape[dim] = sizes[dim] - end
        parts.append(c.emit("full", [], {"value": 0.0, "shape": shape, "dtype": dtype_name(dtype)}))
    if len(parts) == 1:
        return grad_name
    return c.emit("concat", parts, {"dim": dim})


def _slice_backward(c, a):
    sizes = list(a["input_sizes"])
    if a.get("step", 1) != 1:
        dtype = c.result().dtype
        return strided_slice_backward(c, c.operand(a["grad_output"], dtype), sizes, a["dim"],
                                      a["start"], a["end"], a["step"], dtype)
    dim = a["dim"] % len(sizes)
    start, end = a["start"], a["end"]
    start = max(start + sizes[dim] if start < 0 else start, 0)
    end = min(end + sizes[dim] if end < 0 else end, sizes[dim])
    dtype = c.result().dtype
    return _pad_into(c, c.operand(a["grad_output"], dtype), sizes, dim, start, end, dtype)


def _select_backward(c, a):
    sizes = list(a["input_sizes"])
    dim = a["dim"] % len(sizes)
    index = a["index"] % sizes[dim]
    dtype = c.result().dtype
    shape = list(sizes)
    shape[dim] = 1
    grad = c.emit("reshape", [c.operand(a["grad_output"], dtype)], {"shape": shape})
    return _pad_into(c, grad, sizes, dim, index, index + 1, dtype)


BACKWARD_CONVERTERS = {
    "aten.threshold_backward": _threshold_backward,
    "aten.native_dropout_backward": _native_dropout_backward,
    "aten.gelu_backward": _gelu_backward,
    "aten.sigmoid_backward": _sigmoid_backward,
    "aten.tanh_backward": _tanh_backward,
    "aten.silu_backward": _silu_backward,
    "aten.hardswish_backward": _hardswish_backward,
    "aten.hardsigmoid_backward": _hardsigmoid_backward,
    "aten.leaky_relu_backward": _leaky_relu_backward,
    "aten.elu_backward": _elu_backward,
    "aten.softplus_backward": _softplus_backward,
    "aten.mish_backward": _mish_backward,
    "aten.hardtanh_backward": _hardtanh_backward,
    "aten._softmax_backward_data": _softmax_backward,
    "aten._log_softmax_backward_data": _log_softmax_backward,
    "aten.native_layer_norm_backward": _layer_norm_backward,
    "aten.embedding_dense_backward": _embedding_backward,
    "aten.slice_backward": _slice_backward,
    "aten.select_backward": _select_backward,
}

CONVERTERS.update(BACKWARD_CONVERTERS)
