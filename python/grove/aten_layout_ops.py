"""Converters of ATen's constant padding (constant_pad_nd), flip, nearest
upsampling (upsample_nearest2d), cumsum (of floats: a GEMM with a
triangle of ones; of integers: exact, by log2(n) shifted adds) and the view
scatters functionalization writes through views with (slice_scatter,
select_scatter: concat of the base's slices around the source). Importing
this module adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_index_ops import take
from grove.aten_ops import CONVERTERS, broadcast_to, compute_dtype, row_major_strides
from grove.fx_common import Unsupported, dtype_name, op_name, strided_window_ids
from grove.image_windows import inverse_ids


def _constant_pad(c, a):
    """Pads (or, where negative, crops) the last dims: pad = [left, right] per
    dim from the last one backwards."""
    x = a["self"]
    dtype = c.dtype(x)
    shape = c.shape(x)
    pad = list(a["pad"])
    value = float(a.get("value") or 0)
    name = c.tensor(x)
    for pair in range(len(pad) // 2):
        dim = len(shape) - 1 - pair
        left, right = pad[2 * pair], pad[2 * pair + 1]
        if left < 0 or right < 0:
            start, end = max(-left, 0), shape[dim] - max(-right, 0)
            name = c.emit("slice", [name], {"dim": dim, "start": start, "end": end})
            shape[dim] = end - start
            left, right = max(left, 0), max(right, 0)
        parts = []
        for width in (left, None, right):
            if width is None:
                parts.append(name)
            elif width > 0:
                block = list(shape)
                block[dim] = width
                parts.append(c.emit("full", [], {"value": value, "shape": block,
                                                 "dtype": dtype_name(dtype)}))
        if len(parts) > 1:
            name = c.emit("concat", parts, {"dim": dim})
            shape[dim] += left + right
    return name


def take_positions(c, name, shape, dim, positions):
    """name (of `shape`) read at `positions` along `dim`: a gather by constant ids."""
    ids = c.importer.constant(c.segment, torch.tensor(positions).to(c.importer.device))
    return take(c, name, shape, [dim], ids, [len(positions)], dim)


def edge_positions(size, left, right, reflect):
    """The source of each padded position: mirrored (the edge itself not
    repeated) or clamped."""
    positions = []
    for i in range(-left, size + right):
        if reflect:
            positions.append(-i if i < 0 else (2 * (size - 1) - i if i >= size else i))
        else:
            positions.append(min(max(i, 0), size - 1))
    return positions


def _padded_dims(c, shape, pad, reflect):
    """(dim, left, right) of each padded dim: pairs from the last dim
    backwards, as constant_pad_nd's."""
    for pair in range(len(pad) // 2):
        dim = len(shape) - 1 - pair
        left, right, size = pad[2 * pair], pad[2 * pair + 1], shape[dim]
        if left == 0 and right == 0:
            continue
        if left < 0 or right < 0 or (reflect and max(left, right) >= size):
            raise Unsupported("%s of %s by %s" % (op_name(c.node.target), shape, pad))
        yield dim, left, right


def _edge_pad(reflect):
    """reflection_pad{1,2,3}d and replication_pad{1,2,3}d: each padded dim
    read at the mirrored or clamped positions: one gather by constant ids per
    dim."""
    def convert(c, a):
        x = a["self"]
        shape = list(c.shape(x))
        name = c.tensor(x)
        for dim, left, right in list(_padded_dims(c, shape, [int(p) for p in a["padding"]],
                                                  reflect)):
            positions = edge_positions(shape[dim], left, right, reflect)
            name = take_positions(c, name, shape, dim, positions)
            shape[dim] = len(positions)
        return name

    return convert


def _edge_pad_backward(reflect):
    """The backwards of reflection and replication padding: per padded dim,
    each input position sums the padded positions that read it."""
    def convert(c, a):
        x, grad = a["self"], a["grad_output"]
        shape = list(c.shape(x))
        dtype = c.dtype(grad)
        name = c.tensor(grad)
        padded = list(c.shape(grad))
        for dim, left, right in list(_padded_dims(c, shape, [int(p) for p in a["padding"]],
                                                  reflect)):
            sources = edge_positions(shape[dim], left, right, reflect)
            name = summed_at_sources(c, name, padded, dim, sources, shape[dim], dtype)
            padded[dim] = shape[dim]
        return name

    return convert


def summed_at_sources(c, name, shape, dim, sources, size, dtype):
    """The backward of reading dim `dim` of a value at positions `sources`
    (name: the gradient, `shape`, one source in [0, size) per position of
    dim, or None for a position in the padding, which reads nothing): each
    of the `size` positions sums the gradient at the positions that read it,
    gathered by constant ids with a zero row for those read fewer times than
    the most-read one."""
    ids = torch.tensor([-1 if source is None else source for source in sources],
                       dtype=torch.int64).view(-1, 1, 1)
    table = inverse_ids(ids, size, per_output=False)  # [size, width], sentinel len(sources)
    width = table.shape[1]
    zero_shape = list(shape)
    zero_shape[dim] = 1
    zero = c.emit("full", [], {"value": 0.0, "shape": zero_shape, "dtype": dtype_name(dtype)})
    padded = c.emit("concat", [name, zero], {"dim": dim})
    padded_shape = list(shape)
    padded_shape[dim] += 1
    ids = c.importer.constant(c.segment, table.reshape(-1).to(c.importer.device))
    picked = take(c, padded, padded_shape, [dim], ids, [size, width], dim)
    return c.emit("sum", [picked], {"dims": [dim + 1], "keepdim": 0})


def _flip(c, a):
    """Each flipped dim read backwards: a gather by constant reversed ids."""
    x = a["self"]
    shape = c.shape(x)
    name = c.tensor(x)
    for dim in sorted({d % len(shape) for d in a["dims"]}):
        if shape[dim] < 2:
            continue
        name = take_positions(c, name, shape, dim, list(range(shape[dim] - 1, -1, -1)))
    return name


def nearest_sources(in_size, out_size, scale):
    """PyTorch's nearest source index: floor(dst * in/out) in float32 (or
    1/scale where a scale factor is given), clamped."""
    if out_size == 2 * in_size and not scale:
        return torch.arange(out_size) // 2
    ratio = torch.tensor(1.0 / scale if scale else in_size / out_size, dtype=torch.float32)
    source = torch.floor(torch.arange(out_size, dtype=torch.float32) * ratio).to(torch.int64)
    return torch.clamp(source, max=in_size - 1)


def upsampling(c, a, what):
    """(input, its shape, output height and width, scale factors) of a 2-d
    upsampling op, either overload (sizes or scale factors)."""
    x = a.get("self", a.get("input"))
    shape = c.shape(x)
    if len(shape) != 4:
        raise Unsupported("%s upsampling of rank %d" % (what, len(shape)))
    out_h, out_w = c.result().shape[2:]
    scales = a.get("scale_factors") or [a.get("scales_h"), a.get("scales_w")]
    return x, shape, out_h, out_w, scales


def _upsample_nearest(c, a):
    x, shape, out_h, out_w, scales = upsampling(c, a, "nearest")
    rows = nearest_sources(shape[2], out_h, scales[0])
    cols = nearest_sources(shape[3], out_w, scales[1])
    ids = (rows[:, None] * shape[3] + cols[None, :]).to(c.importer.device)
    return take(c, c.tensor(x), shape, [2, 3], c.importer.constant(c.segment, ids),
                [out_h, out_w], 2)


def source_positions(in_size, out_size, align_corners, scale, dtype):
    """Where PyTorch's interpolating kernels read each output position along
    one axis, in `dtype` as they compute it: corners aligned, or the
    half-pixel centres (unclamped; bilinear clamps at 0, bicubic does not)."""
    positions = torch.arange(out_size, dtype=dtype)
    if align_corners:
        ratio = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
        return positions * torch.tensor(ratio, dtype=dtype)
    ratio = torch.tensor(1.0 / scale if scale else in_size / out_size, dtype=dtype)
    return ratio * (positions + 0.5) - 0.5


def bilinear_sources(in_size, out_size, align_corners, scale):
    """PyTorch's bilinear source rows along one axis, in float32 as its
    kernels compute them: (first index, second index, first weight, second
    weight) per output position."""
    source = source_positions(in_size, out_size, align_corners, scale, torch.float32)
    if not align_corners:
        source = torch.clamp(source, min=0.0)
    first = source.to(torch.int64)  # truncation: source >= 0
    second = first + (first < in_size - 1).to(torch.int64)
    second_weight = source - first.to(torch.float32)
    return first, second, 1.0 - second_weight, second_weight


def _upsample_bilinear(c, a):
    """Bilinear upsampling (segmentation heads: LR-ASPP, DeepLab, SegFormer):
    the four source pixels of each output gathered by constant ids, weighted
    as PyTorch's kernels weigh them (f32, then the input's dtype)."""
    x, shape, out_h, out_w, scales = upsampling(c, a, "bilinear")
    align = bool(a.get("align_corners"))
    top, bottom, top_weight, bottom_weight = bilinear_sources(shape[2], out_h, align, scales[0])
    left, right, left_weight, right_weight = bilinear_sources(shape[3], out_w, align, scales[1])
    compute = compute_dtype(c.dtype(x))
    image = c.operand(x, compute)

    def corner(rows, cols):
        ids = (rows[:, None] * shape[3] + cols[None, :]).to(c.importer.device)
        return take(c, image, shape, [2, 3], c.importer.constant(c.segment, ids),
                    [out_h, out_w], 2)

    def weight(values, column):
        values = values.to(compute).reshape([-1, 1] if column else [-1])
        return c.importer.constant(c.segment, values.to(c.importer.device))

    def across(rows):
        return c.emit("add", [c.emit("mul", [weight(left_weight, False), corner(rows, left)]),
                              c.emit("mul", [weight(right_weight, False),
                                             corner(rows, right)])])

    upper, lower = across(top), across(bottom)
    out = c.emit("add", [c.emit("mul", [weight(top_weight, True), upper]),
                         c.emit("mul", [weight(bottom_weight, True), lower])])
    return c.cast(out, compute, c.result().dtype)


def bicubic_taps(in_size, out_size, align_corners, scale, dtype):
    """PyTorch's bicubic taps along one axis (A = -0.75, borders clamped), its
    source position computed as its kernels do: (the four source indices
    [out, 4], their weights [out, 4] in `dtype`)."""
    source = source_positions(in_size, out_size, align_corners, scale, dtype)
    floor = torch.floor(source)
    t = source - floor
    a = -0.75

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = torch.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], dim=1)
    taps = floor.to(torch.int64)[:, None] + torch.arange(-1, 3)[None, :]
    return torch.clamp(taps, 0, in_size - 1), weights


