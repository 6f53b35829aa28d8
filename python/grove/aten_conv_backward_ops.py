"""Converters of the backwards of ATen's image ops: convolution_backward,
max_pool2d_with_indices_backward, avg_pool2d_backward,
_adaptive_avg_pool2d_backward, upsample_nearest2d_backward, and col2im
(F.fold, which is im2col's backward). Each input pixel sums the window
positions that read it, gathered through image_windows.inverse_ids (Note
[Windows as gathers]); the pooling backwards serve 3-d pooling too, on a
volume's tall image (Note [Volumes as tall images], aten_conv3d_ops.py).
Importing this module adds them to aten_ops.CONVERTERS."""

import torch

from grove.aten_conv_ops import (ConvGeometry, as_image, avg_pool_geometry, constant_ids,
                                 dtype_of, im2col, image_shape, max_pool_ids, operand_of,
                                 planar_arguments, shape_of, two_d_only, weight_matrix)
from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported, dtype_name
from grove.aten_layout_ops import nearest_sources
from grove.image_windows import adaptive_windows, inverse_ids, pair, window_ids


def _rows_with_zero(c, rows, width, dtype):
    zeros = c.emit("full", [], {"value": 0.0, "shape": [1, width], "dtype": dtype_name(dtype)})
    return c.emit("concat", [rows, zeros], {"dim": 0})


def _scatter_to_pixels(c, table, inverse, shape):
    """Sums the rows of `table` [positions + 1 zero row, N*C] that each pixel's
    inverse ids name -> [N, C, H, W]."""
    n, channels, height, width = shape
    gathered = c.emit("embedding", [table, constant_ids(c, inverse, inverse.numel())])
    summed = c.emit("sum", [gathered], {"dims": [1], "keepdim": 0})  # [H*W, N*C]
    summed = c.emit("reshape", [summed], {"shape": [height, width, n, channels]})
    return c.emit("permute", [summed], {"order": [2, 3, 0, 1]})


def _output_rows(c, grad, dtype):
    """grad [N, OC, OH, OW] as the GEMM's rows [N*OH*OW, OC]."""
    n, out_channels, out_h, out_w = shape_of(c, grad)
    rows = c.emit("permute", [operand_of(c, grad, dtype)], {"order": [0, 2, 3, 1]})
    return c.emit("reshape", [rows], {"shape": [n * out_h * out_w, out_channels]})


def _convolution_backward(c, a):
    grad, x, weight = a["grad_output"], a["input"], a["weight"]
    if len(c.shape(x)) == 3 and len(c.shape(weight)) == 3:
        return _convolution_backward_1d(c, a)
    two_d_only(c, x)
    return _convolution_backward_2d(c, a, grad, x, weight)


def _convolution_backward_1d(c, a):
    """Note [1-d convolutions as 2-d ones] (aten_conv_ops.py), backwards."""
    grad, x, weight = a["grad_output"], a["input"], a["weight"]
    dtype = c.dtype(x)
    grad_input, grad_weight, grad_bias = _convolution_backward_2d(
        c, planar_arguments(a), as_image(c, grad, dtype), as_image(c, x, dtype),
        as_image(c, weight, dtype))
    if grad_input is not None:
        grad_input = c.emit("reshape", [grad_input], {"shape": c.shape(x)})
    if grad_weight is not None:
        grad_weight = c.emit("reshape", [grad_weight], {"shape": c.shape(weight)})
    return (grad_input, grad_weight, grad_bias)


