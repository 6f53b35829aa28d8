"""3-d convolution (video models: torchvision's R3D, MC3, R(2+1)D and S3D)
and its backward, and 3-d max and average pooling, as 2-d ones over depth
slices (Note [3-d convolutions as 2-d ones]). Importing this module puts the
5-d case in front of aten_conv_ops' and aten_conv_backward_ops' converters."""

import torch

from grove import aten_conv_backward_ops, aten_conv_ops
from grove.aten_conv_ops import Image
from grove.aten_layout_ops import summed_at_sources, take_positions
from grove.aten_ops import CONVERTERS, converter_in_front
from grove.fx_common import Unsupported, dtype_name
from grove.image_windows import pooling_reach, window_ids

# Note [3-d convolutions as 2-d ones]: out[:, :, d] of a 3-d convolution is
# the sum over the kernel's depth taps t of the 2-d convolution of input depth
# slice d*stride - padding + t*dilation (zeros in the padding) by the kernel's
# slice t. So each tap gathers the slices every output depth reads (one
# constant gather along the depth, a zero plane for the padding), folds the
# output depths into the batch ([N*OD, C, H, W]) and runs the 2-d
# convolution's converter with the height's and width's stride, padding and
# dilation; the taps' results add up (the bias once). The backward runs the
# 2-d backward per tap: the weight's gradient is the taps' gradients side by
# side, the input's sums each tap's slice gradients back into the depths that
# were read (aten_layout_ops.summed_at_sources). Tests: Conv3dTest
# (tests/python/importer_math_ops_test.py), forward and backward against
# PyTorch's conv3d on sim.


def _triple(value):
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    return value * 3 if len(value) == 1 else value


def _depth_sources(depth, out_depth, taps, stride, padding, dilation):
    """Per depth tap, the input depth each output depth reads (None: the
    padding)."""
    return [[source if 0 <= source < depth else None
             for source in (o * stride - padding + t * dilation for o in range(out_depth))]
            for t in range(taps)]


def _geometry(c, a, x, weight):
    if a.get("transposed"):
        raise Unsupported("transposed 3-d convolution")
    n, channels, depth = c.shape(x)[:3]
    kd = c.shape(weight)[2]
    stride, padding, dilation = _triple(a["stride"]), _triple(a["padding"]), _triple(a["dilation"])
    out_depth = (depth + 2 * padding[0] - dilation[0] * (kd - 1) - 1) // stride[0] + 1
    sources = _depth_sources(depth, out_depth, kd, stride[0], padding[0], dilation[0])
    planar = dict(a, stride=stride[1:], padding=padding[1:], dilation=dilation[1:])
    return n, channels, depth, out_depth, sources, planar


def _depth_slices(c, x, sources, dtype, padding_value=0.0):
    """x [N, C, D, H, W] read at depths `sources` (None: a plane of
    `padding_value`) as the Image [N*OD, C, H, W]."""
    n, channels, depth, height, width = c.shape(x)
    name = c.operand(x, dtype)
    shape = [n, channels, depth, height, width]
    if any(source is None for source in sources):
        zero = c.emit("full", [], {"value": padding_value,
                                   "shape": [n, channels, 1, height, width],
                                   "dtype": dtype_name(dtype)})
        name = c.emit("concat", [name, zero], {"dim": 2})
        shape[2] += 1
    picked = take_positions(c, name, shape, 2, [depth if s is None else s for s in sources])
    picked = c.emit("permute", [picked], {"order": [0, 2, 1, 3, 4]})
    folded = [n * len(sources), channels, height, width]
    return Image(c.emit("reshape", [picked], {"shape": folded}), folded, dtype)


def _kernel_slice(c, weight, tap, dtype):
    """The weight [OC, C/G, KD, KH, KW]'s depth tap as the Image [OC, C/G, KH, KW]."""
    out_channels, group_channels, _, kh, kw = c.shape(weight)
    sliced = c.emit("slice", [c.operand(weight, dtype)], {"dim": 2, "start": tap, "end": tap + 1})
    shape = [out_channels, group_channels, kh, kw]
    return Image(c.emit("reshape", [sliced], {"shape": shape}), shape, dtype)