def _upsample_bicubic(c, a):
    """Bicubic upsampling (ViT and DINOv2 position embeddings at another
    image size): along the height, then the width, each output the four
    taps gathered by constant ids and weighed as PyTorch weighs them (in f32
    for bf16 and f16, then the input's dtype)."""
    x, shape, out_h, out_w, scales = upsampling(c, a, "bicubic")
    align = bool(a.get("align_corners"))
    compute = compute_dtype(c.dtype(x))
    name = c.operand(x, compute)
    current = list(shape)
    for dim, out_size, scale in ((2, out_h, scales[0]), (3, out_w, scales[1])):
        taps, weights = bicubic_taps(shape[dim], out_size, align, scale, compute)
        total = None
        for k in range(4):
            picked = take_positions(c, name, current, dim, taps[:, k].tolist())
            weight = weights[:, k].reshape([-1, 1] if dim == 2 else [-1]).contiguous()
            term = c.emit("mul", [c.importer.constant(c.segment, weight.to(c.importer.device)),
                                  picked])
            total = term if total is None else c.emit("add", [total, term])
        name = total
        current[dim] = out_size
    return c.cast(name, compute, c.result().dtype)


def integer_cumsum(c, name, shape, dim, dtype):
    """Hillis-Steele: after step s every element holds the sum of the 2^s
    elements ending at it (exact in integers)."""
    size = shape[dim]
    shift = 1
    while shift < size:
        head = list(shape)
        head[dim] = shift
        zeros = c.emit("full", [], {"value": 0.0, "shape": head, "dtype": dtype_name(dtype)})
        earlier = c.emit("slice", [name], {"dim": dim, "start": 0, "end": size - shift})
        name = c.emit("add", [name, c.emit("concat", [zeros, earlier], {"dim": dim})])
        shift *= 2
    return name