def _convolution_backward_2d(c, a, grad, x, weight):
    out_h, out_w = shape_of(c, grad)[2:]
    g = ConvGeometry(c, a, x, weight, out_h, out_w)
    dtype = dtype_of(c, x)
    mask = list(a.get("output_mask") or [True, True, True])
    rows = _output_rows(c, grad, dtype)  # [M, OC]
    w = weight_matrix(c, weight, g, dtype)
    group_out = g.out_channels // g.groups
    if g.groups > 1:
        rows = c.emit("permute", [c.emit("reshape", [rows], {
            "shape": [g.rows, g.groups, group_out]})], {"order": [1, 0, 2]})  # [G, M, OC/G]
    grad_input = grad_weight = grad_bias = None
    if mask[0]:
        # d(patches) = rows @ w, then each pixel sums the taps that read it.
        patches = c.emit("matmul", [rows, w])  # [(G,) M, KK*C/G]
        if g.groups == 1:
            patches = c.emit("reshape", [patches],
                             {"shape": [g.n, out_h * out_w, g.taps, g.channels]})
            patches = c.emit("permute", [patches], {"order": [1, 2, 0, 3]})
        else:
            patches = c.emit("reshape", [patches], {
                "shape": [g.groups, g.n, out_h * out_w, g.taps, g.group_channels]})
            patches = c.emit("permute", [patches], {"order": [2, 3, 1, 0, 4]})
        table = c.emit("reshape", [patches],
                       {"shape": [out_h * out_w * g.taps, g.n * g.channels]})
        table = _rows_with_zero(c, table, g.n * g.channels, dtype)
        inverse = inverse_ids(g.ids(), g.height * g.width, per_output=False)
        grad_input = _scatter_to_pixels(c, table, inverse, shape_of(c, x))
    if mask[1]:
        patches = im2col(c, x, g)  # [M, KK*C]
        if g.groups == 1:
            product = c.emit("matmul", [c.emit("transpose", [rows], {"dim0": 0, "dim1": 1}),
                                        patches])  # [OC, KK*C]
        else:
            patches = c.emit("reshape", [patches],
                             {"shape": [g.rows, g.taps, g.groups, g.group_channels]})
            patches = c.emit("permute", [patches], {"order": [2, 0, 1, 3]})
            patches = c.emit("reshape", [patches],
                             {"shape": [g.groups, g.rows, g.taps * g.group_channels]})
            product = c.emit("matmul", [c.emit("transpose", [rows], {"dim0": 1, "dim1": 2}),
                                        patches])  # [G, OC/G, KK*C/G]
        product = c.emit("reshape", [product],
                         {"shape": [g.out_channels, g.kh, g.kw, g.group_channels]})
        grad_weight = c.emit("permute", [product], {"order": [0, 3, 1, 2]})
    if mask[2]:
        grad_bias = c.emit("sum", [operand_of(c, grad, dtype)], {"dims": [0, 2, 3], "keepdim": 0})
    return (grad_input, grad_weight, grad_bias)


def _pooled_rows(c, grad, dtype, scale=None):
    """grad [N, C, OH, OW] (an fx node or an Image) as rows [OH*OW + 1 zero
    row, N*C], times `scale`."""
    n, channels, out_h, out_w = shape_of(c, grad)
    rows = c.emit("permute", [operand_of(c, grad, dtype)], {"order": [2, 3, 0, 1]})
    if scale is not None:
        rows = c.emit("mul", [rows, scale])
    rows = c.emit("reshape", [rows], {"shape": [out_h * out_w, n * channels]})
    return _rows_with_zero(c, rows, n * channels, dtype)


def mean_backward(c, grad, x, ids, divisor):
    """The backward of windowed_mean (aten_conv_ops) over window ids [OH, OW,
    K] and `divisor` [OH, OW]: each pixel of x sums the scaled gradients of
    the windows that read it. grad and x: fx nodes or Images (a volume's
    tall image)."""
    dtype = dtype_of(c, x)
    if bool((divisor == divisor.flatten()[0]).all()):
        scale = c.scalar(1.0 / float(divisor.flatten()[0]), dtype)
    else:
        scale = c.importer.constant(c.segment, (1.0 / divisor)[:, :, None, None].to(dtype).to(
            c.importer.device))
    table = _pooled_rows(c, grad, dtype, scale)
    height, width = shape_of(c, x)[2:]
    return _scatter_to_pixels(c, table, inverse_ids(ids, height * width, per_output=True),
                              shape_of(c, x))


def _avg_pool_backward(c, a):
    grad, x = a["grad_output"], a["self"]
    image_shape(c, x, "avg_pool2d_backward")
    out_h, out_w = c.shape(grad)[2:]
    return mean_backward(c, grad, x, *avg_pool_geometry(c, a, x, out_h, out_w))


def _adaptive_avg_pool_backward(c, a):
    grad, x = a["grad_output"], a["self"]
    height, width = image_shape(c, x, "adaptive_avg_pool2d_backward")[2:]
    out_h, out_w = c.shape(grad)[2:]
    return mean_backward(c, grad, x, *adaptive_windows([height, width], [out_h, out_w]))


def _max_pool_backward(c, a):
    grad, x, indices = a["grad_output"], a["self"], a["indices"]
    image_shape(c, x, "max_pool2d_with_indices_backward")
    out_h, out_w = c.shape(grad)[2:]
    return max_pool_backward(c, grad, indices, max_pool_ids(c, a, x, out_h, out_w),
                             c.shape(x), c.dtype(x))


