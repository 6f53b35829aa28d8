"""Converters of ATen's indexing by tensors: index_select, gather, index
(advanced indexing with integer tensors) and embedding_bag with bags of one
size, each written as grove's embedding (rows of a [V, D] table picked by
ids). Importing this module adds them to
aten_ops.CONVERTERS."""

import torch

from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported, dtype_name


def _product(sizes):
    result = 1
    for size in sizes:
        result *= size
    return result


def _int64(c, arg):
    if c.dtype(arg) not in (torch.int32, torch.int64):
        raise Unsupported("indices of dtype %s" % c.dtype(arg))
    return c.operand(arg, torch.int64)


def _wrapped(c, ids, size):
    """Negative ids count from the end, as in Python."""
    negative = c.emit("lt", [ids, c.scalar(0, torch.int64)])
    return c.emit("where", [negative, c.emit("add", [ids, c.scalar(size, torch.int64)]), ids])


def take(c, x, shape, dims, ids, ids_shape, position):
    """x[..., ids, ...]: the dims `dims` of x (shape `shape`) indexed together
    by one flat i64 id per element of ids (shape ids_shape), the result's id
    dims placed at `position` among x's other dims."""
    rest = [d for d in range(len(shape)) if d not in dims]
    order = list(dims) + rest
    if order != list(range(len(shape))):
        x = c.emit("permute", [x], {"order": order})
    rows = _product(shape[d] for d in dims)
    rest_sizes = [shape[d] for d in rest]
    table = c.emit("reshape", [x], {"shape": [rows, _product(rest_sizes)]})
    picked = c.emit("embedding", [table, ids])
    picked = c.emit("reshape", [picked], {"shape": list(ids_shape) + rest_sizes})
    if position == 0 or not rest:
        return picked
    k = len(ids_shape)
    ids_dims = list(range(k))
    rest_dims = list(range(k, k + len(rest)))
    order = rest_dims[:position] + ids_dims + rest_dims[position:]
    return c.emit("permute", [picked], {"order": order})


def _index_select(c, a):
    x, index = a["self"], a["index"]
    shape = c.shape(x)
    if not shape:
        raise Unsupported("index_select of a 0-d tensor")
    dim = a["dim"] % len(shape)
    ids = _wrapped(c, _int64(c, index), shape[dim])
    return take(c, c.tensor(x), shape, [dim], ids, c.shape(index), dim)


def _index(c, a):
    x = a["self"]
    shape = c.shape(x)
    indices = list(a["indices"])
    dims = [d for d, index in enumerate(indices) if index is not None]
    if not dims:
        return c.tensor(x)
    for d in dims:
        if not isinstance(indices[d], torch.fx.Node):
            raise Unsupported("an index that is not a tensor")
        if c.dtype(indices[d]) in (torch.bool, torch.uint8):
            raise Unsupported("a boolean mask index (its result's shape depends on the data)")
    ids_shape = list(torch.broadcast_shapes(*[tuple(c.shape(indices[d])) for d in dims]))
    flat = None  # the flat row of the indexed dims, broadcast to ids_shape by the adds
    for k, d in enumerate(dims):
        stride = _product(shape[e] for e in dims[k + 1:])
        ids = _wrapped(c, _int64(c, indices[d]), shape[d])
        if stride != 1:
            ids = c.emit("mul", [ids, c.scalar(stride, torch.int64)])
        flat = ids if flat is None else c.emit("add", [flat, ids])
    # PyTorch keeps adjacent indexed dims in place, else puts them first.
    position = dims[0] if dims == list(range(dims[0], dims[-1] + 1)) else 0
    rest = [shape[d] for d in range(len(shape)) if d not in dims]
    expected = rest[:position] + ids_shape + rest[position:]
    if list(c.result().shape) != expected:
        raise Unsupported("advanced indexing giving %s, expected %s"
                          % (list(c.result().shape), expected))
    return take(c, c.tensor(x), shape, dims, flat, ids_shape, position)