def _cumsum(c, a):
    x = a["self"]
    dtype = c.result().dtype
    if dtype == torch.bool:
        raise Unsupported("cumsum to bool")
    if not dtype.is_floating_point:
        shape = c.shape(x)
        name = c.operand(x, dtype)
        return integer_cumsum(c, name, shape, a["dim"] % len(shape), dtype) if shape else name
    shape = c.shape(x)
    if not shape:
        return c.operand(x, dtype)
    dim = a["dim"] % len(shape)
    size = shape[dim]
    name = c.operand(x, dtype)
    last = len(shape) - 1
    if dim != last:
        name = c.emit("transpose", [name], {"dim0": dim, "dim1": last})
    triangle = torch.triu(torch.ones(size, size, dtype=dtype)).to(c.importer.device)
    summed = c.emit("matmul", [name if len(shape) > 1 else
                               c.emit("reshape", [name], {"shape": [1, size]}),
                               c.importer.constant(c.segment, triangle)])
    if len(shape) == 1:
        return c.emit("reshape", [summed], {"shape": [size]})
    if dim != last:
        summed = c.emit("transpose", [summed], {"dim0": dim, "dim1": last})
    return summed


def _around(c, base, shape, dim, start, end, middle):
    """base along `dim` with [start, end) replaced by grove value `middle`."""
    parts = []
    if start > 0:
        parts.append(c.emit("slice", [base], {"dim": dim, "start": 0, "end": start}))
    parts.append(middle)
    if end < shape[dim]:
        parts.append(c.emit("slice", [base], {"dim": dim, "start": end, "end": shape[dim]}))
    return parts[0] if len(parts) == 1 else c.emit("concat", parts, {"dim": dim})