def max_pool_backward(c, grad, indices, ids, shape, dtype):
    """Each pixel of an image of `shape` [N, C, H, W] takes the gradients of
    the windows (ids [OH, OW, K]) whose index names it. grad and indices [N,
    C, OH, OW]: fx nodes or Images (a volume's tall image, whose pixel ids are
    max_pool3d's indices)."""
    n, channels, height, width = shape
    out_h, out_w = shape_of(c, grad)[2:]
    inverse = inverse_ids(ids, height * width, per_output=True)
    picked = c.emit("embedding", [_pooled_rows(c, grad, dtype),
                                  constant_ids(c, inverse, inverse.numel())])
    index_rows = c.emit("permute", [operand_of(c, indices, torch.int64)],
                        {"order": [2, 3, 0, 1]})
    index_rows = c.emit("reshape", [index_rows], {"shape": [out_h * out_w, n * channels]})
    minus_one = c.emit("full", [], {"value": -1.0, "shape": [1, n * channels], "dtype": "i64"})
    index_rows = c.emit("concat", [index_rows, minus_one], {"dim": 0})
    named = c.emit("embedding", [index_rows, constant_ids(c, inverse, inverse.numel())])
    pixel = torch.arange(height * width, dtype=torch.int64).view(-1, 1, 1)
    hits = c.emit("eq", [named, c.importer.constant(c.segment, pixel.to(c.importer.device))])
    summed = c.emit("sum", [c.emit("where", [hits, picked, c.scalar(0.0, dtype)])],
                    {"dims": [1], "keepdim": 0})
    summed = c.emit("reshape", [summed], {"shape": [height, width, n, channels]})
    return c.emit("permute", [summed], {"order": [2, 3, 0, 1]})


def _upsample_nearest_backward(c, a):
    """Each input pixel sums the gradients of the output pixels copied from it."""
    grad = a["grad_output"]
    n, channels, height, width = list(a["input_size"])
    out_h, out_w = c.shape(grad)[2:]
    scales = a.get("scale_factors") or [a.get("scales_h"), a.get("scales_w")]
    rows = nearest_sources(height, out_h, scales[0])
    cols = nearest_sources(width, out_w, scales[1])
    ids = (rows[:, None] * width + cols[None, :]).view(out_h, out_w, 1)
    table = _pooled_rows(c, grad, c.dtype(grad))
    return _scatter_to_pixels(c, table, inverse_ids(ids, height * width, per_output=True),
                              [n, channels, height, width])


def _col2im(c, a):
    """F.fold (nn.Fold: overlapping patches summed back into an image; the
    gradient of F.unfold): columns [N, C*KH*KW, L] (or [C*KH*KW, L]), one
    column per window, channel-major then the taps, become [N, C, H, W],
    each pixel the sum of the window positions that read it (padding
    positions dropped): the columns as rows o*K + k plus a zero row,
    gathered by the inverse of im2col's window ids."""
    columns = a["self"]
    shape = c.shape(columns)
    if len(shape) not in (2, 3):
        raise Unsupported("col2im of a rank-%d input (2-d or 3-d columns only)" % len(shape))
    batched = len(shape) == 3
    n, rows, length = shape if batched else [1] + shape
    height, width = [int(size) for size in a["output_size"]]
    kernel, dilation = pair(a["kernel_size"]), pair(a["dilation"])
    padding, stride = pair(a["padding"]), pair(a["stride"])
    out = [(size + 2 * p - d * (k - 1) - 1) // s + 1
           for size, p, d, k, s in zip((height, width), padding, dilation, kernel, stride)]
    taps = kernel[0] * kernel[1]
    if rows % taps or out[0] * out[1] != length or min(out) < 1:
        raise Unsupported("col2im of columns %s for windows %s over %dx%d"
                          % (shape, out, height, width))
    channels = rows // taps
    dtype = c.dtype(columns)
    table = c.emit("reshape", [c.tensor(columns)], {"shape": [n, channels, taps, length]})
    table = c.emit("permute", [table], {"order": [3, 2, 0, 1]})  # [L, K, N, C]
    table = c.emit("reshape", [table], {"shape": [length * taps, n * channels]})
    table = _rows_with_zero(c, table, n * channels, dtype)
    ids = window_ids([height, width], out, kernel, stride, padding, dilation)
    image = _scatter_to_pixels(c, table, inverse_ids(ids, height * width, per_output=False),
                               [n, channels, height, width])
    if batched:
        return image
    return c.emit("reshape", [image], {"shape": [channels, height, width]})


CONVERTERS.update({
    "aten.col2im": _col2im,
    "aten.upsample_nearest2d_backward": _upsample_nearest_backward,
    "aten.convolution_backward": _convolution_backward,
    "aten.max_pool2d_with_indices_backward": _max_pool_backward,
    "aten.avg_pool2d_backward": _avg_pool_backward,
    "aten._adaptive_avg_pool2d_backward": _adaptive_avg_pool_backward,
})
