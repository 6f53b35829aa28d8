"""Converters of ATen's batch norm: inference (a per-channel scale and shift),
training without running statistics or with them returned (PyTorch 2.x's
functional form), and the backward. Importing this module adds them to
aten_ops.CONVERTERS."""

from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported, dtype_name, op_name


def _per_channel(c, name, shape):
    return c.emit("reshape", [name], {"shape": [shape[1]] + [1] * (len(shape) - 2)})


def _reduced_dims(shape):
    return [0] + list(range(2, len(shape)))


def _eps(a):
    return float(a.get("eps", a.get("epsilon")))


def _batch_statistics(c, x, shape, dtype, eps):
    """mean and biased variance over every dim but the channels, and invstd."""
    dims = _reduced_dims(shape)
    name = c.tensor(x)
    mean = c.emit("mean", [name], {"dims": dims, "keepdim": 0})
    centered = c.emit("sub", [name, _per_channel(c, mean, shape)])
    var = c.emit("mean", [c.emit("mul", [centered, centered])], {"dims": dims, "keepdim": 0})
    invstd = c.emit("rsqrt", [c.emit("add", [var, c.scalar(eps, dtype)])])
    return mean, var, invstd


def _normalized(c, a, x, mean, invstd, shape, dtype):
    """(x - mean) * invstd * weight + bias, as x * scale + shift per channel."""
    scale = invstd
    if a.get("weight") is not None:
        scale = c.emit("mul", [scale, c.operand(a["weight"], dtype)])
    shift = c.emit("neg", [c.emit("mul", [mean, scale])])
    if a.get("bias") is not None:
        shift = c.emit("add", [shift, c.operand(a["bias"], dtype)])
    return c.emit("add", [c.emit("mul", [c.tensor(x), _per_channel(c, scale, shape)]),
                          _per_channel(c, shift, shape)])


def _inference_normalized(c, a, x, shape, dtype):
    """(x - mean) * (rsqrt(var + eps) * weight) + bias with running statistics,
    each per-channel operand viewed as [C, 1, ...] before any arithmetic, so
    the whole batch norm (and what follows it elementwise) is one kernel
    (Note [Small values computed per element], compiler/lowering/fusion.cc)."""
    def per_channel(name):
        return _per_channel(c, c.operand(a[name], dtype), shape)

    scale = c.emit("rsqrt", [c.emit("add", [per_channel("running_var"),
                                            c.scalar(_eps(a), dtype)])])
    if a.get("weight") is not None:
        scale = c.emit("mul", [scale, per_channel("weight")])
    out = c.emit("mul", [c.emit("sub", [c.tensor(x), per_channel("running_mean")]), scale])
    if a.get("bias") is not None:
        out = c.emit("add", [out, per_channel("bias")])
    return out


def _placeholder(c, value):
    try:
        dtype = dtype_name(value.dtype)
    except Unsupported:
        return None
    return c.emit("full", [], {"value": 0.0, "shape": list(value.shape), "dtype": dtype})


