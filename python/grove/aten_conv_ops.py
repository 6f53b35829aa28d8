"""Converters of ATen's image ops: 2-d convolution (im2col through grove's
embedding, then one GEMM) and max, average and adaptive-average pooling.
Importing this module adds them to aten_ops.CONVERTERS (Note [Windows as
gathers])."""

import torch

from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported
from grove.image_windows import (adaptive_windows, avg_pool_windows, pair, pooling_reach,
                                 window_ids)

# Note [Windows as gathers]: every window op reads its input as a table of
# [H*W, N*C] rows (pixel-major: one row per pixel, every image and channel in
# it), picked by grove's embedding with a constant table of pixel ids
# [OH, OW, K] that the importer builds once per shape (image_windows.py). A
# window position in the padding reads zero (convolution, average pooling: the
# gather picks any pixel and a constant mask zeroes it, in the gather's one
# kernel) or repeats a pixel of the same window (max pooling), so no padded
# copy of the input is made and the ids do not grow with the batch. The
# backwards gather the other way: each input pixel sums the window positions
# that read it (image_windows.inverse_ids). Guarded by ConvolutionTest
# (tests/python/importer_ops_test.py) and ImageBackwardsTest (training_test.py).


class Image:
    """A grove value standing for an image operand the converter made itself
    (a 1-d convolution's input viewed as [N, C, 1, L]), where the window ops
    otherwise take an fx node."""

    def __init__(self, name, shape, dtype):
        self.name, self.shape, self.dtype = name, list(shape), dtype


def shape_of(c, x):
    return x.shape if isinstance(x, Image) else c.shape(x)


def dtype_of(c, x):
    return x.dtype if isinstance(x, Image) else c.dtype(x)


def operand_of(c, x, dtype):
    if isinstance(x, Image):
        return c.cast(x.name, x.dtype, dtype)
    return c.operand(x, dtype)


def pixel_table(c, name, shape):
    """[N, C, H, W] value `name` as rows [H*W, N*C]."""
    n, channels, height, width = shape
    table = c.emit("permute", [name], {"order": [2, 3, 0, 1]})
    return c.emit("reshape", [table], {"shape": [height * width, n * channels]})


def constant_ids(c, ids, rows):
    dtype = torch.int32 if rows < 2 ** 31 else torch.int64
    return c.importer.constant(c.segment, ids.to(dtype).to(c.importer.device))


def gather_windows(c, x, ids, padding):
    """x [N, C, H, W] gathered by ids [OH, OW, K] -> [OH, OW, K, N*C].
    padding: "zero" (a zero row) or "repeat" (the window's first pixel)."""
    shape = shape_of(c, x)
    height, width = shape[2:]
    padded = bool((ids < 0).any())
    if padded and padding == "repeat":
        first = torch.gather(ids, 2, (ids >= 0).to(torch.int64).argmax(2, keepdim=True))
        if bool((first < 0).any()):
            raise Unsupported("a pooling window wholly in the padding")
        ids = torch.where(ids < 0, first.expand_as(ids), ids)
        padded = False
    table = pixel_table(c, operand_of(c, x, dtype_of(c, x)), shape)
    if not padded:
        return c.emit("embedding", [table, constant_ids(c, ids, height * width)]), ids
    inside = ids >= 0
    picked = c.emit("embedding", [table, constant_ids(c, torch.where(inside, ids, 0),
                                                      height * width)])
    mask = c.importer.constant(c.segment, inside[..., None].to(c.importer.device))
    gathered = c.emit("where", [mask, picked, c.scalar(0.0, dtype_of(c, x))])
    return gathered, torch.where(inside, ids, torch.full_like(ids, height * width))


def to_nchw(c, rows, out_h, out_w, n, channels):
    """[OH, OW, N*C] -> [N, C, OH, OW]."""
    value = c.emit("reshape", [rows], {"shape": [out_h, out_w, n, channels]})
    return c.emit("permute", [value], {"order": [2, 3, 0, 1]})


def two_d_only(c, x):
    """Unsupported for a convolution that is not 2-d; callers have taken 1-d
    ones as 2-d before (Note [1-d convolutions as 2-d ones]), and 3-d ones
    never reach here (Note [3-d convolutions as 2-d ones], aten_conv3d_ops)."""
    rank = len(c.shape(x))
    if rank != 4:
        raise Unsupported("a %d-d convolution (grove takes 1-d, 2-d and 3-d ones)" % (rank - 2))