def _gather(c, a):
    """out[i, j, k] = x[i, index[i, j, k], k] (dim 1): one flat id per element,
    index * stride(dim) + the other coordinates' offsets (a constant)."""
    if a.get("sparse_grad"):
        raise Unsupported("gather with sparse_grad")
    x, index = a["self"], a["index"]
    shape = c.shape(x)
    index_shape = c.shape(index)
    if not shape:
        raise Unsupported("gather of a 0-d tensor")
    dim = a["dim"] % len(shape)
    ids = _wrapped(c, _int64(c, index), shape[dim])
    return gather_along(c, c.tensor(x), shape, dim, ids, index_shape)


def gather_along(c, name, shape, dim, ids, index_shape):
    """torch.gather of grove value `name` (of `shape`) along `dim` by the i64
    positions `ids` (of index_shape, in range): one flat id per element."""
    strides = [_product(shape[d + 1:]) for d in range(len(shape))]
    base = torch.zeros(index_shape, dtype=torch.int64)
    for d, size in enumerate(index_shape):
        if d != dim:
            view = [1] * len(index_shape)
            view[d] = size
            base = base + torch.arange(size, dtype=torch.int64).view(view) * strides[d]
    if strides[dim] != 1:
        ids = c.emit("mul", [ids, c.scalar(strides[dim], torch.int64)])
    offsets = c.importer.constant(c.segment, base.to(c.importer.device))
    ids = c.emit("add", [ids, offsets])
    table = c.emit("reshape", [name], {"shape": [_product(shape), 1]})
    picked = c.emit("embedding", [table, ids])
    return c.emit("reshape", [picked], {"shape": list(index_shape)})


def _embedding_bag(c, a):
    """Bags of one size (a 2-d input: offsets are a constant arange): rows
    picked by embedding, then summed, averaged or maxed over each bag."""
    weight, indices, offsets = a["weight"], a["indices"], a["offsets"]
    if a.get("scale_grad_by_freq") or a.get("padding_idx") not in (None, -1):
        raise Unsupported("embedding_bag with scale_grad_by_freq or padding_idx")
    if offsets in c.importer.constants:
        starts = c.importer.constants[offsets].to("cpu")
    else:
        raise Unsupported("embedding_bag with offsets computed per call")
    count = c.value(indices).numel()
    if a.get("include_last_offset"):
        starts = starts[:-1]
    bags = starts.numel()
    size = count // max(bags, 1)
    if bags * size != count or not torch.equal(starts, torch.arange(0, count, max(size, 1))):
        raise Unsupported("embedding_bag with bags of different sizes")
    ids = c.emit("reshape", [c.tensor(indices)], {"shape": [bags, size]})
    rows = c.emit("embedding", [c.tensor(weight), ids])  # [bags, size, D]
    if a.get("per_sample_weights") is not None:
        scale = c.operand(a["per_sample_weights"], c.dtype(weight))
        rows = c.emit("mul", [rows, c.emit("reshape", [scale], {"shape": [bags, size, 1]})])
    op = {0: "sum", 1: "mean", 2: "max"}[a.get("mode", 0)]
    return (c.emit(op, [rows], {"dims": [1], "keepdim": 0}), None, None, None)


def one_hot_rows(c, indices, classes, dtype, skipped=None):
    """[N, classes] of `dtype`: row n is 1 at column indices[n] (0 everywhere
    for an index equal to `skipped`)."""
    ids = c.tensor(indices)
    count = c.value(indices).numel()
    column = c.emit("reshape", [ids], {"shape": [count, 1]})
    positions = torch.arange(classes, dtype=c.dtype(indices), device=c.value(indices).device)
    if skipped is not None and 0 <= skipped < classes:
        positions[skipped] = -1  # never equal to a valid index
    matches = c.emit("eq", [column, c.importer.constant(c.segment, positions)])
    return c.emit("cast", [matches], {"dtype": dtype_name(dtype)})


CONVERTERS.update({
    "aten._embedding_bag": _embedding_bag,
    "aten._embedding_bag_forward_only": _embedding_bag,
    "aten.index_select": _index_select,
    "aten.index": _index,
    "aten._unsafe_index": _index,  # index without bounds checks (2.x's upsample decompositions)
    "aten.gather": _gather,
})

