"""Converters of the losses a training graph may end in (mse_loss,
nll_loss, smooth_l1_loss, huber_loss, binary_cross_entropy_with_logits) and
of their backwards (but the last's), written out in grove ops. Importing this
module adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_index_ops import one_hot_rows
from grove.aten_ops import CONVERTERS, full_reduction, magnitude
from grove.fx_common import Unsupported, dtype_name

_MEAN, _SUM, _NONE = 1, 2, 0  # at::Reduction


def _mse_loss(c, a):
    dtype = c.result().dtype
    x, target = c.operand(a["self"], dtype), c.operand(a["target"], dtype)
    reduction = a.get("reduction", _MEAN)
    if reduction == _MEAN and c.shape(a["self"]) == c.shape(a["target"]):
        return c.emit("mse_loss", [x, target])
    difference = c.emit("sub", [x, target])
    return _reduced(c, a, c.emit("mul", [difference, difference]))


def _mse_loss_backward(c, a):
    """2 (x - target) g, over the element count for reduction='mean'."""
    dtype = c.result().dtype
    x, target = c.operand(a["self"], dtype), c.operand(a["target"], dtype)
    scale = 2.0
    if a.get("reduction", _MEAN) == _MEAN:
        scale /= max(c.value(a["self"]).numel(), 1)
    difference = c.emit("mul", [c.emit("sub", [x, target]), c.scalar(scale, dtype)])
    return c.emit("mul", [difference, c.operand(a["grad_output"], dtype)])


def _nll_parts(c, a):
    log_probs = a["self"]
    if len(c.shape(log_probs)) != 2:
        raise Unsupported("nll_loss of a rank-%d input (grove takes [batch, classes])"
                          % len(c.shape(log_probs)))
    if a.get("weight") is not None:
        raise Unsupported("nll_loss with class weights")
    dtype = c.dtype(log_probs)
    classes = c.shape(log_probs)[1]
    target = a["target"]
    ignore = a.get("ignore_index", -100)
    picks = one_hot_rows(c, target, classes, dtype, ignore)  # ignored rows match nothing
    kept = c.emit("cast", [c.emit("ne", [c.tensor(target), c.scalar(ignore, c.dtype(target))])],
                  {"dtype": dtype_name(dtype)})
    return dtype, picks, kept


def _nll_loss_forward(c, a):
    """(-sum over rows of log_probs[n, target[n]] (over the kept count for
    'mean'), the kept count): rows whose target is ignore_index count nothing."""
    dtype, picks, kept = _nll_parts(c, a)
    picked = full_reduction(c, "sum", c.emit("mul", [c.tensor(a["self"]), picks]), 2)
    total_weight = full_reduction(c, "sum", kept, 1)
    reduction = a.get("reduction", _MEAN)
    if reduction == _NONE:
        raise Unsupported("nll_loss with reduction='none'")
    loss = c.emit("neg", [picked])
    if reduction == _MEAN:
        loss = c.emit("div", [loss, total_weight])
    return (loss, total_weight)


def _nll_loss_backward(c, a):
    dtype, picks, _ = _nll_parts(c, a)
    scale = c.emit("neg", [c.operand(a["grad_output"], dtype)])
    if a.get("reduction", _MEAN) == _MEAN:
        scale = c.emit("div", [scale, c.operand(a["total_weight"], dtype)])
    return c.emit("mul", [picks, scale])


def _reduced(c, a, losses):
    """A loss's elementwise values (of self and target broadcast) reduced by
    its `reduction`."""
    reduction = a.get("reduction", _MEAN)
    rank = len(torch.broadcast_shapes(c.value(a["self"]).shape, c.value(a["target"]).shape))
    if reduction == _NONE or rank == 0:
        return losses
    return full_reduction(c, "mean" if reduction == _MEAN else "sum", losses, rank)


def _distance(c, a):
    dtype = c.result().dtype
    if not dtype.is_floating_point or c.shape(a["self"]) != c.shape(a["target"]):
        raise Unsupported("a regression loss of broadcast or integer operands")
    return dtype, c.emit("sub", [c.operand(a["self"], dtype), c.operand(a["target"], dtype)])


def _smooth_l1(c, a):
    """|d| < beta ? d^2 / (2 beta) : |d| - beta / 2 (beta 0: |d|)."""
    dtype, difference = _distance(c, a)
    size = magnitude(c, difference, dtype)
    beta = float(a.get("beta", 1.0))
    if beta == 0.0:
        return _reduced(c, a, size)
    square = c.emit("mul", [c.emit("mul", [difference, difference]), c.scalar(0.5 / beta, dtype)])
    linear = c.emit("sub", [size, c.scalar(0.5 * beta, dtype)])
    near = c.emit("lt", [size, c.scalar(beta, dtype)])
    return _reduced(c, a, c.emit("where", [near, square, linear]))


def _huber(c, a):
    """|d| < delta ? d^2 / 2 : delta (|d| - delta / 2)."""
    dtype, difference = _distance(c, a)
    size = magnitude(c, difference, dtype)
    delta = float(a.get("delta", 1.0))
    square = c.emit("mul", [c.emit("mul", [difference, difference]), c.scalar(0.5, dtype)])
    linear = c.emit("mul", [c.emit("sub", [size, c.scalar(0.5 * delta, dtype)]),
                            c.scalar(delta, dtype)])
    near = c.emit("lt", [size, c.scalar(delta, dtype)])
    return _reduced(c, a, c.emit("where", [near, square, linear]))


def _regression_backward(slope):
    """grad * slope(d) (over the element count for reduction='mean')."""
    def convert(c, a):
        dtype, difference = _distance(c, a)
        scale = 1.0
        if a.get("reduction", _MEAN) == _MEAN:
            scale /= max(c.value(a["self"]).numel(), 1)
        grad = c.emit("mul", [c.operand(a["grad_output"], dtype), c.scalar(scale, dtype)])
        return c.emit("mul", [slope(c, a, difference, dtype), grad])

    return convert


def _clamped(c, difference, bound, dtype):
    return c.emit("minimum", [c.emit("maximum", [difference, c.scalar(-bound, dtype)]),
                              c.scalar(bound, dtype)])


def _smooth_l1_slope(c, a, difference, dtype):
    """d / beta inside (-beta, beta), the sign of d outside."""
    beta = float(a.get("beta", 1.0))
    if beta == 0.0:  # the L1 loss's: the sign of d
        zero, one = c.scalar(0.0, dtype), c.scalar(1.0, dtype)
        negative = c.emit("where", [c.emit("lt", [difference, zero]), c.scalar(-1.0, dtype), zero])
        return c.emit("where", [c.emit("gt", [difference, zero]), one, negative])
    return _clamped(c, c.emit("mul", [difference, c.scalar(1.0 / beta, dtype)]), 1.0, dtype)


def _huber_slope(c, a, difference, dtype):
    """d clamped to [-delta, delta]."""
    return _clamped(c, difference, float(a.get("delta", 1.0)), dtype)


def _bce_with_logits(c, a):
    """(1 - t) x + (1 + (p - 1) t) (log1p(e^-|x|) + max(-x, 0)), times the
    weight, reduced (p: pos_weight, 1 where not given)."""
    dtype = c.result().dtype
    if not dtype.is_floating_point:
        raise Unsupported("binary_cross_entropy_with_logits with a %s result" % dtype)
    if list(c.shape(a["self"])) != list(torch.broadcast_shapes(
            *[c.value(a[name]).shape for name in ("self", "target")])):
        raise Unsupported("binary_cross_entropy_with_logits over a broadcast target")
    x, target = c.operand(a["self"], dtype), c.operand(a["target"], dtype)
    one = c.scalar(1.0, dtype)
    softplus_of_minus_x = c.emit("add", [
        c.emit("log1p", [c.emit("exp", [c.emit("neg", [magnitude(c, x, dtype)])])]),
        c.emit("maximum", [c.emit("neg", [x]), c.scalar(0.0, dtype)])])
    scale = one
    if a.get("pos_weight") is not None:
        weight = c.operand(a["pos_weight"], dtype)
        scale = c.emit("add", [one, c.emit("mul", [c.emit("sub", [weight, one]), target])])
    losses = c.emit("add", [c.emit("mul", [c.emit("sub", [one, target]), x]),
                            c.emit("mul", [scale, softplus_of_minus_x])])
    if a.get("weight") is not None:
        losses = c.emit("mul", [losses, c.operand(a["weight"], dtype)])
    return _reduced(c, a, losses)


LOSS_CONVERTERS = {
    "aten.mse_loss": _mse_loss,
    "aten.mse_loss_backward": _mse_loss_backward,
    "aten.nll_loss_forward": _nll_loss_forward,
    "aten.nll_loss_backward": _nll_loss_backward,
    "aten.smooth_l1_loss": _smooth_l1,
    "aten.huber_loss": _huber,
    "aten.smooth_l1_loss_backward": _regression_backward(_smooth_l1_slope),
    "aten.huber_loss_backward": _regression_backward(_huber_slope),
    "aten.binary_cross_entropy_with_logits": _bce_with_logits,
}

CONVERTERS.update(LOSS_CONVERTERS)
