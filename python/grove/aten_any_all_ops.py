"""Converters of any and all (over all dims, one dim or several): the
maximum (any) or minimum (all) of the values' truth, as int32, given back as
bool. Importing this module adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_ops import CONVERTERS, _dims, reduced_over


def _truth(c, x):
    """x != 0 as int32 (grove reduces no bools)."""
    if c.dtype(x) == torch.bool:
        return c.cast(c.tensor(x), torch.bool, torch.int32)
    zero = c.scalar(0, c.dtype(x))
    return c.cast(c.emit("ne", [c.tensor(x), zero]), torch.bool, torch.int32)


def _any_or_all(largest):
    def convert(c, a):
        x = a["self"]
        rank = len(c.shape(x))
        truth = _truth(c, x)
        if not largest:  # all(x) = not any(not x)
            truth = c.emit("sub", [c.scalar(1, torch.int32), truth])
        dims = _dims(a.get("dim"), rank)
        reduced = reduced_over(c, "max", truth, rank, dims, a.get("keepdim")) if rank else truth
        if not largest:
            reduced = c.emit("sub", [c.scalar(1, torch.int32), reduced])
        return c.cast(reduced, torch.int32, torch.bool)

    return convert


CONVERTERS.update({
    "aten.any": _any_or_all(True),
    "aten.all": _any_or_all(False),
})