class ConvGeometry:
    """A 2-d convolution's sizes, from its ATen arguments."""

    def __init__(self, c, a, x, weight, out_h, out_w):
        if a.get("transposed"):
            raise Unsupported("transposed convolution")
        if len(shape_of(c, x)) != 4 or len(shape_of(c, weight)) != 4:
            raise Unsupported("convolution of rank %d (2-d only)" % len(shape_of(c, x)))
        self.n, self.channels, self.height, self.width = shape_of(c, x)
        self.out_channels, self.group_channels, self.kh, self.kw = shape_of(c, weight)
        self.groups = a.get("groups") or 1
        self.out_h, self.out_w = out_h, out_w
        self.stride, self.padding = pair(a["stride"]), pair(a["padding"])
        self.dilation = pair(a["dilation"])
        self.taps = self.kh * self.kw
        self.rows = self.n * out_h * out_w

    def ids(self):
        return window_ids([self.height, self.width], [self.out_h, self.out_w], [self.kh, self.kw],
                          self.stride, self.padding, self.dilation)


def im2col(c, x, geometry):
    """The GEMM's rows: x's windows as [N*OH*OW, KH*KW*C] (tap-major, then channel)."""
    g = geometry
    if (g.kh, g.kw) == (1, 1) and g.stride == [1, 1] and g.padding == [0, 0]:
        patches = c.emit("permute", [operand_of(c, x, dtype_of(c, x))], {"order": [0, 2, 3, 1]})
    elif g.stride == [g.kh, g.kw] and g.padding == [0, 0] and g.dilation == [1, 1]:
        # Patches that tile the image (a ViT's patch embedding): views, no gather.
        image = operand_of(c, x, dtype_of(c, x))
        if (g.height, g.width) != (g.out_h * g.kh, g.out_w * g.kw):
            image = c.emit("slice", [image], {"dim": 2, "start": 0, "end": g.out_h * g.kh})
            image = c.emit("slice", [image], {"dim": 3, "start": 0, "end": g.out_w * g.kw})
        image = c.emit("reshape", [image],
                       {"shape": [g.n, g.channels, g.out_h, g.kh, g.out_w, g.kw]})
        patches = c.emit("permute", [image], {"order": [0, 2, 4, 3, 5, 1]})
    else:
        gathered, _ = gather_windows(c, x, g.ids(), "zero")  # [OH, OW, KK, N*C]
        gathered = c.emit("reshape", [gathered],
                          {"shape": [g.out_h, g.out_w, g.taps, g.n, g.channels]})
        patches = c.emit("permute", [gathered], {"order": [3, 0, 1, 2, 4]})
    return c.emit("reshape", [patches], {"shape": [g.rows, g.taps * g.channels]})


def grouped(c, rows, geometry, width):
    """[M, G*width] -> [G, M, width]."""
    rows = c.emit("reshape", [rows], {"shape": [geometry.rows, geometry.groups, width]})
    return c.emit("permute", [rows], {"order": [1, 0, 2]})


def weight_matrix(c, weight, geometry, dtype):
    """The weight as [OC, KH*KW*C] (groups: [G, OC/G, KH*KW*C/G]), im2col's order."""
    g = geometry
    w = c.emit("permute", [operand_of(c, weight, dtype)], {"order": [0, 2, 3, 1]})
    if g.groups == 1:
        return c.emit("reshape", [w], {"shape": [g.out_channels, g.taps * g.group_channels]})
    return c.emit("reshape", [w], {"shape": [g.groups, g.out_channels // g.groups,
                                             g.taps * g.group_channels]})


def _convolution(c, a):
    x, weight = a["input"], a["weight"]
    rank = len(c.shape(x))
    if rank == 3 and len(c.shape(weight)) == 3:
        return _convolution_1d(c, a)
    two_d_only(c, x)
    out_h, out_w = c.result().shape[2:]
    return _convolution_2d(c, a, x, weight, out_h, out_w)


# Note [1-d convolutions as 2-d ones]: conv1d (Whisper's and wav2vec2's
# front ends, Mamba's causal depthwise conv) is the 2-d convolution of its
# input viewed as [N, C, 1, L] by its kernel viewed as [OC, C/G, 1, K], with
# stride, padding and dilation (1, s), (0, p), (1, d): the same windows, the
# same GEMM, one reshape each side; its gradient is the 2-d convolution's
# backward over the same views (aten_conv_backward_ops). Tests:
# ConvolutionTest.test_one_dimensional_convolutions (tests/python/
# importer_ops_test.py) and TrainingTest.test_one_dimensional_convolution_
# gradients_match_torch (tests/python/training_test.py).
def _convolution_1d(c, a):
    x, weight = a["input"], a["weight"]
    n, channels, length = c.shape(x)
    out_channels, group_channels, taps = c.shape(weight)
    dtype = c.dtype(x)
    image, kernel = as_image(c, x, dtype), as_image(c, weight, dtype)

    planar = planar_arguments(a)
    out_length = c.result().shape[2]
    out = _convolution_2d(c, planar, image, kernel, 1, out_length)
    return c.emit("reshape", [out], {"shape": [n, out_channels, out_length]})


