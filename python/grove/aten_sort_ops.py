"""Converters of ATen's sort (values and indices along a dim, ascending or
descending, stable) and argsort, for rows of up to MAX_SORT_ROW elements
(ViTMAE's random masking argsorts a row of noise per image; decoders sort
small vocabularies' top candidates). Importing this module adds them to
aten_ops.CONVERTERS."""

import torch

from grove.aten_index_ops import gather_along
from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported

# Note [Sorting by pairwise ranks]: grove's IR has no sort, so each element
# counts the elements of its row that go before it: the smaller ones (larger,
# descending) and the equal ones at earlier positions, which makes the order
# stable, as sort(stable=True) promises and as PyTorch's CPU sort gives
# anyway. NaN goes after every number (before, descending) and NaNs tie, as in
# PyTorch. That count is the element's place; the index at place p is the
# position whose count is p (a max over the row's matches), and the values
# are the row gathered at the indices. Every comparison is a [rows, n, n]
# value, so rows of more than MAX_SORT_ROW elements, or more than
# MAX_SORT_COMPARISONS in all, stay in PyTorch. Tests: sampling_ops_test's
# SortTest.

MAX_SORT_ROW = 2048
MAX_SORT_COMPARISONS = 1 << 26


def _before(c, x, rows_shape, n, descending, floating):
    """[rows..., n, n] bools: element j (last dim) goes before element i of
    grove value x [rows..., n]."""
    mine = c.emit("reshape", [x], {"shape": rows_shape + [n, 1]})
    other = c.emit("reshape", [x], {"shape": rows_shape + [1, n]})
    beyond = c.emit("gt" if descending else "lt", [other, mine])
    tie = c.emit("eq", [other, mine])
    if floating:
        mine_nan, other_nan = (c.emit("ne", [v, v]) for v in (mine, other))
        # NaN is the largest: first when descending, last otherwise.
        nan_first = (c.emit("bitwise_and", [other_nan, c.emit("eq", [mine, mine])])
                     if descending else
                     c.emit("bitwise_and", [mine_nan, c.emit("eq", [other, other])]))
        beyond = c.emit("bitwise_or", [beyond, nan_first])
        tie = c.emit("bitwise_or", [tie, c.emit("bitwise_and", [mine_nan, other_nan])])
    earlier = torch.ones(n, n, dtype=torch.bool).tril(-1)  # [i, j]: j < i
    earlier = c.importer.constant(c.segment, earlier.to(c.importer.device))
    return c.emit("bitwise_or", [beyond, c.emit("bitwise_and", [tie, earlier])])


def sort_along(c, x, dim, descending, want_values):
    """(values or None, indices i64) of fx value x sorted along dim."""
    shape = c.shape(x)
    dtype = c.dtype(x)
    if dtype == torch.bool:
        raise Unsupported("sort of bool tensors")
    if not shape:
        return c.tensor(x), c.emit("full", [], {"value": 0.0, "shape": [], "dtype": "i64"})
    dim %= len(shape)
    n = shape[dim]
    rows = c.value(x).numel() // max(n, 1)
    if n > MAX_SORT_ROW or rows * n * n > MAX_SORT_COMPARISONS:
        raise Unsupported("sort of %d rows of %d (grove sorts rows of up to %d by %d pairwise "
                          "comparisons in all)" % (rows, n, MAX_SORT_ROW, MAX_SORT_COMPARISONS))
    if n <= 1:
        return c.tensor(x), c.emit("full", [], {"value": 0.0, "shape": shape, "dtype": "i64"})
    last = len(shape) - 1
    name = c.tensor(x)
    if dim != last:
        name = c.emit("transpose", [name], {"dim0": dim, "dim1": last})
    moved = list(shape)  # the shape with dim and the last dim swapped
    moved[dim], moved[last] = moved[last], n
    before = _before(c, name, moved[:-1], n, descending, dtype.is_floating_point)
    place = c.emit("sum", [c.emit("cast", [before], {"dtype": "f32"})],
                   {"dims": [len(moved)], "keepdim": 0})  # [rows..., n], exact below 2^24
    places = torch.arange(n, dtype=torch.float32).view(n, 1)
    hits = c.emit("eq", [c.emit("reshape", [place], {"shape": moved[:-1] + [1, n]}),
                         c.importer.constant(c.segment, places.to(c.importer.device))])
    positions = torch.arange(n, dtype=torch.float32)
    picked = c.emit("where", [hits, c.importer.constant(c.segment, positions.to(
        c.importer.device)), c.scalar(-1.0, torch.float32)])
    indices = c.emit("cast", [c.emit("max", [picked], {"dims": [len(moved)], "keepdim": 0})],
                     {"dtype": "i64"})  # [rows..., n]
    values = None
    if want_values:
        values = gather_along(c, name, moved, last, indices, moved)
    if dim != last:
        indices = c.emit("transpose", [indices], {"dim0": dim, "dim1": last})
        if values is not None:
            values = c.emit("transpose", [values], {"dim0": dim, "dim1": last})
    return values, indices


def _sort(c, a):
    wanted = {user.args[1] for user in c.node.users if user.users}
    values, indices = sort_along(c, a["self"], a.get("dim", -1), bool(a.get("descending")),
                                 0 in wanted)
    return values, indices


def _argsort(c, a):
    return sort_along(c, a["self"], a.get("dim", -1), bool(a.get("descending")), False)[1]


CONVERTERS.update({
    "aten.sort": _sort,
    "aten.argsort": _argsort,
})
