"""Converters of ATen's vector norms and of the reductions built like them:
linalg_vector_norm and norm (F.normalize, torch.norm: CLIP's embedding
normalization, ConvNeXt-V2's global response norm), logsumexp, std and
var_mean. Importing this module adds them to aten_ops.CONVERTERS."""

import math

import torch

from grove.aten_ops import CONVERTERS, compute_dtype
from grove.fx_common import Unsupported, op_name


def _reduced_dims(c, x, dim):
    rank = len(c.shape(x))
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(rank))
    if isinstance(dim, int):
        dim = [dim]
    return sorted(d % rank if rank else 0 for d in dim)


def _over(c, op, name, dims, keepdim, rank):
    """`op` ("sum" or "max") of `name` over `dims`; a 0-d value where every
    dim goes and keepdim is off."""
    if rank == 0:
        return name
    if not keepdim and dims == list(range(rank)):
        if rank >= 2:
            name = c.emit(op, [name], {"dims": [rank - 1], "keepdim": 0})
        return c.emit(op, [name], {"dims": [], "keepdim": 0})
    return c.emit(op, [name], {"dims": dims, "keepdim": 1 if keepdim else 0})


def _magnitude(c, name, dtype):
    negative = c.emit("lt", [name, c.scalar(0, dtype)])
    return c.emit("where", [negative, c.emit("neg", [name]), name])


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
        out = _over(c, "sum", _magnitude(c, value, work), dims, keepdim, rank)
    elif math.isinf(order) and order > 0:
        out = _over(c, "max", _magnitude(c, value, work), dims, keepdim, rank)
    elif order == 0.0:
        nonzero = c.cast(c.emit("ne", [value, c.scalar(0, work)]), torch.bool, work)
        out = _over(c, "sum", nonzero, dims, keepdim, rank)
    elif order > 0 and math.isfinite(order):
        powered = c.emit("pow", [_magnitude(c, value, work), c.scalar(order, work)])
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


def _correction(a):
    if "correction" in a and "unbiased" not in a:
        return 1 if a.get("correction") is None else a["correction"]
    return 1 if a.get("unbiased", True) else 0


def _moments(c, a):
    """(the mean with dims kept, the variance as the op shapes it, dtype)."""
    x = a["self"]
    dtype = c.dtype(x)
    if not dtype.is_floating_point:
        raise Unsupported("%s of a %s tensor" % (op_name(c.node.target), dtype))
    rank = len(c.shape(x))
    dims = _reduced_dims(c, x, a.get("dim"))
    count = 1
    for d in dims:
        count *= c.shape(x)[d] if rank else 1
    name = c.tensor(x)
    if rank == 0:
        return name, c.emit("sub", [name, name]), dtype
    mean = c.emit("mean", [name], {"dims": dims, "keepdim": 1})
    centered = c.emit("sub", [name, mean])
    keepdim = bool(a.get("keepdim"))
    total = _over(c, "sum", c.emit("mul", [centered, centered]), dims, keepdim, rank)
    variance = c.emit("div", [total, c.scalar(max(count - _correction(a), 0), dtype)])
    return mean, variance, dtype


def _std(c, a):
    _, variance, _ = _moments(c, a)
    return c.emit("sqrt", [variance])


def _var_mean(c, a):
    mean, variance, _ = _moments(c, a)
    mean = c.emit("reshape", [mean], {"shape": list(c.result()[1].shape)})
    return variance, mean


CONVERTERS.update({
    "aten.linalg_vector_norm": _vector_norm,
    "aten.norm": _vector_norm,
    "aten.logsumexp": _logsumexp,
    "aten.std": _std,
    "aten.var_mean": _var_mean,
})