def _batch_norm(c, a):
    x = a["input"]
    shape, dtype = c.shape(x), c.dtype(x)
    name = op_name(c.node.target)
    training = a.get("training", name == "aten._native_batch_norm_legit_functional")
    mean, var = a.get("running_mean"), a.get("running_var")
    if not training:
        if mean is None or var is None:
            raise Unsupported("batch norm in inference without running statistics")
        out = _inference_normalized(c, a, x, shape, dtype)
        # The saved statistics of an inference batch norm are placeholders
        # (empty on the CPU) that its backward does not read.
        return (out,) + tuple(_placeholder(c, value) for value in c.result()[1:])
    cudnn = name == "aten.cudnn_batch_norm"  # a 4th result: cudnn's reserve space
    functional = name == "aten._native_batch_norm_legit_functional"
    in_place = mean is not None and not functional
    if in_place and not _written_in_place_here(c, mean, var, dtype):
        # The op writes the running statistics in place: an input mutation.
        raise Unsupported("batch norm training that updates running statistics in place")
    batch_mean, batch_var, invstd = _batch_statistics(c, x, shape, dtype, _eps(a))
    out = _normalized(c, a, x, batch_mean, invstd, shape, dtype)
    tail = (None,) if cudnn else ()
    if mean is None:
        return (out, batch_mean, invstd) + tail
    # PyTorch's running variance is the unbiased one.
    count = c.value(x).numel() // shape[1]
    momentum = float(a["momentum"] if "momentum" in a else a["exponential_average_factor"])
    unbiased = c.emit("mul", [batch_var, c.scalar(count / max(count - 1, 1), dtype)])

    def updated(running, batch):
        kept = c.emit("mul", [c.operand(running, dtype), c.scalar(1 - momentum, dtype)])
        return c.emit("add", [kept, c.emit("mul", [batch, c.scalar(momentum, dtype)])])

    new_mean, new_var = updated(mean, batch_mean), updated(var, unbiased)
    if not in_place:
        return (out, batch_mean, invstd, new_mean, new_var)
    # Note [Writes into graph inputs]: native_batch_norm and cudnn_batch_norm,
    # whose schemas do not say they write them, so functionalization leaves
    # them be (2.x's _native_batch_norm_legit arrives functionalized).
    c.emit("copy_into", [c.tensor(mean), new_mean])
    c.emit("copy_into", [c.tensor(var), new_var])
    return (out, batch_mean, invstd) + tail


def _written_in_place_here(c, mean, var, dtype):
    """Whether the running statistics are graph inputs of `dtype` that only
    this node reads, so the program may write them itself."""
    for running in (mean, var):
        if running is None or running.op not in ("placeholder", "get_attr") or \
                list(running.users) != [c.node] or c.dtype(running) != dtype or \
                not c.value(running).is_contiguous():
            return False
    return True


def _batch_norm_backward(c, a):
    """native_batch_norm_backward: with batch statistics (train), dx =
    w invstd (g - mean(g) - xhat mean(g xhat)); with running ones, dx = g w invstd."""
    grad, x = a["grad_out"], a["input"]
    shape, dtype = c.shape(x), c.dtype(x)
    dims = _reduced_dims(shape)
    mask = list(a.get("output_mask") or [True, True, True])
    g = c.operand(grad, dtype)
    if a["train"]:
        mean, invstd = c.operand(a["save_mean"], dtype), c.operand(a["save_invstd"], dtype)
    else:
        mean = c.operand(a["running_mean"], dtype)
        invstd = c.emit("rsqrt", [c.emit("add", [c.operand(a["running_var"], dtype),
                                                 c.scalar(_eps(a), dtype)])])
    xhat = c.emit("mul", [c.emit("sub", [c.tensor(x), _per_channel(c, mean, shape)]),
                          _per_channel(c, invstd, shape)])
    grad_bias = c.emit("sum", [g], {"dims": dims, "keepdim": 0})
    grad_weight = c.emit("sum", [c.emit("mul", [g, xhat])], {"dims": dims, "keepdim": 0})
    scale = invstd
    if a.get("weight") is not None:
        scale = c.emit("mul", [scale, c.operand(a["weight"], dtype)])
    grad_input = None
    if mask[0]:
        if a["train"]:
            count = c.value(x).numel() // shape[1]
            inverse = c.scalar(1.0 / count, dtype)
            mean_g = _per_channel(c, c.emit("mul", [grad_bias, inverse]), shape)
            mean_gx = _per_channel(c, c.emit("mul", [grad_weight, inverse]), shape)
            g = c.emit("sub", [c.emit("sub", [g, mean_g]), c.emit("mul", [xhat, mean_gx])])
        grad_input = c.emit("mul", [g, _per_channel(c, scale, shape)])
    return (grad_input, grad_weight if mask[1] else None, grad_bias if mask[2] else None)


CONVERTERS.update({
    "aten.native_batch_norm": _batch_norm,
    "aten.cudnn_batch_norm": _batch_norm,
    "aten._native_batch_norm_legit_no_training": _batch_norm,
    "aten._native_batch_norm_legit": _batch_norm,
    "aten._native_batch_norm_legit_functional": _batch_norm,
    "aten.native_batch_norm_backward": _batch_norm_backward,
})