def planar_arguments(a):
    """A 1-d convolution's ATen arguments as its 2-d form's (Note [1-d
    convolutions as 2-d ones]): stride, padding and dilation (1, s), (0, p), (1, d)."""
    def widened(name, low):
        value = a[name]
        value = list(value) if isinstance(value, (list, tuple)) else [value]
        if len(value) != 1:
            raise Unsupported("a 1-d convolution's %s of %d values" % (name, len(value)))
        return [low, value[0]]

    if a.get("transposed"):
        raise Unsupported("transposed convolution")
    return dict(a, stride=widened("stride", 1), padding=widened("padding", 0),
                dilation=widened("dilation", 1))


def as_image(c, node, dtype):
    """A 3-d operand [A, B, L] as the Image [A, B, 1, L]."""
    first, second, length = c.shape(node)
    shape = [first, second, 1, length]
    return Image(c.emit("reshape", [c.operand(node, dtype)], {"shape": shape}), shape, dtype)


def _convolution_2d(c, a, x, weight, out_h, out_w):
    bias = a.get("bias")
    g = ConvGeometry(c, a, x, weight, out_h, out_w)
    dtype = dtype_of(c, x)
    patches = im2col(c, x, g)
    w = weight_matrix(c, weight, g, dtype)
    if g.groups == 1:
        inputs = [patches, w] + ([c.operand(bias, dtype)] if bias is not None else [])
        out = c.emit("linear", inputs)
    else:
        # Channels of group j are [j*C/G, (j+1)*C/G): the taps move inside.
        patches = c.emit("reshape", [patches],
                         {"shape": [g.rows, g.taps, g.groups, g.group_channels]})
        patches = c.emit("permute", [patches], {"order": [2, 0, 1, 3]})
        patches = c.emit("reshape", [patches],
                         {"shape": [g.groups, g.rows, g.taps * g.group_channels]})
        out = c.emit("matmul", [patches, c.emit("transpose", [w], {"dim0": 1, "dim1": 2})])
        out = c.emit("permute", [out], {"order": [1, 0, 2]})
        out = c.emit("reshape", [out], {"shape": [g.rows, g.out_channels]})
        if bias is not None:
            out = c.emit("add", [out, c.operand(bias, dtype)])
    out = c.emit("reshape", [out], {"shape": [g.n, out_h, out_w, g.out_channels]})
    return c.emit("permute", [out], {"order": [0, 3, 1, 2]})


def image_shape(c, x, what):
    shape = c.shape(x)
    if len(shape) != 4:
        raise Unsupported("%s of a rank-%d tensor (batched 2-d only)" % (what, len(shape)))
    return shape


def max_pool_ids(c, a, x, out_h, out_w):
    height, width = c.shape(x)[2:]
    kernel, padding, dilation = pair(a["kernel_size"]), pair(a["padding"]), pair(a["dilation"])
    return window_ids([height, width], [out_h, out_w],
                      pooling_reach([height, width], kernel, padding, dilation),
                      pair(a.get("stride") or kernel), padding, dilation)


def _max_pool(c, a):
    x = a["self"]
    image_shape(c, x, "max_pool2d")
    result = c.result()
    with_indices = isinstance(result, (tuple, list))
    out_h, out_w = (result[0] if with_indices else result).shape[2:]
    wanted = with_indices and 1 in {user.args[1] for user in c.node.users if user.users}
    pooled, indices = pooled_maxima(c, x, max_pool_ids(c, a, x, out_h, out_w), wanted)
    return (pooled, indices) if with_indices else pooled


def pooled_maxima(c, x, ids, with_indices):
    """x (an image or a volume's tall image) max-pooled by window ids [OH,
    OW, K]: (the maxima [N, C, OH, OW], and with_indices the pixel id of
    each window's first position holding its maximum (PyTorch's choice), else
    None). A window's padding repeats its first pixel, which has the same id."""
    n, channels = shape_of(c, x)[:2]
    out_h, out_w = ids.shape[:2]
    gathered, ids = gather_windows(c, x, ids, "repeat")
    top = c.emit("max", [gathered], {"dims": [2], "keepdim": 0})
    pooled = to_nchw(c, top, out_h, out_w, n, channels)
    if not with_indices:
        return pooled, None
    # The first window position holding the maximum, then its pixel: the
    # window's ids read at o*K + k.
    taps = ids.shape[2]
    hits = c.emit("eq", [gathered, c.emit("reshape", [top], {"shape": [out_h, out_w, 1, -1]})])
    positions = c.importer.constant(
        c.segment, torch.arange(taps, dtype=torch.float32).view(1, 1, taps, 1).to(
            c.importer.device))
    candidates = c.emit("where", [hits, positions, c.scalar(float(taps), torch.float32)])
    first = c.emit("neg", [c.emit("max", [c.emit("neg", [candidates])],
                                  {"dims": [2], "keepdim": 0})])
    base = torch.arange(out_h * out_w, dtype=torch.int64).view(out_h, out_w, 1) * taps
    flat = c.emit("add", [c.emit("cast", [first], {"dtype": "i64"}),
                          c.importer.constant(c.segment, base.to(c.importer.device))])
    table = c.importer.constant(c.segment, ids.reshape(-1, 1).to(torch.int64).to(
        c.importer.device))
    pixels = c.emit("reshape", [c.emit("embedding", [table, flat])],
                    {"shape": [out_h, out_w, n * channels]})
    return pooled, to_nchw(c, pixels, out_h, out_w, n, channels)


