"""Converters of ATen's image ops: 2-d convolution (im2col through grove's
embedding, then one GEMM), batch norm in inference, and max, average and
adaptive-average pooling. Importing this module adds them to
aten_ops.CONVERTERS (Note [Windows as gathers])."""

import torch

from grove.aten_ops import CONVERTERS
from grove.fx_common import Unsupported, dtype_name

# Note [Windows as gathers]: every window op reads its input as a table of
# [H*W, N*C] rows (pixel-major: one row per pixel, every image and channel in
# it), picked by grove's embedding with a constant table of pixel ids
# [OH, OW, K] that the importer builds once per shape. A window position in
# the padding reads an extra zero row (convolution, average pooling) or
# repeats a pixel of the same window (max pooling), so no padded copy of the
# input is made and the ids do not grow with the batch. Guarded by
# ConvolutionTest (tests/python/importer_ops_test.py).


def _pair(value):
    if isinstance(value, int):
        return [value, value]
    value = list(value)
    return value * 2 if len(value) == 1 else value


def window_ids(in_size, out_size, kernel, stride, padding, dilation):
    """Pixel ids [OH, OW, KH*KW] into an HxW image; -1 marks the padding."""
    axes = []
    for axis in range(2):
        start = torch.arange(out_size[axis]) * stride[axis] - padding[axis]
        position = start[:, None] + torch.arange(kernel[axis])[None, :] * dilation[axis]
        axes.append((position, (position >= 0) & (position < in_size[axis])))
    (rows, row_valid), (cols, col_valid) = axes
    ids = rows[:, None, :, None] * in_size[1] + cols[None, :, None, :]
    valid = row_valid[:, None, :, None] & col_valid[None, :, None, :]
    ids = torch.where(valid, ids, torch.full_like(ids, -1))
    return ids.reshape(out_size[0], out_size[1], kernel[0] * kernel[1])


def _gather_windows(c, x, ids, padding):
    """x [N, C, H, W] gathered by ids [OH, OW, K] -> [OH, OW, K, N*C].
    padding: "zero" (a zero row) or "repeat" (the window's first pixel)."""
    n, channels, height, width = c.shape(x)
    table = c.emit("permute", [c.tensor(x)], {"order": [2, 3, 0, 1]})
    table = c.emit("reshape", [table], {"shape": [height * width, n * channels]})
    if bool((ids < 0).any()):
        if padding == "zero":
            zeros = c.emit("full", [], {"value": 0.0, "shape": [1, n * channels],
                                        "dtype": dtype_name(c.dtype(x))})
            table = c.emit("concat", [table, zeros], {"dim": 0})
            ids = torch.where(ids < 0, torch.full_like(ids, height * width), ids)
        else:
            first = torch.gather(ids, 2, (ids >= 0).to(torch.int64).argmax(2, keepdim=True))
            if bool((first < 0).any()):
                raise Unsupported("a pooling window wholly in the padding")
            ids = torch.where(ids < 0, first.expand_as(ids), ids)
    ids_dtype = torch.int32 if height * width < 2 ** 31 else torch.int64
    constant = c.importer.constant(c.segment, ids.to(ids_dtype).to(c.importer.device))
    return c.emit("embedding", [table, constant])


def _to_nchw(c, gathered_rows, out_h, out_w, n, channels):
    """[OH, OW, N*C] -> [N, C, OH, OW]."""
    value = c.emit("reshape", [gathered_rows], {"shape": [out_h, out_w, n, channels]})
    return c.emit("permute", [value], {"order": [2, 3, 0, 1]})


