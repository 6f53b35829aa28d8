"""Group norm (diffusion UNets, wav2vec2's feature encoder, BiT ResNets,
PoolFormer's GroupNorm(1)): native_group_norm and its backward written out
in grove ops."""

from grove.aten_ops import CONVERTERS, compute_dtype


def _group_norm(c, a):
    """native_group_norm(x, weight, bias, N, C, HxW, group, eps) -> (out,
    mean, rstd): each (sample, group) of C / group channels normalized by
    its mean and biased variance, then scaled and shifted per channel; the
    statistics in f32 for bf16 and f16 inputs (as PyTorch's kernels keep
    them), mean and rstd [N, group] in the input's dtype."""
    x = a["input"]
    shape, dtype = c.shape(x), c.dtype(x)
    groups, eps = int(a["group"]), float(a["eps"])
    compute = compute_dtype(dtype)
    batch = shape[0]
    per_group = c.value(x).numel() // (batch * groups)
    grouped = c.emit("reshape", [c.operand(x, compute)], {"shape": [batch, groups, per_group]})
    mean = c.emit("mean", [grouped], {"dims": [2], "keepdim": 1})
    centered = c.emit("sub", [grouped, mean])
    var = c.emit("mean", [c.emit("mul", [centered, centered])], {"dims": [2], "keepdim": 1})
    rstd = c.emit("rsqrt", [c.emit("add", [var, c.scalar(eps, compute)])])
    out = c.emit("reshape", [c.emit("mul", [centered, rstd])], {"shape": shape})
    per_channel = [shape[1]] + [1] * (len(shape) - 2)
    for name, op in (("weight", "mul"), ("bias", "add")):
        if a.get(name) is not None:
            operand = c.emit("reshape", [c.operand(a[name], compute)], {"shape": per_channel})
            out = c.emit(op, [out, operand])
    results = c.result()
    statistics = [c.cast(c.emit("reshape", [value], {"shape": [batch, groups]}), compute,
                         results[index + 1].dtype)
                  for index, value in enumerate((mean, rstd))]
    return (c.cast(out, compute, results[0].dtype), *statistics)


def _group_norm_backward(c, a):
    """native_group_norm_backward -> (dx, dweight, dbias) where asked:
    with xhat = (x - mean) rstd per (sample, group) and gw = grad weight,
    dx = rstd (gw - mean(gw) - xhat mean(gw xhat)) over the group's elements,
    dweight = sum of grad xhat and dbias = sum of grad per channel."""
    x, grad = a["input"], a["grad_out"]
    shape, dtype = c.shape(x), c.dtype(x)
    groups = int(a["group"])
    batch, channels = shape[0], shape[1]
    pixels = c.value(x).numel() // (batch * channels)
    compute = compute_dtype(dtype)
    grouped = [batch, groups, channels // groups, pixels]

    def per_group(name):
        return c.emit("reshape", [c.operand(a[name], compute)], {"shape": [batch, groups, 1, 1]})

    xs = c.emit("reshape", [c.operand(x, compute)], {"shape": grouped})
    gs = c.emit("reshape", [c.operand(grad, compute)], {"shape": grouped})
    rstd = per_group("rstd")
    xhat = c.emit("mul", [c.emit("sub", [xs, per_group("mean")]), rstd])
    mask = list(a.get("output_mask") or [True, True, True])
    results = c.result()
    out = [None, None, None]
    if mask[0]:
        gw = gs
        if a.get("weight") is not None:
            weight = c.emit("reshape", [c.operand(a["weight"], compute)],
                            {"shape": [1, groups, channels // groups, 1]})
            gw = c.emit("mul", [gs, weight])
        dims = {"dims": [2, 3], "keepdim": 1}
        mean_gw = c.emit("mean", [gw], dims)
        mean_gwx = c.emit("mean", [c.emit("mul", [gw, xhat])], dims)
        inner = c.emit("sub", [c.emit("sub", [gw, mean_gw]), c.emit("mul", [xhat, mean_gwx])])
        dx = c.emit("reshape", [c.emit("mul", [rstd, inner])], {"shape": shape})
        out[0] = c.cast(dx, compute, results[0].dtype)
    for index, value in ((1, c.emit("mul", [gs, xhat]) if mask[1] else None),
                         (2, gs if mask[2] else None)):
        if value is not None:
            summed = c.emit("sum", [value], {"dims": [0, 3], "keepdim": 0})
            summed = c.emit("reshape", [summed], {"shape": [channels]})
            out[index] = c.cast(summed, compute, results[index].dtype)
    return tuple(out)


CONVERTERS.update({
    "aten.native_group_norm": _group_norm,
    "aten.native_group_norm_backward": _group_norm_backward,
})