def _slice_scatter(c, a):
    """self with self[..., start:end, ...] (along dim, step 1) replaced by src:
    a write through a slice view, functionalized (`v[:, :, pos] = x`)."""
    x, src = a["self"], a["src"]
    shape, dtype = c.shape(x), c.dtype(x)
    dim = a.get("dim", 0) % len(shape)
    if a.get("step", 1) not in (None, 1):
        raise Unsupported("slice_scatter with step %s" % a["step"])
    start = a.get("start") or 0
    end = a.get("end")
    end = shape[dim] if end is None else end
    start = max(start + shape[dim] if start < 0 else start, 0)
    end = min(end + shape[dim] if end < 0 else end, shape[dim])
    if c.shape(src) != shape[:dim] + [end - start] + shape[dim + 1:]:
        raise Unsupported("slice_scatter of a source shaped %s" % c.shape(src))
    return _around(c, c.tensor(x), shape, dim, start, end, c.operand(src, dtype))


def _select_scatter(c, a):
    x, src = a["self"], a["src"]
    shape, dtype = c.shape(x), c.dtype(x)
    dim = a["dim"] % len(shape)
    index = a["index"] % shape[dim]
    middle = c.emit("reshape", [c.operand(src, dtype)],
                    {"shape": shape[:dim] + [1] + shape[dim + 1:]})
    return _around(c, c.tensor(x), shape, dim, index, index + 1, middle)