def windowed_mean(c, x, ids, divisor):
    """x (an image or a volume's tall image) averaged over window ids [OH,
    OW, K] (zeros in the padding), divided by `divisor` [OH, OW]."""
    n, channels = shape_of(c, x)[:2]
    out_h, out_w = ids.shape[:2]
    dtype = dtype_of(c, x)
    gathered, _ = gather_windows(c, x, ids, "zero")
    summed = c.emit("sum", [gathered], {"dims": [2], "keepdim": 0})
    return to_nchw(c, c.emit("mul", [summed, reciprocal(c, divisor, dtype)]), out_h, out_w, n,
                   channels)


def reciprocal(c, divisor, dtype):
    """1 / divisor [OH, OW] as a scalar where uniform, else a [OH, OW, 1] constant."""
    if bool((divisor == divisor.flatten()[0]).all()):
        return c.scalar(1.0 / float(divisor.flatten()[0]), dtype)
    return c.importer.constant(c.segment,
                               (1.0 / divisor)[:, :, None].to(dtype).to(c.importer.device))


def avg_pool_geometry(c, a, x, out_h, out_w):
    height, width = c.shape(x)[2:]
    kernel = pair(a["kernel_size"])
    return avg_pool_windows([height, width], [out_h, out_w], kernel,
                            pair(a.get("stride") or kernel), pair(a["padding"]),
                            a.get("count_include_pad", True), a.get("divisor_override"))


def _avg_pool(c, a):
    x = a["self"]
    image_shape(c, x, "avg_pool2d")
    out_h, out_w = c.result().shape[2:]
    return windowed_mean(c, x, *avg_pool_geometry(c, a, x, out_h, out_w))


def _adaptive_avg_pool(c, a):
    x = a["self"]
    height, width = image_shape(c, x, "adaptive_avg_pool2d")[2:]
    out_h, out_w = c.result().shape[2:]
    if (out_h, out_w) == (1, 1):
        return c.emit("mean", [c.tensor(x)], {"dims": [2, 3], "keepdim": 1})
    return windowed_mean(c, x, *adaptive_windows([height, width], [out_h, out_w]))


def _unfold(c, a):
    """im2col (F.unfold, nn.Unfold: VOLO's outlook attention, HaloNet's
    blocks): x [N, C, H, W] as [N, C*KH*KW, OH*OW], each column one window
    (channel-major, then the taps), zeros in the padding: the windows
    gathered as a convolution gathers them, then reordered."""
    x = a["self"]
    shape = shape_of(c, x)
    if len(shape) != 4:
        raise Unsupported("im2col of a rank-%d input (batched images only)" % len(shape))
    n, channels, height, width = shape
    kernel, dilation = pair(a["kernel_size"]), pair(a["dilation"])
    padding, stride = pair(a["padding"]), pair(a["stride"])
    out = [(size + 2 * p - d * (k - 1) - 1) // s + 1
           for size, p, d, k, s in zip((height, width), padding, dilation, kernel, stride)]
    ids = window_ids([height, width], out, kernel, stride, padding, dilation)
    gathered, _ = gather_windows(c, x, ids, "zero")  # [OH, OW, KK, N*C]
    taps = kernel[0] * kernel[1]
    gathered = c.emit("reshape", [gathered], {"shape": out + [taps, n, channels]})
    columns = c.emit("permute", [gathered], {"order": [3, 4, 2, 0, 1]})
    return c.emit("reshape", [columns], {"shape": [n, channels * taps, out[0] * out[1]]})


CONVERTERS.update({
    "aten.im2col": _unfold,
    "aten.convolution": _convolution,
    "aten._convolution": _convolution,
    "aten.max_pool2d_with_indices": _max_pool,
    "aten.max_pool2d": _max_pool,
    "aten.avg_pool2d": _avg_pool,
    "aten._adaptive_avg_pool2d": _adaptive_avg_pool,
    "aten.adaptive_avg_pool2d": _adaptive_avg_pool,
})