def _convolution(c, a):
    x, weight, bias = a["input"], a["weight"], a.get("bias")
    if a.get("transposed"):
        raise Unsupported("transposed convolution")
    if len(c.shape(x)) != 4 or len(c.shape(weight)) != 4:
        raise Unsupported("convolution of rank %d (2-d only)" % len(c.shape(x)))
    n, channels, height, width = c.shape(x)
    out_channels, group_channels, kh, kw = c.shape(weight)
    groups = a.get("groups") or 1
    out_h, out_w = c.result().shape[2:]
    stride, padding, dilation = _pair(a["stride"]), _pair(a["padding"]), _pair(a["dilation"])
    dtype = c.dtype(x)
    taps = kh * kw
    m = n * out_h * out_w
    if (kh, kw) == (1, 1) and stride == [1, 1] and padding == [0, 0]:
        patches = c.emit("permute", [c.tensor(x)], {"order": [0, 2, 3, 1]})
    elif stride == [kh, kw] and padding == [0, 0] and dilation == [1, 1]:
        # Patches that tile the image (a ViT's patch embedding): views, no gather.
        image = c.tensor(x)
        if (height, width) != (out_h * kh, out_w * kw):
            image = c.emit("slice", [image], {"dim": 2, "start": 0, "end": out_h * kh})
            image = c.emit("slice", [image], {"dim": 3, "start": 0, "end": out_w * kw})
        image = c.emit("reshape", [image], {"shape": [n, channels, out_h, kh, out_w, kw]})
        patches = c.emit("permute", [image], {"order": [0, 2, 4, 3, 5, 1]})
    else:
        ids = window_ids([height, width], [out_h, out_w], [kh, kw], stride, padding, dilation)
        gathered = _gather_windows(c, x, ids, "zero")  # [OH, OW, KK, N*C]
        gathered = c.emit("reshape", [gathered], {"shape": [out_h, out_w, taps, n, channels]})
        patches = c.emit("permute", [gathered], {"order": [3, 0, 1, 2, 4]})
    # patches [N, OH, OW, (KH, KW,) C] -> rows of the GEMM.
    w = c.operand(weight, dtype)
    if groups == 1:
        patches = c.emit("reshape", [patches], {"shape": [m, taps * channels]})
        w = c.emit("permute", [w], {"order": [0, 2, 3, 1]})
        w = c.emit("reshape", [w], {"shape": [out_channels, taps * channels]})
        inputs = [patches, w] + ([c.operand(bias, dtype)] if bias is not None else [])
        out = c.emit("linear", inputs)
    else:
        group_out = out_channels // groups
        patches = c.emit("reshape", [patches], {"shape": [m, taps, groups, group_channels]})
        patches = c.emit("permute", [patches], {"order": [2, 0, 1, 3]})
        patches = c.emit("reshape", [patches], {"shape": [groups, m, taps * group_channels]})
        w = c.emit("reshape", [w], {"shape": [groups, group_out, group_channels, kh, kw]})
        w = c.emit("permute", [w], {"order": [0, 3, 4, 2, 1]})
        w = c.emit("reshape", [w], {"shape": [groups, taps * group_channels, group_out]})
        out = c.emit("matmul", [patches, w])  # [G, M, OC/G]
        out = c.emit("permute", [out], {"order": [1, 0, 2]})
        out = c.emit("reshape", [out], {"shape": [m, out_channels]})
        if bias is not None:
            out = c.emit("add", [out, c.operand(bias, dtype)])
    out = c.emit("reshape", [out], {"shape": [n, out_h, out_w, out_channels]})
    return c.emit("permute", [out], {"order": [0, 3, 1, 2]})


def _batch_norm(c, a):
    """Inference batch norm: x * scale + shift per channel, with scale =
    weight / sqrt(var + eps) and shift = bias - mean * scale."""
    if a.get("training"):
        raise Unsupported("batch norm in training mode")
    x = a["input"]
    mean, var = a.get("running_mean"), a.get("running_var")
    if mean is None or var is None:
        raise Unsupported("batch norm without running statistics")
    shape = c.shape(x)
    dtype = c.dtype(x)
    eps = a.get("eps", a.get("epsilon"))
    per_channel = [shape[1]] + [1] * (len(shape) - 2)
    scale = c.emit("rsqrt", [c.emit("add", [c.operand(var, dtype), c.scalar(float(eps), dtype)])])
    if a.get("weight") is not None:
        scale = c.emit("mul", [scale, c.operand(a["weight"], dtype)])
    shift = c.emit("neg", [c.emit("mul", [c.operand(mean, dtype), scale])])
    if a.get("bias") is not None:
        shift = c.emit("add", [shift, c.operand(a["bias"], dtype)])
    scale = c.emit("reshape", [scale], {"shape": per_channel})
    shift = c.emit("reshape", [shift], {"shape": per_channel})
    out = c.emit("add", [c.emit("mul", [c.tensor(x), scale]), shift])
    return (out,) + (None,) * (len(c.result()) - 1)


def _image(c, x, what):
    shape = c.shape(x)
    if len(shape) != 4:
        raise Unsupported("%s of a rank-%d tensor (batched 2-d only)" % (what, len(shape)))
    return shape