def _convolution_3d(c, a):
    x, weight = a["input"], a["weight"]
    dtype = c.dtype(x)
    n, _, _, out_depth, sources, planar = _geometry(c, a, x, weight)
    out_channels = c.shape(weight)[0]
    out_h, out_w = c.result().shape[3:]
    total = None
    for tap, reads in enumerate(sources):
        if all(source is None for source in reads):
            continue  # a tap wholly in the padding adds zeros
        args = dict(planar, bias=a.get("bias") if total is None else None)
        out = aten_conv_ops._convolution_2d(c, args, _depth_slices(c, x, reads, dtype),
                                            _kernel_slice(c, weight, tap, dtype), out_h, out_w)
        total = out if total is None else c.emit("add", [total, out])
    if total is None:
        raise Unsupported("a 3-d convolution whose every depth tap is in the padding")
    total = c.emit("reshape", [total], {"shape": [n, out_depth, out_channels, out_h, out_w]})
    return c.emit("permute", [total], {"order": [0, 2, 1, 3, 4]})


def _convolution_backward_3d(c, a):
    grad, x, weight = a["grad_output"], a["input"], a["weight"]
    dtype = c.dtype(x)
    n, channels, depth, out_depth, sources, planar = _geometry(c, a, x, weight)
    out_channels, group_channels, kd, kh, kw = c.shape(weight)
    height, width = c.shape(x)[3:]
    out_h, out_w = c.shape(grad)[3:]
    mask = list(a.get("output_mask") or [True, True, True])
    rows = c.emit("permute", [c.operand(grad, dtype)], {"order": [0, 2, 1, 3, 4]})
    folded = [n * out_depth, out_channels, out_h, out_w]
    grad_image = Image(c.emit("reshape", [rows], {"shape": folded}), folded, dtype)
    planar = dict(planar, output_mask=[mask[0], mask[1], False])
    grad_input, taps = None, []
    for tap, reads in enumerate(sources):
        if all(source is None for source in reads):
            taps.append(c.emit("full", [], {"value": 0.0, "shape": [out_channels, group_channels,
                                                                     1, kh, kw],
                                             "dtype": dtype_name(dtype)}))
            continue
        slice_grad, weight_grad, _ = aten_conv_backward_ops._convolution_backward_2d(
            c, planar, grad_image, _depth_slices(c, x, reads, dtype),
            _kernel_slice(c, weight, tap, dtype))
        if mask[0]:
            slice_grad = c.emit("reshape", [slice_grad],
                                {"shape": [n, out_depth, channels, height, width]})
            slice_grad = c.emit("permute", [slice_grad], {"order": [0, 2, 1, 3, 4]})
            summed = summed_at_sources(c, slice_grad, [n, channels, out_depth, height, width], 2,
                                       reads, depth, dtype)
            grad_input = summed if grad_input is None else c.emit("add", [grad_input, summed])
        if mask[1]:
            taps.append(c.emit("reshape", [weight_grad],
                               {"shape": [out_channels, group_channels, 1, kh, kw]}))
    grad_weight = c.emit("concat", taps, {"dim": 2}) if mask[1] else None
    grad_bias = None
    if mask[2]:
        grad_bias = c.emit("sum", [c.operand(grad, dtype)], {"dims": [0, 2, 3, 4], "keepdim": 0})
    if mask[0] and grad_input is None:
        grad_input = c.emit("full", [], {"value": 0.0, "shape": list(c.shape(x)),
                                         "dtype": dtype_name(dtype)})
    return (grad_input, grad_weight, grad_bias)


def _pool_geometry(c, a, what):
    x = a["self"]
    shape = c.shape(x)
    if len(shape) != 5:
        raise Unsupported("%s of a rank-%d tensor (batched 3-d only)" % (what, len(shape)))
    kernel = _triple(a["kernel_size"])
    stride = _triple(a.get("stride") or kernel)
    padding = _triple(a.get("padding", 0))
    dilation = _triple(a.get("dilation", 1))
    result = c.result()
    out_shape = (result[0] if isinstance(result, (tuple, list)) else result).shape
    out_depth, out_h, out_w = out_shape[2:]
    sources = _depth_sources(shape[2], out_depth, kernel[0], stride[0], padding[0], dilation[0])
    return x, shape, kernel, stride, padding, dilation, (out_depth, out_h, out_w), sources


