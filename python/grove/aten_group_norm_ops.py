"""Group norm (diffusion UNets, wav2vec2's feature encoder, BiT ResNets,
PoolFormer's GroupNorm(1)): native_group_norm written out in grove ops."""

import torch

from grove.aten_ops import CONVERTERS

_WIDE = (torch.bfloat16, torch.float16)


def _group_norm(c, a):
    """native_group_norm(x, weight, bias, N, C, HxW, group, eps) -> (out,
    mean, rstd): each (sample, group) of C / group channels normalized by
    its mean and biased variance, then scaled and shifted per channel; the
    statistics in f32 for bf16 and f16 inputs (as PyTorch's kernels keep
    them), mean and rstd [N, group] in the input's dtype."""
    x = a["input"]
    shape, dtype = c.shape(x), c.dtype(x)
    groups, eps = int(a["group"]), float(a["eps"])
    compute = torch.float32 if dtype in _WIDE else dtype
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


CONVERTERS.update({
    "aten.native_group_norm": _group_norm,
})
