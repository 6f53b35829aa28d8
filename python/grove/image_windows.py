"""The index math of grove's window ops (Note [Windows as gathers] in
aten_conv_ops.py), in PyTorch on the host, once per shape: which input pixel
each window position reads, the inverse (which window positions read each
pixel, for the backwards), and the divisors of average pooling. Windows of
2 or 3 spatial axes: a volume's windows are those of its tall image (Note
[Volumes as tall images] in aten_conv3d_ops.py)."""

import math

import torch


def pair(value):
    if isinstance(value, int):
        return [value, value]
    value = list(value)
    return value * 2 if len(value) == 1 else value


def axis_taps(size, out, kernel, stride, padding, dilation):
    """One axis of a window op: the position [O, K] each window's taps read
    along it; -1 outside [0, size)."""
    start = torch.arange(out) * stride - padding
    position = start[:, None] + torch.arange(kernel)[None, :] * dilation
    inside = (position >= 0) & (position < size)
    return torch.where(inside, position, torch.full_like(position, -1))


def grid_ids(in_size, axes):
    """The windows that are products of per-axis taps `axes` ([O, K] each,
    -1: none) as flat ids into an input of `in_size` (row-major):
    [O_1 * ... * O_(r-1), O_r, K_1 * ... * K_r], taps in row-major order,
    -1 where any axis reads none. Two axes: ids [OH, OW, KH*KW] into HxW."""
    rank = len(axes)
    ids = torch.zeros([1] * (2 * rank), dtype=torch.int64)
    valid = torch.ones([1] * (2 * rank), dtype=torch.bool)
    step = 1
    for axis in reversed(range(rank)):
        shape = [1] * (2 * rank)
        shape[axis], shape[rank + axis] = axes[axis].shape
        position = axes[axis].reshape(shape)
        ids, valid = ids + position * step, valid & (position >= 0)
        step *= in_size[axis]
    ids = torch.where(valid, ids, torch.full_like(ids, -1))
    outs = [taps.shape[0] for taps in axes]
    return ids.reshape(math.prod(outs[:-1]), outs[-1], -1)


def window_ids(in_size, out_size, kernel, stride, padding, dilation):
    """Pixel ids [OH, OW, KH*KW] into an HxW image (or [OD*OH, OW, K] into
    a DxHxW volume); -1 marks the padding."""
    return grid_ids(in_size, [axis_taps(*axis) for axis in zip(in_size, out_size, kernel,
                                                                  stride, padding, dilation)])


def inverse_ids(ids, pixels, per_output):
    """For each of `pixels` input pixels, the window positions that read it:
    [pixels, J] of o*K + k (or of o alone, with `per_output`), padded with
    the sentinel O*K (or O), which names a zero row. ids: [OH, OW, K], -1 for
    the padding (never listed)."""
    outputs = ids.shape[0] * ids.shape[1]
    taps = ids.shape[2]
    flat = ids.reshape(-1)
    position = torch.arange(flat.numel())
    valid = flat >= 0
    pixel, value = flat[valid], position[valid]
    if per_output:
        value = value // taps
    pixel, order = torch.sort(pixel, stable=True)
    value = value[order]
    counts = torch.bincount(pixel, minlength=pixels)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(pixel.numel()) - starts[pixel]
    sentinel = outputs if per_output else outputs * taps
    table = torch.full((pixels, max(int(counts.max()), 1)), sentinel, dtype=torch.int64)
    table[pixel, rank] = value
    return table


def pooling_reach(in_size, kernel, padding, dilation):
    """The taps of a pooling window that can reach the image, per axis.

    Note [Pooling windows wider than the image]: a window starts at or after
    -padding, so a tap at offset t * dilation >= size + padding lies past the
    image from every window and reads nothing (zero for an average, never
    the maximum). Gathering only the taps below that bound gives the same
    sums and maxima; an average's divisor still comes from the whole kernel.
    HF EfficientNet pools its 2x2 last map with a 1280x1280 window
    (ceil_mode): 1.6M taps a window otherwise. Guarded by
    ConvolutionTest.test_pooling_windows_wider_than_the_image
    (tests/python/importer_ops_test.py)."""
    return [min(k, -(-(size + p) // d)) for size, k, p, d in zip(in_size, kernel, padding,
                                                                   dilation)]


def avg_pool_windows(in_size, out_size, kernel, stride, padding, count_include_pad,
                     divisor_override):
    """(ids, divisor [OH, OW]) of avg_pool2d (or avg_pool3d: ids over the
    volume, divisor [OD*OH, OW]), counted as PyTorch does."""
    axes = len(in_size)
    ids = window_ids(in_size, out_size, pooling_reach(in_size, kernel, padding, [1] * axes),
                     stride, padding, [1] * axes)
    if divisor_override:
        divisor = torch.full(tuple(ids.shape[:2]), float(divisor_override))
    elif count_include_pad:
        # The window clipped to the padded input, per axis.
        divisor = torch.ones([])
        for axis in range(axes):
            start = torch.arange(out_size[axis]) * stride[axis] - padding[axis]
            end = torch.clamp(start + kernel[axis], max=in_size[axis] + padding[axis])
            divisor = divisor[..., None] * (end - start).to(torch.float32)
        divisor = divisor.reshape(ids.shape[:2])
    else:
        divisor = (ids >= 0).sum(2).to(torch.float32)
    return ids, divisor


def adaptive_windows(in_size, out_size):
    """(ids, divisor) of adaptive average pooling (2 or 3 axes): window i of
    an axis is [floor(i*size/out), ceil((i+1)*size/out))."""
    axes = []
    for size, out in zip(in_size, out_size):
        start = [(i * size) // out for i in range(out)]
        end = [-((-(i + 1) * size) // out) for i in range(out)]
        longest = max(e - s for s, e in zip(start, end))
        axes.append(torch.tensor([[s + k if s + k < e else -1 for k in range(longest)]
                                  for s, e in zip(start, end)]))
    ids = grid_ids(in_size, axes)
    return ids, (ids >= 0).sum(2).to(torch.float32)