def _max_pool(c, a):
    x = a["self"]
    n, channels, height, width = _image(c, x, "max_pool2d")
    result = c.result()
    out = result[0] if isinstance(result, (tuple, list)) else result
    out_h, out_w = out.shape[2:]
    kernel = _pair(a["kernel_size"])
    stride = _pair(a.get("stride") or kernel)
    ids = window_ids([height, width], [out_h, out_w], kernel, stride, _pair(a["padding"]),
                     _pair(a["dilation"]))
    gathered = _gather_windows(c, x, ids, "repeat")
    pooled = _to_nchw(c, c.emit("max", [gathered], {"dims": [2], "keepdim": 0}), out_h, out_w,
                      n, channels)
    if isinstance(result, (tuple, list)):
        return (pooled, None)  # the indices: unsupported where read
    return pooled


def _avg_pool(c, a):
    x = a["self"]
    n, channels, height, width = _image(c, x, "avg_pool2d")
    out_h, out_w = c.result().shape[2:]
    kernel = _pair(a["kernel_size"])
    stride = _pair(a.get("stride") or kernel)
    padding = _pair(a["padding"])
    ids = window_ids([height, width], [out_h, out_w], kernel, stride, padding, [1, 1])
    if a.get("divisor_override"):
        divisor = torch.full((out_h, out_w), float(a["divisor_override"]))
    elif a.get("count_include_pad", True):
        # PyTorch counts the window clipped to the padded image.
        counts = []
        for axis, size in enumerate((out_h, out_w)):
            start = torch.arange(size) * stride[axis] - padding[axis]
            end = torch.clamp(start + kernel[axis], max=(height, width)[axis] + padding[axis])
            counts.append((end - start).to(torch.float32))
        divisor = counts[0][:, None] * counts[1][None, :]
    else:
        divisor = (ids >= 0).sum(2).to(torch.float32)
    return _windowed_mean(c, x, ids, divisor, n, channels, out_h, out_w)


def _windowed_mean(c, x, ids, divisor, n, channels, out_h, out_w):
    dtype = c.dtype(x)
    summed = c.emit("sum", [_gather_windows(c, x, ids, "zero")], {"dims": [2], "keepdim": 0})
    if bool((divisor == divisor.flatten()[0]).all()):
        scale = c.scalar(1.0 / float(divisor.flatten()[0]), dtype)
    else:
        reciprocal = (1.0 / divisor)[:, :, None].to(dtype).to(c.importer.device)
        scale = c.importer.constant(c.segment, reciprocal)
    return _to_nchw(c, c.emit("mul", [summed, scale]), out_h, out_w, n, channels)


def _adaptive_avg_pool(c, a):
    x = a["self"]
    n, channels, height, width = _image(c, x, "adaptive_avg_pool2d")
    out_h, out_w = c.result().shape[2:]
    if (out_h, out_w) == (1, 1):
        return c.emit("mean", [c.tensor(x)], {"dims": [2, 3], "keepdim": 1})
    # Window i of an axis is [floor(i*size/out), ceil((i+1)*size/out)).
    axes = []
    for size, out in ((height, out_h), (width, out_w)):
        start = [(i * size) // out for i in range(out)]
        end = [-((-(i + 1) * size) // out) for i in range(out)]
        longest = max(e - s for s, e in zip(start, end))
        position = torch.tensor([[s + k if s + k < e else -1 for k in range(longest)]
                                 for s, e in zip(start, end)])
        axes.append(position)
    rows, cols = axes
    valid = (rows >= 0)[:, None, :, None] & (cols >= 0)[None, :, None, :]
    ids = rows[:, None, :, None] * width + cols[None, :, None, :]
    ids = torch.where(valid, ids, torch.full_like(ids, -1)).reshape(out_h, out_w, -1)
    divisor = (ids >= 0).sum(2).to(torch.float32)
    return _windowed_mean(c, x, ids, divisor, n, channels, out_h, out_w)


CONVERTERS.update({
    "aten.convolution": _convolution,
    "aten._convolution": _convolution,
    "aten.native_batch_norm": _batch_norm,
    "aten.cudnn_batch_norm": _batch_norm,
    "aten._native_batch_norm_legit_no_training": _batch_norm,
    "aten._native_batch_norm_legit": _batch_norm,
    "aten.max_pool2d_with_indices": _max_pool,
    "aten.max_pool2d": _max_pool,
    "aten.avg_pool2d": _avg_pool,
    "aten._adaptive_avg_pool2d": _adaptive_avg_pool,
    "aten.adaptive_avg_pool2d": _adaptive_avg_pool,
})
