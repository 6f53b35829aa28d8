"""Converters of ATen's reductions that also give positions: argmax,
argmin, max.dim and min.dim (and max/min of a whole tensor or of two), on
floats. The position is the first one holding the extreme, as in PyTorch:
the smallest index among those equal to the maximum. Importing this module
adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_ops import CONVERTERS, full_reduction
from grove.aten_pointwise_ops import _elementwise_extreme
from grove.fx_common import Unsupported


def _extreme(c, x, dim, keepdim, largest, with_index):
    """(values, indices) of the largest (or smallest) along `dim`."""
    shape = c.shape(x)
    if not c.dtype(x).is_floating_point:
        raise Unsupported("max/argmax of %s tensors" % c.dtype(x))
    name = c.tensor(x)
    if dim is None:
        name = c.emit("reshape", [name], {"shape": [max(c.value(x).numel(), 1)]})
        shape, dim = [c.value(x).numel()], 0
    dim %= max(len(shape), 1)
    signed = name if largest else c.emit("neg", [name])
    top = c.emit("max", [signed], {"dims": [dim], "keepdim": 1})
    values = top if largest else c.emit("neg", [top])
    squeezed = shape[:dim] + shape[dim + 1:]
    if not keepdim:
        values = c.emit("reshape", [values], {"shape": squeezed})
    if not with_index:
        return values, None
    size = shape[dim]
    view = [1] * len(shape)
    view[dim] = size
    positions = c.importer.constant(c.segment, torch.arange(size, dtype=torch.float32).view(
        view).to(c.importer.device))
    candidates = c.emit("where", [c.emit("eq", [signed, top]), positions,
                                  c.scalar(float(size), torch.float32)])
    first = c.emit("neg", [c.emit("max", [c.emit("neg", [candidates])],
                                  {"dims": [dim], "keepdim": int(keepdim)})])
    return values, c.emit("cast", [first], {"dtype": "i64"})


def _argextreme(largest):
    def convert(c, a):
        dim = a.get("dim")
        keepdim = bool(a.get("keepdim"))
        _, index = _extreme(c, a["self"], dim, keepdim and dim is not None, largest, True)
        if dim is None and keepdim:
            index = c.emit("reshape", [index], {"shape": list(c.result().shape)})
        return index

    return convert


def _max_or_min(largest):
    maximum = _elementwise_extreme("maximum" if largest else "minimum")

    def convert(c, a):
        overload = c.node.target._overloadname
        if overload == "other":
            return maximum(c, a)
        if overload == "default":  # of the whole tensor
            x = a["self"]
            if not c.dtype(x).is_floating_point:
                raise Unsupported("max of %s tensors" % c.dtype(x))
            name = c.tensor(x) if largest else c.emit("neg", [c.tensor(x)])
            rank = len(c.shape(x))
            top = full_reduction(c, "max", name, rank) if rank else name
            return top if largest else c.emit("neg", [top])
        return _extreme(c, a["self"], a["dim"], bool(a.get("keepdim")), largest, True)

    return convert


CONVERTERS.update({
    "aten.argmax": _argextreme(True),
    "aten.argmin": _argextreme(False),
    "aten.max": _max_or_min(True),
    "aten.min": _max_or_min(False),
})