def _tap_windows(c, x, shape, out, sources, kernel, stride, padding, dilation, plane, fill):
    """Per depth tap that reads the input: its slices' 2-d windows [OH, OW,
    K, N*OD*C] (planes of `plane` in the depth padding; `fill` for the 2-d
    padding, as aten_conv_ops.gather_windows takes it)."""
    n, channels = shape[:2]
    ids = window_ids(shape[3:], list(out[1:]),
                     pooling_reach(shape[3:], kernel[1:], padding[1:], dilation[1:]),
                     stride[1:], padding[1:], dilation[1:])
    for reads in sources:
        if all(source is None for source in reads):
            continue
        image = _depth_slices(c, x, reads, c.dtype(x), padding_value=plane)
        yield aten_conv_ops.gather_windows(c, image, ids, fill)[0]


def _to_ncdhw(c, rows, n, channels, out_depth, out_h, out_w):
    """[OH, OW, N*OD*C] -> [N, C, OD, OH, OW]."""
    value = c.emit("reshape", [rows], {"shape": [out_h, out_w, n, out_depth, channels]})
    return c.emit("permute", [value], {"order": [2, 4, 3, 0, 1]})


def _max_pool_3d(c, a):
    """max_pool3d: the maximum over the depth taps of each slice's 2-d window
    maxima (-inf planes in the depth padding). Its indices (a backward's
    input) stay in PyTorch."""
    x, shape, kernel, stride, padding, dilation, out, sources = _pool_geometry(c, a,
                                                                              "max_pool3d")
    with_indices = isinstance(c.result(), (tuple, list))
    if with_indices and 1 in {user.args[1] for user in c.node.users if user.users}:
        raise Unsupported("max_pool3d's indices")
    best = None
    for windows in _tap_windows(c, x, shape, out, sources, kernel, stride, padding, dilation,
                                -float("inf"), "repeat"):
        top = c.emit("max", [windows], {"dims": [2], "keepdim": 0})
        best = top if best is None else c.emit("where", [c.emit("gt", [top, best]), top, best])
    pooled = _to_ncdhw(c, best, shape[0], shape[1], *out)
    return (pooled, None) if with_indices else pooled


def _axis_divisors(size, out, kernel, stride, padding, count_include_pad):
    """Per output position of one axis: the window's size clipped to the
    padded input (count_include_pad), or its taps inside the input."""
    counts = []
    for o in range(out):
        start = o * stride - padding
        if count_include_pad:
            counts.append(min(start + kernel, size + padding) - start)
        else:
            counts.append(min(start + kernel, size) - max(start, 0))
    return torch.tensor(counts, dtype=torch.float64)


def _avg_pool_3d(c, a):
    """avg_pool3d: the sum over the depth taps of each slice's 2-d window sums
    (zero planes in the depth padding), over the windows' divisor, counted per
    axis as PyTorch counts it."""
    x, shape, kernel, stride, padding, _, out, sources = _pool_geometry(c, a, "avg_pool3d")
    dtype = c.dtype(x)
    total = None
    for windows in _tap_windows(c, x, shape, out, sources, kernel, stride, padding, [1, 1, 1],
                                0.0, "zero"):
        summed = c.emit("sum", [windows], {"dims": [2], "keepdim": 0})
        total = summed if total is None else c.emit("add", [total, summed])
    pooled = _to_ncdhw(c, total, shape[0], shape[1], *out)
    if a.get("divisor_override"):
        return c.emit("mul", [pooled, c.scalar(1.0 / float(a["divisor_override"]), dtype)])
    include = a.get("count_include_pad", True)
    divisor = torch.ones(1)
    for axis in range(3):
        counts = _axis_divisors(shape[2 + axis], out[axis], kernel[axis], stride[axis],
                                padding[axis], include)
        divisor = divisor[..., None] * counts
    reciprocal = (1.0 / divisor).reshape([1, 1] + list(out)).to(dtype)
    return c.emit("mul", [pooled, c.importer.constant(c.segment,
                                                      reciprocal.to(c.importer.device))])


def _five_d(c, a):
    return len(c.shape(a["input"])) == 5 and len(c.shape(a["weight"])) == 5


converter_in_front(["aten.convolution", "aten._convolution"], _five_d, _convolution_3d)
converter_in_front(["aten.convolution_backward"], _five_d, _convolution_backward_3d)
CONVERTERS.update({
    "aten.max_pool3d_with_indices": _max_pool_3d,
    "aten.max_pool3d": _max_pool_3d,
    "aten.avg_pool3d": _avg_pool_3d,
})
