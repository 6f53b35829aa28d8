"""Converters of the losses a training graph may end in (mse_loss,
nll_loss) and of their backwards, written out in grove ops. Importing this
module adds them to aten_ops.CONVERTERS."""

from grove.aten_index_ops import one_hot_rows
from grove.aten_ops import CONVERTERS, full_reduction
from grove.fx_common import Unsupported, dtype_name

_MEAN, _SUM, _NONE = 1, 2, 0  # at::Reduction


def _mse_loss(c, a):
    dtype = c.result().dtype
    x, target = c.operand(a["self"], dtype), c.operand(a["target"], dtype)
    reduction = a.get("reduction", _MEAN)
    if reduction == _MEAN and c.shape(a["self"]) == c.shape(a["target"]):
        return c.emit("mse_loss", [x, target])
    difference = c.emit("sub", [x, target])
    squares = c.emit("mul", [difference, difference])
    if reduction == _NONE:
        return squares
    op = "mean" if reduction == _MEAN else "sum"
    return full_reduction(c, op, squares, len(c.shape(a["self"])))


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


LOSS_CONVERTERS = {
    "aten.mse_loss": _mse_loss,
    "aten.mse_loss_backward": _mse_loss_backward,
    "aten.nll_loss_forward": _nll_loss_forward,
    "aten.nll_loss_backward": _nll_loss_backward,
}

CONVERTERS.update(LOSS_CONVERTERS)