def slice_positions(size, start, end, step):
    """The positions x[start:end:step] reads along a dim of `size`, as
    PyTorch normalizes them (negative ends wrap, then clamp)."""
    start = 0 if start is None else start
    end = size if end is None else end
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, 0), size)
    return list(range(start, end, step))


def strided_slice(c, x, dim, start, end, step):
    """x[..., start:end:step, ...] with step > 1 (LeViT's subsampling, YOLOv5's
    Focus): a gather by constant positions along `dim`."""
    shape = c.shape(x)
    dim %= len(shape)
    positions = slice_positions(shape[dim], start, end, step)
    if not positions:
        raise Unsupported("an empty strided slice")
    return take_positions(c, c.tensor(x), shape, dim, positions)


_STEP_ONE_SLICE = CONVERTERS["aten.slice"]


def _slice(c, a):
    """aten_ops' slice (a view) for step 1, else strided_slice."""
    if a.get("step", 1) in (None, 1):
        return _STEP_ONE_SLICE(c, a)
    return strided_slice(c, a["self"], a["dim"], a.get("start"), a.get("end"), a["step"])


def strided_slice_backward(c, grad, sizes, dim, start, end, step, dtype):
    """The gradient of a strided slice: each input position takes its grad
    row, or a zero row where the slice skipped it (one gather of [grad;
    zeros] along `dim`)."""
    dim %= len(sizes)
    positions = slice_positions(sizes[dim], start, end, step)
    grad_shape = list(sizes)
    grad_shape[dim] = len(positions)
    zero_shape = list(sizes)
    zero_shape[dim] = 1
    zeros = c.emit("full", [], {"value": 0.0, "shape": zero_shape, "dtype": dtype_name(dtype)})
    table = c.emit("concat", [grad, zeros], {"dim": dim})
    where = {position: index for index, position in enumerate(positions)}
    table_shape = list(sizes)
    table_shape[dim] = len(positions) + 1
    return take_positions(c, table, table_shape, dim,
                          [where.get(i, len(positions)) for i in range(sizes[dim])])


def _flat_window(c, a, base):
    """(the first storage element, the count) of as_strided's window where it
    reads `base`'s elements in order: `base` contiguous from its storage's
    start, the window row-major (strides of dims of extent 1 ignored) and
    inside base. Anything else moves elements, which grove's values (not
    storage) cannot say: Unsupported. So is an explicit offset into a graph
    input, whose storage offset a call may change."""
    value = c.value(base)
    size, stride = [int(extent) for extent in a["size"]], [int(step) for step in a["stride"]]
    if a.get("storage_offset") is not None and base.op != "call_function":
        # A graph input's own storage offset may differ from call to call,
        # and an explicit offset counts from its storage's start.
        raise Unsupported("%s of a graph input at an explicit storage offset"
                          % op_name(c.node.target))
    offset = int(a.get("storage_offset") or 0)
    count = 1
    for extent in size:
        count *= extent
    if not value.is_contiguous() or value.storage_offset() != 0 or \
            offset + count > value.numel() or any(
                have != want for have, want, extent in zip(stride, row_major_strides(size), size)
                if extent > 1):
        raise Unsupported("%s that moves elements" % op_name(c.node.target))
    return offset, count


# Elements of a window gathered by constant ids (8 bytes each: 32 MiB at most);
# a larger window stays a PyTorch step (Note [Layouts a PyTorch step reads]).
_MOST_GATHERED = 1 << 22


