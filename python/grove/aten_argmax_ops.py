"""Converters of ATen's reductions that also give positions: argmax,
argmin, max.dim and min.dim (and max/min of a whole tensor or of two), on
any dtype, and topk for small k (decode sampling), on floats. The position is the first one
holding the extreme, as in PyTorch: the smallest index among those equal to
the maximum. Importing this module adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_nonfinite_ops import is_nan
from grove.aten_ops import CONVERTERS, INTEGER_MAXIMA, full_reduction, integer_maximum
from grove.aten_pointwise_ops import _elementwise_extreme
from grove.fx_common import Unsupported


def _ordered(c, x):
    """x as a grove value whose order is x's: bool as int32 (grove reduces no
    bools)."""
    if c.dtype(x) == torch.bool:
        return c.operand(x, torch.int32)
    return c.tensor(x)


def _reversed(c, name, dtype):
    """A value in the reverse order of `name`'s: its negation, or for integers
    its bitwise complement (~x = -x - 1, which no integer overflows)."""
    if dtype.is_floating_point:
        return c.emit("neg", [name])
    return c.emit("bitwise_not", [name])


def _extreme(c, x, dim, keepdim, largest):
    """(values, indices) of the largest (or smallest) along `dim` (None: of all)."""
    shape = c.shape(x)
    dtype = torch.int32 if c.dtype(x) == torch.bool else c.dtype(x)
    name = _ordered(c, x)
    if dim is None:
        name = c.emit("reshape", [name], {"shape": [max(c.value(x).numel(), 1)]})
        shape, dim = [c.value(x).numel()], 0
    dim %= max(len(shape), 1)
    top, index = _extreme_of(c, name if largest else _reversed(c, name, dtype), shape, dim,
                             dtype)
    values = top if largest else _reversed(c, top, dtype)
    if c.dtype(x) == torch.bool:
        values = c.cast(values, torch.int32, torch.bool)
    if not keepdim:
        squeezed = shape[:dim] + shape[dim + 1:]
        values = c.emit("reshape", [values], {"shape": squeezed})
        index = c.emit("reshape", [index], {"shape": squeezed})
    return values, index


def _argextreme(largest):
    def convert(c, a):
        dim = a.get("dim")
        keepdim = bool(a.get("keepdim"))
        _, index = _extreme(c, a["self"], dim, keepdim and dim is not None, largest)
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
                return _extreme(c, x, None, False, largest)[0]
            name = c.tensor(x) if largest else c.emit("neg", [c.tensor(x)])
            rank = len(c.shape(x))
            top = full_reduction(c, "max", name, rank) if rank else name
            return top if largest else c.emit("neg", [top])
        return _extreme(c, a["self"], a["dim"], bool(a.get("keepdim")), largest)

    return convert


# topk takes k rounds of max and argmax: beyond this k, leave it to PyTorch.
_MAX_TOPK = 64


def _topk(c, a):
    """The k largest (or smallest) along dim, in order: round i takes the
    maximum and its first position, then masks that position out."""
    x, k = a["self"], a["k"]
    shape = c.shape(x)
    dtype = c.dtype(x)
    if not dtype.is_floating_point:
        raise Unsupported("topk of %s tensors" % dtype)
    if not shape or k > _MAX_TOPK:
        raise Unsupported("topk with k=%d (grove takes up to %d)" % (k, _MAX_TOPK))
    dim = a.get("dim", -1) % len(shape)
    largest = a.get("largest", True)
    size = shape[dim]
    view = [1] * len(shape)
    view[dim] = size
    positions = c.importer.constant(c.segment, torch.arange(size, dtype=torch.int64).view(
        view).to(c.importer.device))
    ordered = c.tensor(x) if largest else c.emit("neg", [c.tensor(x)])
    # Positions already taken leave the race by a mask, not by a value: a row
    # whose values left are all -inf (logits a sampler masked) still gives
    # distinct positions, as PyTorch's topk does.
    available = None
    values, indices = [], []
    for round_ in range(k):
        if round_:
            free = c.emit("ne", [positions, indices[-1]])
            available = free if available is None else c.emit("bitwise_and", [available, free])
            remaining = c.emit("where", [available, ordered, c.scalar(-float("inf"), dtype)])
            top = c.emit("max", [remaining], {"dims": [dim], "keepdim": 1})
            hits = c.emit("bitwise_and", [available, _reaching(c, ordered, top)])
            index = _first_position(c, hits, shape, dim)
        else:
            top, index = _extreme_of(c, ordered, shape, dim)
        values.append(top if largest else c.emit("neg", [top]))
        indices.append(index)
    if k == 1:
        return values[0], indices[0]
    return (c.emit("concat", values, {"dim": dim}), c.emit("concat", indices, {"dim": dim}))


def _first_position(c, reaching, shape, dim):
    """The first position along dim where bool `reaching` holds, as i64
    (dim kept as size 1)."""
    size = shape[dim]
    view = [1] * len(shape)
    view[dim] = size
    order = c.importer.constant(c.segment, torch.arange(size, dtype=torch.float32).view(view).to(
        c.importer.device))
    candidates = c.emit("where", [reaching, order, c.scalar(float(size), torch.float32)])
    first = c.emit("neg", [c.emit("max", [c.emit("neg", [candidates])],
                                  {"dims": [dim], "keepdim": 1})])
    return c.emit("cast", [first], {"dtype": "i64"})


def _extreme_of(c, name, shape, dim, dtype=torch.float32):
    """(max, its first position as i64), keeping dim as size 1."""
    if dtype in INTEGER_MAXIMA:  # Note [Integer maxima in f32-exact pieces] (aten_ops.py)
        top, reaching = integer_maximum(c, name, dtype, [dim])
        return top, _first_position(c, reaching, shape, dim)
    top = c.emit("max", [name], {"dims": [dim], "keepdim": 1})  # exact for floats
    return top, _first_position(c, _reaching(c, name, top), shape, dim)


# Note [NaN is the largest position]: PyTorch's argmax, argmin, max.dim,
# min.dim and topk take NaN as the extreme (the first NaN's position), and
# grove's max reduction gives NaN for a row holding one. The positions that
# reach the extreme are those equal to it or NaN: `eq` alone found none in a
# row holding NaN, and the first position "of none" is the row's size, an
# index out of range (a gather or embedding after argmax then read outside
# its table). Test: EdgeValuesTest.test_positions_of_nan_extremes
# (tests/python/importer_edge_values_test.py).
def _reaching(c, name, top):
    """Bool: where float `name` equals its row's extreme `top`, or is NaN
    (the extreme of a row holding NaN is NaN)."""
    return c.emit("bitwise_or", [c.emit("eq", [name, top]), is_nan(c, name)])


CONVERTERS.update({
    "aten.topk": _topk,
    "aten.argmax": _argextreme(True),
    "aten.argmin": _argextreme(False),
    "aten.max": _max_or_min(True),
    "aten.min": _max_or_min(False),
})
