"""Converters of ATen's writes at tensor indices, out of place: index_put
(and _index_put_impl), index_copy, index_add, scatter and scatter_add (and
masked_scatter, written as a gather at the mask's running count). Each
row r of self (the
indexed dims flattened) compares itself with every target row: the last
source row aimed at it replaces it (or, accumulating, every such row adds to
it through one GEMM of the [rows, sources] matches). The cost is rows x
sources comparisons, small for a KV cache's few new positions. Importing this
module adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_index_ops import _int64, _product, _wrapped
from grove.aten_layout_ops import integer_cumsum
from grove.aten_ops import CONVERTERS, broadcast_to
from grove.fx_common import Unsupported, dtype_name


def _put_rows(c, table, rows, targets, values, sources, accumulate, dtype):
    """table [rows, D] with values [sources, D] written at rows targets [sources]."""
    row_ids = c.importer.constant(c.segment, torch.arange(rows, dtype=torch.int64).view(
        rows, 1).to(c.importer.device))
    targets = c.emit("reshape", [targets], {"shape": [1, sources]})
    matches = c.emit("eq", [row_ids, targets])  # [rows, sources]
    if accumulate:
        weights = c.emit("cast", [matches], {"dtype": dtype_name(dtype)})
        return c.emit("add", [table, c.emit("matmul", [weights, values])])
    positions = c.importer.constant(c.segment, torch.arange(sources, dtype=torch.float32).view(
        1, sources).to(c.importer.device))
    last = c.emit("max", [c.emit("where", [matches, positions, c.scalar(-1.0, torch.float32)])],
                  {"dims": [1], "keepdim": 0})  # [rows]
    written = c.emit("ge", [last, c.scalar(0.0, torch.float32)])
    source = c.emit("cast", [c.emit("maximum", [last, c.scalar(0.0, torch.float32)])],
                    {"dtype": "i64"})
    picked = c.emit("embedding", [values, source])  # [rows, D]
    written = c.emit("reshape", [written], {"shape": [rows, 1]})
    return c.emit("where", [written, picked, table])


# Note [One written position is a where]: a write of one position along one
# dim (a decode step's KV cache update: index_copy_(2, input_pos, k), or
# cache[:, :, input_pos] = v) is x where the position matches, else the
# values broadcast along that dim: elementwise over x's own layout (one
# kernel, fused into the write back into a static cache), where the general
# form copies x into rows and gathers every row (Note [Windows as gathers]'s
# embedding, several kernels and passes over the whole cache). Tests:
# importer_ops_test's IndexPutTest (one position, against PyTorch) and
# static_cache_decode_test.
def _broadcasts_to(shape, target):
    try:
        return list(torch.broadcast_shapes(tuple(shape), tuple(target))) == list(target)
    except RuntimeError:
        return False


def _write_one_position(c, x, dim, targets, values):
    shape = c.shape(x)
    along = [1] * len(shape)
    along[dim] = shape[dim]
    positions = c.importer.constant(c.segment, torch.arange(shape[dim], dtype=torch.int64).view(
        along).to(c.importer.device))
    target = c.emit("reshape", [targets], {"shape": [1] * len(shape)})
    return c.emit("where", [c.emit("eq", [positions, target]), values, c.tensor(x)])


def _write(c, x, dims, targets, ids_shape, values, values_shape, accumulate, position):
    """self x with grove value `values` (indexed like x[indices]) written at
    the flat rows `targets` (shape ids_shape) of its dims `dims`."""
    shape = c.shape(x)
    dtype = c.dtype(x)
    if accumulate and not dtype.is_floating_point:
        raise Unsupported("accumulating writes into %s tensors" % dtype)
    rest = [d for d in range(len(shape)) if d not in dims]
    rest_sizes = [shape[d] for d in rest]
    rows, width = _product(shape[d] for d in dims), _product(rest_sizes)
    sources = _product(ids_shape)
    k = len(ids_shape)
    expected = rest_sizes[:position] + list(ids_shape) + rest_sizes[position:]
    if (sources == 1 and not accumulate and len(dims) == 1 and k == 1 and
            position == dims[0] and _broadcasts_to(values_shape, expected)):
        return _write_one_position(c, x, dims[0], targets, values)
    order = list(dims) + rest
    name = c.tensor(x)
    if order != list(range(len(shape))):
        name = c.emit("permute", [name], {"order": order})
    table = c.emit("reshape", [name], {"shape": [rows, width]})
    # values broadcast to x[indices]'s shape, the ids' dims moved first.
    if list(values_shape) != expected:
        zeros = c.emit("full", [], {"value": 0.0, "shape": expected, "dtype": dtype_name(dtype)})
        values = c.emit("add", [values, zeros])
    if position:
        moved = list(range(position, position + k)) + list(range(position)) + \
            list(range(position + k, len(expected)))
        values = c.emit("permute", [values], {"order": moved})
    values = c.emit("reshape", [values], {"shape": [sources, width]})
    targets = c.emit("reshape", [targets], {"shape": [sources]})
    out = _put_rows(c, table, rows, targets, values, sources, accumulate, dtype)
    out = c.emit("reshape", [out], {"shape": [shape[d] for d in order]})
    if order != list(range(len(shape))):
        inverse = [order.index(d) for d in range(len(shape))]
        out = c.emit("permute", [out], {"order": inverse})
    return out


def _masked_put(c, a, x, shape, indices, dims):
    """x[mask] = v (or += v) with one boolean mask and a value that is the same
    for every selected position (a scalar, or one row of the dims after the
    mask): a where, no data-dependent count. A value per selected position
    (its count known only at run time) stays in PyTorch."""
    if len(dims) != 1 or c.dtype(indices[dims[0]]) != torch.bool:
        raise Unsupported("index_put with a boolean mask among other indices")
    d = dims[0]
    mask_shape = list(c.shape(indices[d]))
    rest = list(shape[d + len(mask_shape):])
    if list(shape[d:d + len(mask_shape)]) != mask_shape:
        raise Unsupported("index_put with a boolean mask of another shape")
    values = a["values"]
    value_shape = list(c.shape(values))
    if value_shape[:1] == [1] and len(value_shape) == len(rest) + 1:
        value_shape = value_shape[1:]
    if len(value_shape) > len(rest) or any(
            have not in (1, want) for have, want in zip(value_shape[::-1], rest[::-1])):
        raise Unsupported("index_put with a boolean mask and a value per selected position")
    dtype = c.dtype(x)
    mask = c.emit("reshape", [c.tensor(indices[d])],
                  {"shape": [1] * d + mask_shape + [1] * len(rest)})
    value = c.emit("reshape", [c.operand(values, dtype)],
                   {"shape": [1] * (d + len(mask_shape)) + [1] * (len(rest) - len(value_shape))
                    + value_shape})
    base = c.tensor(x)
    if a.get("accumulate"):
        value = c.emit("add", [base, value])
    return c.emit("where", [mask, value, base])


def _index_put(c, a):
    x = a["self"]
    shape = c.shape(x)
    indices = list(a["indices"])
    dims = [d for d, index in enumerate(indices) if index is not None]
    if not dims:
        raise Unsupported("index_put without tensor indices")
    for d in dims:
        if not isinstance(indices[d], torch.fx.Node):
            raise Unsupported("index_put with a boolean mask")
        if c.dtype(indices[d]) in (torch.bool, torch.uint8):
            return _masked_put(c, a, x, shape, indices, dims)
    ids_shape = list(torch.broadcast_shapes(*[tuple(c.shape(indices[d])) for d in dims]))
    flat = None
    for k, d in enumerate(dims):
        ids = _wrapped(c, _int64(c, indices[d]), shape[d])
        stride = _product(shape[e] for e in dims[k + 1:])
        if stride != 1:
            ids = c.emit("mul", [ids, c.scalar(stride, torch.int64)])
        flat = ids if flat is None else c.emit("add", [flat, ids])
    position = dims[0] if dims == list(range(dims[0], dims[-1] + 1)) else 0
    values = a["values"]
    return _write(c, x, dims, flat, ids_shape, c.operand(values, c.dtype(x)), c.shape(values),
                  bool(a["accumulate"]), position)


def _index_copy_or_add(accumulate):
    def convert(c, a):
        x, index, source = a["self"], a["index"], a.get("source")
        shape = c.shape(x)
        dim = a["dim"] % len(shape)
        ids = _wrapped(c, _int64(c, index), shape[dim])
        values = c.operand(source, c.dtype(x))
        alpha = a.get("alpha", 1)
        if accumulate and alpha not in (None, 1):
            values = c.emit("mul", [values, c.scalar(alpha, c.dtype(x))])
        return _write(c, x, [dim], ids, c.shape(index), values, c.shape(source), accumulate, dim)

    return convert


def _pad_to(c, name, shape, target, value, dtype):
    """`name` (of `shape`) extended at the end of each dim to `target` with `value`."""
    shape = list(shape)
    for dim, (size, wanted) in enumerate(zip(list(shape), target)):
        if size < wanted:
            block = list(shape)
            block[dim] = wanted - size
            fill = c.emit("full", [], {"value": float(value), "shape": block,
                                       "dtype": dtype_name(dtype)})
            name = c.emit("concat", [name, fill], {"dim": dim})
            shape[dim] = wanted
    return name


def _scatter(accumulate):
    """scatter / scatter_add along dim d, where index has self's sizes in the
    other dims: each line of self (every dim but d, moved last) compares its
    R positions with the line's J indices, [lines, R, J] comparisons."""

    def convert(c, a):
        x, index = a["self"], a["index"]
        shape, index_shape = c.shape(x), c.shape(index)
        dtype = c.dtype(x)
        if a.get("reduce") is not None:
            raise Unsupported("scatter with reduce=%r" % a["reduce"])
        if not shape:
            raise Unsupported("scatter into a 0-d tensor")
        dim = a["dim"] % len(shape)
        last = len(shape) - 1
        src = a.get("src", a.get("value"))
        if accumulate and not dtype.is_floating_point:
            raise Unsupported("scatter_add of %s tensors" % dtype)
        rows, count = shape[dim], index_shape[dim]
        lines = c.value(x).numel() // max(rows, 1)

        def lined(name, size):  # dim moved last, then [lines, size]
            if dim != last:
                name = c.emit("transpose", [name], {"dim0": dim, "dim1": last})
            return c.emit("reshape", [name], {"shape": [lines, size]})

        table = lined(c.tensor(x), rows)
        # An index smaller than self outside dim leaves the rest as it is:
        # padded with targets no position has.
        padded = [shape[k] if k != dim else count for k in range(len(shape))]
        targets = _pad_to(c, _wrapped(c, _int64(c, index), rows), index_shape, padded, -1,
                          torch.int64)
        targets = lined(targets, count)
        positions = c.importer.constant(c.segment, torch.arange(rows, dtype=torch.int64).view(
            1, rows, 1).to(c.importer.device))
        matches = c.emit("eq", [positions, c.emit("reshape", [targets],
                                                  {"shape": [lines, 1, count]})])
        if isinstance(src, torch.fx.Node):
            values = c.operand(src, dtype)
            for k, (size, used) in enumerate(zip(c.shape(src), index_shape)):
                if size > used:  # only src's index-shaped corner is read
                    values = c.emit("slice", [values], {"dim": k, "start": 0, "end": used})
            values = lined(_pad_to(c, values, index_shape, padded, 0, dtype), count)
        else:
            values = c.emit("full", [], {"value": float(src), "shape": [lines, count],
                                         "dtype": dtype_name(dtype)})
        if accumulate:
            spread = c.emit("where", [matches, c.emit("reshape", [values], {
                "shape": [lines, 1, count]}), c.scalar(0.0, dtype)])
            out = c.emit("add", [table, c.emit("sum", [spread], {"dims": [2], "keepdim": 0})])
        else:
            order = c.importer.constant(c.segment, torch.arange(count, dtype=torch.float32).view(
                1, 1, count).to(c.importer.device))
            chosen = c.emit("max", [c.emit("where", [matches, order,
                                                     c.scalar(-1.0, torch.float32)])],
                            {"dims": [2], "keepdim": 0})  # [lines, R]: the last write
            written = c.emit("ge", [chosen, c.scalar(0.0, torch.float32)])
            line_base = c.importer.constant(c.segment, (torch.arange(
                lines, dtype=torch.int64) * count).view(lines, 1).to(c.importer.device))
            flat = c.emit("add", [c.emit("cast", [c.emit("maximum", [
                chosen, c.scalar(0.0, torch.float32)])], {"dtype": "i64"}), line_base])
            picked = c.emit("embedding", [c.emit("reshape", [values], {
                "shape": [lines * count, 1]}), flat])
            picked = c.emit("reshape", [picked], {"shape": [lines, rows]})
            out = c.emit("where", [written, picked, table])
        moved = list(shape)
        moved[dim], moved[last] = moved[last], moved[dim]
        out = c.emit("reshape", [out], {"shape": moved})
        if dim != last:
            out = c.emit("transpose", [out], {"dim0": dim, "dim1": last})
        return out

    return convert