def _as_strided(c, a):
    """as_strided that reads x's elements in order, x contiguous: x's own
    layout (the restride adaptive_avg_pool2d to 1x1 applies to its mean of a
    channels-last input: ConvNeXt's and EfficientNet's heads), or a
    row-major window of its elements in another shape (the backward of that
    restride: a flat gradient viewed as [N, C, 1, 1]). Any other window over
    x's own elements (HF Longformer's overlapping chunks) is a gather by
    constant ids (Note [Strided windows over a value's own elements],
    fx_common.py)."""
    x = a["self"]
    size = [int(extent) for extent in a["size"]]
    try:
        offset, count = _flat_window(c, a, x)
    except Unsupported:
        return _gathered_window(c, a, x, size)
    if size == c.shape(x):
        return c.tensor(x)
    flat = c.emit("reshape", [c.tensor(x)], {"shape": [c.value(x).numel()]})
    if offset or count != c.value(x).numel():
        flat = c.emit("slice", [flat], {"dim": 0, "start": offset, "end": offset + count})
    return c.emit("reshape", [flat], {"shape": size})


def _gathered_window(c, a, x, size):
    value = c.value(x)
    if a.get("storage_offset") is not None and x.op != "call_function":
        raise Unsupported("aten.as_strided of a graph input at an explicit storage offset")
    count = 1
    for extent in size:
        count *= extent
    if count > _MOST_GATHERED:
        raise Unsupported("aten.as_strided that moves %d elements" % count)
    ids = strided_window_ids(value, size, a["stride"], a.get("storage_offset"))
    if ids is None:
        raise Unsupported("aten.as_strided that reads memory outside its operand's elements")
    flat = c.emit("reshape", [c.tensor(x)], {"shape": [value.numel()]})
    constant = c.importer.constant(c.segment, ids.to(c.importer.device))
    picked = take(c, flat, [value.numel()], [0], constant, [count], 0)
    return c.emit("reshape", [picked], {"shape": size})


def _as_strided_scatter(c, a):
    """as_strided_scatter whose window is a row-major run of the base's
    elements (_flat_window): the base with that run replaced by src's
    elements (AOTAutograd's backward of an as_strided view: ConvNeXt's and
    Swin's heads in training)."""
    base, src = a["self"], a["src"]
    offset, count = _flat_window(c, a, base)
    if c.value(src).numel() != count:
        raise Unsupported("as_strided_scatter of %d elements into a window of %d"
                          % (c.value(src).numel(), count))
    total = c.value(base).numel()
    shape = c.shape(base)
    dtype = c.dtype(base)
    run = c.emit("reshape", [c.operand(src, dtype)], {"shape": [count]})
    if count == total:
        return c.emit("reshape", [run], {"shape": shape})
    flat = c.emit("reshape", [c.tensor(base)], {"shape": [total]})
    parts = []
    if offset:
        parts.append(c.emit("slice", [flat], {"dim": 0, "start": 0, "end": offset}))
    parts.append(run)
    if offset + count < total:
        parts.append(c.emit("slice", [flat], {"dim": 0, "start": offset + count, "end": total}))
    joined = c.emit("concat", parts, {"dim": 0}) if len(parts) > 1 else parts[0]
    return c.emit("reshape", [joined], {"shape": shape})


def _roll(c, a):
    """Each rolled dim as the concat of its last `shift` and its first
    positions (Swin's shifted windows); no dims: the flattened tensor rolled."""
    x = a["self"]
    shape = c.shape(x)
    shifts = list(a["shifts"]) if isinstance(a["shifts"], (list, tuple)) else [a["shifts"]]
    dims = list(a.get("dims") or [])
    name = c.tensor(x)
    if not dims:
        if len(shifts) != 1:
            raise Unsupported("roll of the flattened tensor by %d shifts" % len(shifts))
        flat = c.emit("reshape", [name], {"shape": [c.value(x).numel()]})
        rolled = _rolled(c, flat, c.value(x).numel(), 0, shifts[0])
        return c.emit("reshape", [rolled], {"shape": shape})
    if len(shifts) != len(dims):
        raise Unsupported("roll with %d shifts for %d dims" % (len(shifts), len(dims)))
    for shift, dim in zip(shifts, dims):
        dim %= len(shape)
        name = _rolled(c, name, shape[dim], dim, shift)
    return name


