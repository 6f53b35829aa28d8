"""Converters of ATen's vector norms and of the reductions built like them:
linalg_vector_norm and norm (F.normalize, torch.norm: CLIP's embedding
normalization, ConvNeXt-V2's global response norm), logsumexp, and std and
var_mean (on aten_ops' variance). Importing this module adds them to aten_ops.CONVERTERS."""

import math

import torch

from grove.aten_ops import (CONVERTERS, _dims, compute_dtype, full_reduction, magnitude,
                            variance_and_mean)
from grove.fx_common import Unsupported, op_name


def _reduced_dims(c, x, dim):
    """`dim` as a sorted list of x's dims, every dim where none is named."""
    rank = len(c.shape(x))
    return sorted(_dims(dim, rank)) or list(range(rank))


def _over(c, op, name, dims, keepdim, rank):
    """`op` ("sum" or "max") of `name` over `dims`; full_reduction's 0-d
    value where every dim goes and keepdim is off."""
    if rank == 0:
        return name
    if not keepdim and dims == list(range(rank)):
        return full_reduction(c, op, name, rank)
    return c.emit(op, [name], {"dims": dims, "keepdim": 1 if keepdim else 0})


def _float_reduction(c, a, what):
    """(x in the computing dtype, the result's dtype, the computing dtype, x's
    rank, the reduced dims, keepdim) of a reduction with a floating result;
    f32 computes for bf16 and f16 (PyTorch's accumulation)."""
    x = a["self"]
    result = c.result().dtype
    if not result.is_floating_point:
        raise Unsupported("%s with a %s result" % (what, result))
    work = compute_dtype(result)
    return (c.operand(x, work), result, work, len(c.shape(x)),
            _reduced_dims(c, x, a.get("dim")), bool(a.get("keepdim")))


def _vector_norm(c, a):
    """linalg_vector_norm(x, ord, dim, keepdim, dtype) and norm(x, p, dim,
    keepdim): ord 2 as sqrt(sum(x^2)), 1 as sum(|x|), inf as max(|x|), 0 as
    the count of non-zeros, any other p as sum(|x|^p)^(1/p); the sum in f32
    for bf16 and f16 (PyTorch's accumulation), the result in the op's dtype."""
    name = op_name(c.node.target)
    order = a.get("ord", a.get("p", 2))
    order = 2.0 if order is None else float(order)
    value, result, work, rank, dims, keepdim = _float_reduction(c, a, name)
    if order == 2.0:
        total = _over(c, "sum", c.emit("mul", [value, value]), dims, keepdim, rank)
        out = c.emit("sqrt", [total])
    elif order == 1.0:
        out = _over(c, "sum", magnitude(c, value, work), dims, keepdim, rank)
    elif math.isinf(order) and order > 0:
        out = _over(c, "max", magnitude(c, value, work), dims, keepdim, rank)
    elif order == 0.0:
        nonzero = c.cast(c.emit("ne", [value, c.scalar(0, work)]), torch.bool, work)
        out = _over(c, "sum", nonzero, dims, keepdim, rank)
    elif order > 0 and math.isfinite(order):
        powered = c.emit("pow", [magnitude(c, value, work), c.scalar(order, work)])
        total = _over(c, "sum", powered, dims, keepdim, rank)
        out = c.emit("pow", [total, c.scalar(1.0 / order, work)])
    else:
        raise Unsupported("%s of order %s" % (name, order))
    return c.cast(out, work, result)


def _logsumexp(c, a):
    """log(sum(exp(x - max))) + max over `dim`, the max taken where it is
    finite (a row of -inf sums to -inf, as PyTorch's)."""
    value, result, work, rank, dims, keepdim = _float_reduction(c, a, "logsumexp")
    if rank == 0:
        return c.cast(value, work, result)
    peak = c.emit("max", [value], {"dims": dims, "keepdim": 1})
    finite = c.emit("lt", [c.emit("sub", [peak, peak]), c.scalar(1.0, work)])  # not inf, not nan
    shift = c.emit("where", [finite, peak, c.scalar(0.0, work)])
    total = _over(c, "sum", c.emit("exp", [c.emit("sub", [value, shift])]), dims, keepdim, rank)
    if not keepdim:
        shape = list(c.result().shape)
        shift = c.emit("reshape", [shift], {"shape": shape})
    return c.cast(c.emit("add", [c.emit("log", [total]), shift]), work, result)


def _std(c, a):
    if not c.dtype(a["self"]).is_floating_point:
        raise Unsupported("std of a %s tensor" % c.dtype(a["self"]))
    return c.emit("sqrt", [variance_and_mean(c, a)[0]])


def _var_mean(c, a):
    if not c.dtype(a["self"]).is_floating_point:
        raise Unsupported("var_mean of a %s tensor" % c.dtype(a["self"]))
    variance, mean = variance_and_mean(c, a)
    return variance, c.emit("reshape", [mean], {"shape": list(c.result()[1].shape)})


CONVERTERS.update({
    "aten.linalg_vector_norm": _vector_norm,
    "aten.norm": _vector_norm,
    "aten.logsumexp": _logsumexp,
    "aten.std": _std,
    "aten.var_mean": _var_mean,
})
