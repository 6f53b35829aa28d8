"""Converters of Tensor.unfold (aten.unfold: sliding windows along one dim as
a view, HaloNet's blocks, audio framing) and its backward: constant gathers.
Importing this module adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_index_ops import take
from grove.aten_layout_ops import summed_at_sources
from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported


def _windows(size, extent, step):
    """The window count of unfold(dim, extent, step) over `size` elements."""
    return (size - extent) // step + 1


def _unfold(c, a):
    """x.unfold(dim, size, step): dim becomes the window count and a last dim
    of `size` holds each window's elements (window i, tap j reads i*step + j)."""
    x = a["self"]
    shape = c.shape(x)
    extent, step = int(a["size"]), int(a["step"])
    if not shape:
        if extent > 1:
            raise Unsupported("unfold of a 0-d tensor with size %d" % extent)
        return c.emit("reshape", [c.tensor(x)], {"shape": [1]})
    dim = a["dimension"] % len(shape)
    count = _windows(shape[dim], extent, step)
    positions = (torch.arange(count)[:, None] * step + torch.arange(extent)[None, :]).reshape(-1)
    ids = c.importer.constant(c.segment, positions.to(c.importer.device))
    picked = take(c, c.tensor(x), shape, [dim], ids, [count, extent], dim)
    # picked: x's dims with dim replaced by [count, extent]; move extent last.
    rank = len(shape) + 1
    order = [d for d in range(rank) if d != dim + 1] + [dim + 1]
    return c.emit("permute", [picked], {"order": order})


def _unfold_backward(c, a):
    """The gradient of unfold: each input position sums the window taps that
    read it (aten_layout_ops.summed_at_sources over the (window, tap) rows)."""
    grad, sizes = a["grad_in"], [int(extent) for extent in a["input_sizes"]]
    extent, step = int(a["size"]), int(a["step"])
    if not sizes:
        return c.emit("reshape", [c.tensor(grad)], {"shape": []})
    dim = a["dim"] % len(sizes)
    length = sizes[dim]
    count = _windows(length, extent, step)
    # grad: sizes with dim -> count and a last dim of extent: bring the
    # (window, tap) pair together as one dim at `dim`.
    rank = len(sizes) + 1
    order = list(range(dim + 1)) + [rank - 1] + list(range(dim + 1, rank - 1))
    rows = c.emit("permute", [c.tensor(grad)], {"order": order})
    flat_shape = sizes[:dim] + [count * extent] + sizes[dim + 1:]
    rows = c.emit("reshape", [rows], {"shape": flat_shape})
    sources = [window * step + tap for window in range(count) for tap in range(extent)]
    return summed_at_sources(c, rows, flat_shape, dim, sources, length, c.dtype(grad))


CONVERTERS.update({
    "aten.unfold": _unfold,
    "aten.unfold_backward": _unfold_backward,
})