def _rolled(c, name, size, dim, shift):
    """`name` rolled by `shift` along `dim` of `size` positions."""
    shift = shift % size if size else 0
    if shift == 0:
        return name
    tail = c.emit("slice", [name], {"dim": dim, "start": size - shift, "end": size})
    head = c.emit("slice", [name], {"dim": dim, "start": 0, "end": size - shift})
    return c.emit("concat", [tail, head], {"dim": dim})


def _repeat(c, a):
    """repeat(x, repeats): each dim tiled `repeats` times (new leading dims for
    extra repeats), as one broadcast: x viewed as [1, s0, 1, s1, ...] plus
    zeros of [r0, s0, r1, s1, ...], merged to [r0 * s0, r1 * s1, ...]."""
    x = a["self"]
    repeats = [int(r) for r in a["repeats"]]
    shape = [1] * (len(repeats) - len(c.shape(x))) + list(c.shape(x))
    if len(shape) != len(repeats):
        raise Unsupported("repeat with fewer repeats than dims")
    out = [r * s for r, s in zip(repeats, shape)]
    if repeats == [1] * len(repeats):
        return c.emit("reshape", [c.tensor(x)], {"shape": out})
    interleaved = [e for s in shape for e in (1, s)]
    tiled = [e for r, s in zip(repeats, shape) for e in (r, s)]
    spread = c.emit("reshape", [c.tensor(x)], {"shape": interleaved})
    wide = broadcast_to(c, spread, c.dtype(x), tiled)
    return c.emit("reshape", [wide], {"shape": out})


def _pixel_shuffle(unshuffle):
    """pixel_shuffle ([*, C r^2, H, W] -> [*, C, H r, W r]) and its inverse,
    as a reshape, a permute and a reshape."""
    def convert(c, a):
        x = a["self"]
        shape = list(c.shape(x))
        r = int(a["downscale_factor" if unshuffle else "upscale_factor"])
        lead, (channels, height, width) = shape[:-3], shape[-3:]
        n = len(lead)
        if unshuffle:
            split = lead + [channels, height // r, r, width // r, r]
            order = list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3]
        else:
            split = lead + [channels // (r * r), r, r, height, width]
            order = list(range(n)) + [n, n + 3, n + 1, n + 4, n + 2]
        moved = c.emit("permute", [c.emit("reshape", [c.tensor(x)], {"shape": split})],
                       {"order": order})
        return c.emit("reshape", [moved], {"shape": list(c.result().shape)})

    return convert


CONVERTERS.update({
    "aten.repeat": _repeat,
    "aten.pixel_shuffle": _pixel_shuffle(False),
    "aten.pixel_unshuffle": _pixel_shuffle(True),
    "aten.roll": _roll,
    "aten.as_strided": _as_strided,
    "aten.as_strided_scatter": _as_strided_scatter,
    "aten.slice": _slice,
    "aten.slice_scatter": _slice_scatter,
    "aten.select_scatter": _select_scatter,
    "aten.constant_pad_nd": _constant_pad,
    "aten.reflection_pad1d": _edge_pad(True),
    "aten.reflection_pad2d": _edge_pad(True),
    "aten.reflection_pad3d": _edge_pad(True),
    "aten.replication_pad1d": _edge_pad(False),
    "aten.replication_pad2d": _edge_pad(False),
    "aten.replication_pad3d": _edge_pad(False),
    "aten.reflection_pad1d_backward": _edge_pad_backward(True),
    "aten.reflection_pad2d_backward": _edge_pad_backward(True),
    "aten.reflection_pad3d_backward": _edge_pad_backward(True),
    "aten.replication_pad1d_backward": _edge_pad_backward(False),
    "aten.replication_pad2d_backward": _edge_pad_backward(False),
    "aten.replication_pad3d_backward": _edge_pad_backward(False),
    "aten.flip": _flip,
    "aten.upsample_nearest2d": _upsample_nearest,
    "aten.upsample_bilinear2d": _upsample_bilinear,
    "aten.upsample_bicubic2d": _upsample_bicubic,
    "aten.cumsum": _cumsum,
})
