"""Converters of mixture-of-experts dispatch: histc (tokens per expert) and
the grouped matrix product of tokens sorted by expert (PyTorch's
_grouped_mm, transformers' grouped_mm_fallback), the latter computed for every
expert and picked per row (Note [Grouped products computed densely]).
Importing this module adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported, op_name

# Note [Grouped products computed densely]: a grouped product multiplies row
# t of x [T, K] by weight[e] [K, N], e the group whose range of rows holds t
# (offs [E]: each group's end, a running count the router made at run time).
# The counts are data, the shapes are not: grove computes x @ weight[e] for
# every e ([E, T, N], one batched GEMM), finds each row's group as the number
# of ends at or before it, and gathers row (e, t); a row past the last end
# reads zeros. That is E times the arithmetic of the grouped product, so it
# is taken while E * T * N stays under _MAX_DENSE (decode's few tokens);
# beyond, the op stays in PyTorch. The op's meaning is checked once per op on
# a probe against the op itself (another library's op of this name that
# means something else stays in PyTorch). Tests: GroupedProductTest
# (tests/python/importer_math_ops_test.py).
_MAX_DENSE = 1 << 24
_CHECKED = {}  # op name -> whether the probe agreed


def _dense(x, weight, offs):
    """The grouped product as the converter computes it, in PyTorch (the probe's side)."""
    dense = torch.matmul(x[None], weight)  # [E, T, N]
    rows = torch.arange(x.shape[0])[:, None]
    group = (rows >= offs.to(torch.int64)[None, :]).sum(1)
    picked = dense[group.clamp(max=weight.shape[0] - 1), torch.arange(x.shape[0])]
    return torch.where((group < weight.shape[0])[:, None], picked, torch.zeros_like(picked))


def _agrees(c, call):
    """Whether the op computes the grouped product, on a probe (once per op)."""
    name = op_name(c.node.target)
    if name not in _CHECKED:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(7, 3, generator=generator)
        weight = torch.randn(3, 3, 2, generator=generator)
        offs = torch.tensor([2, 2, 6], dtype=torch.int32)
        device = c.importer.device  # the op's own device: some have no CPU kernel
        try:
            got = call(x.to(device), weight.to(device), offs.to(device))[:6].cpu()
            _CHECKED[name] = bool(torch.allclose(got.float(), _dense(x, weight, offs)[:6],
                                                 rtol=1e-4, atol=1e-5))
        except Exception:  # no kernel for the probe's device or dtype
            _CHECKED[name] = False
    return _CHECKED[name]


def _grouped(c, x, weight, offs):
    shape, weight_shape = c.shape(x), c.shape(weight)
    if len(shape) != 2 or len(weight_shape) != 3 or offs is None:
        raise Unsupported("a grouped product other than tokens [T, K] by experts [E, K, N]")
    rows, _ = shape
    experts, _, width = weight_shape
    if experts * rows * width > _MAX_DENSE:
        raise Unsupported("a grouped product of %d experts x %d rows x %d columns (grove computes "
                          "every expert's, up to %d values)" % (experts, rows, width, _MAX_DENSE))
    dtype = c.dtype(x)
    dense = c.emit("matmul", [c.emit("reshape", [c.tensor(x)], {"shape": [1] + list(shape)}),
                              c.operand(weight, dtype)])  # [E, T, N]
    positions = c.importer.constant(c.segment, torch.arange(rows, dtype=torch.int64)[:, None].to(
        c.importer.device))
    ends = c.emit("reshape", [c.operand(offs, torch.int64)], {"shape": [1, experts]})
    reached = c.cast(c.emit("ge", [positions, ends]), torch.bool, torch.int32)
    group = c.cast(c.emit("sum", [reached], {"dims": [1], "keepdim": 0}), torch.int32,
                   torch.int64)  # [T]: at most E ends counted, exact
    inside = c.emit("lt", [group, c.scalar(experts, torch.int64)])
    last = c.scalar(experts - 1, torch.int64)
    clamped = c.emit("where", [inside, group, last])
    flat = c.emit("add", [c.emit("mul", [clamped, c.scalar(rows, torch.int64)]),
                          c.emit("reshape", [positions], {"shape": [rows]})])
    table = c.emit("reshape", [dense], {"shape": [experts * rows, width]})
    picked = c.emit("embedding", [table, flat])
    inside = c.emit("reshape", [inside], {"shape": [rows, 1]})
    return c.emit("where", [inside, picked, c.scalar(0.0, dtype)])


def _transformers_grouped_mm(c, a):
    if not _agrees(c, lambda x, w, offs: c.node.target(x, w, offs)):
        raise Unsupported("%s does not compute the grouped product on a probe"
                          % op_name(c.node.target))
    return _grouped(c, a["input"], a["weight"], a["offs"])


def _aten_grouped_mm(c, a):
    if a.get("bias") is not None or a.get("out_dtype") not in (None, c.dtype(a["self"])):
        raise Unsupported("_grouped_mm with a bias or another output dtype")
    if not _agrees(c, lambda x, w, offs: c.node.target(x, w, offs)):
        raise Unsupported("_grouped_mm does not compute the grouped product on a probe")
    return _grouped(c, a["self"], a["mat2"], a.get("offs"))


def _histc(c, a):
    """Counts per bin: bin = (v - min) * bins / (max - min), rounded down
    (CUDA's order), max itself in the last bin, values outside [min, max]
    not counted. Integer values (transformers' MoE routers count int32
    expert ids; CUDA divides in integers) are counted in f32 where that is
    exact: bounds and (max - min) * bins under 2^22, so no value near the
    range rounds across an edge, and the quotient of two such integers
    rounds down to the integer quotient."""
    x = a["self"]
    bins = int(a.get("bins", 100))
    low, high = float(a.get("min", 0)), float(a.get("max", 0))
    given = c.dtype(x)
    if low == high:
        raise Unsupported("histc over the data's own range (min == max)")
    count = max(c.value(x).numel(), 1)
    if count * bins > (1 << 26) or count >= (1 << 24):
        raise Unsupported("histc of %d values in %d bins" % (count, bins))
    values = c.tensor(x)
    dtype = given
    if not given.is_floating_point:
        low, high = float(int(low)), float(int(high))  # CUDA casts the bounds to the values' type
        if given == torch.bool or max(abs(low), abs(high), (high - low) * bins) >= (1 << 22):
            raise Unsupported("histc of %s values in [%g, %g]" % (given, low, high))
        if low == high:
            raise Unsupported("histc over the data's own range (min == max)")
        dtype = torch.float32
        values = c.cast(values, given, dtype)
    flat = c.emit("reshape", [values], {"shape": [count, 1]})
    shifted = c.emit("mul", [c.emit("sub", [flat, c.scalar(low, dtype)]), c.scalar(bins, dtype)])
    position = c.emit("floor", [c.emit("div", [shifted, c.scalar(high - low, dtype)])])
    position = c.emit("where", [c.emit("eq", [flat, c.scalar(high, dtype)]),
                                c.scalar(bins - 1, dtype), position])
    inside = c.emit("bitwise_and", [c.emit("ge", [flat, c.scalar(low, dtype)]),
                                    c.emit("le", [flat, c.scalar(high, dtype)])])
    edges = c.importer.constant(c.segment, torch.arange(bins, dtype=dtype)[None, :].to(
        c.importer.device))
    hits = c.emit("bitwise_and", [c.emit("eq", [position, edges]), inside])
    counts = c.emit("sum", [c.cast(hits, torch.bool, dtype)], {"dims": [0], "keepdim": 0})
    return counts if dtype == given else c.cast(counts, dtype, given)


CONVERTERS.update({
    "transformers.grouped_mm_fallback": _transformers_grouped_mm,
    "aten._grouped_mm": _aten_grouped_mm,
    "aten.histc": _histc,
})