def _masked_scatter(c, a):
    """masked_scatter(self, mask, source): the positions where the mask
    (broadcast to self's shape) is true take source's elements in order
    (HF's vision-language models merging image features into the token
    embeddings). Each position's source element is the running count of true
    positions before it (an integer cumsum over the flattened mask), read
    from the flattened source by one gather; the rest keep self."""
    x, mask, source = a["self"], a["mask"], a["source"]
    shape = c.shape(x)
    dtype = c.dtype(x)
    count = _product(shape)
    if not shape or c.dtype(mask) != torch.bool or c.dtype(source) != dtype:
        raise Unsupported("masked_scatter of %s into a %s tensor of shape %s"
                          % (c.dtype(source), dtype, shape))
    keep = broadcast_to(c, c.tensor(mask), torch.bool, shape)
    flat_keep = c.emit("reshape", [keep], {"shape": [count]})
    ones = c.cast(flat_keep, torch.bool, torch.int64)
    before = c.emit("sub", [integer_cumsum(c, ones, [count], 0, torch.int64),
                            c.scalar(1, torch.int64)])
    available = c.value(source).numel()
    if available == 0:
        raise Unsupported("masked_scatter from an empty source")
    ids = c.emit("minimum", [c.emit("maximum", [before, c.scalar(0, torch.int64)]),
                             c.scalar(available - 1, torch.int64)])
    table = c.emit("reshape", [c.tensor(source)], {"shape": [available, 1]})
    picked = c.emit("reshape", [c.emit("embedding", [table, ids])], {"shape": list(shape)})
    return c.emit("where", [keep, picked, c.tensor(x)])


CONVERTERS.update({
    "aten.masked_scatter": _masked_scatter,
    "aten.scatter": _scatter(False),
    "aten.scatter_add": _scatter(True),
    "aten.index_put": _index_put,
    "aten._index_put_impl": _index_put,
    "aten._unsafe_index_put": _index_put,  # index_put without bounds checks (2.x decompositions)
    "aten.index_copy": _index_copy_or_add(False),
    "aten.index_add": _index_copy_or_add(True),
})
