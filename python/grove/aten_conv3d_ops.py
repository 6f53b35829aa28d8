"""3-d convolution (video models: torchvision's R3D, MC3, R(2+1)D and S3D)
and its backward as 2-d ones over depth slices (Note [3-d convolutions as
2-d ones]; transposed ones go through them too, in
aten_conv_transpose_ops), and 3-d pooling as 2-d pooling of the volume's
tall image (Note [Volumes as tall images]): max_pool3d with its indices and
its backward, avg_pool3d and its backward, adaptive average pooling and its
backward. Importing this module puts the 5-d case in front of
aten_conv_ops' and aten_conv_backward_ops' converters."""

import torch

from grove import aten_conv_backward_ops, aten_conv_ops
from grove.aten_conv_ops import Image, dtype_of, operand_of, shape_of
from grove.aten_layout_ops import summed_at_sources, take_positions
from grove.aten_ops import CONVERTERS, converter_in_front
from grove.fx_common import Unsupported, dtype_name
from grove.image_windows import adaptive_windows, avg_pool_windows, pooling_reach, window_ids

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

# Note [Volumes as tall images]: a volume [N, C, D, H, W] is, reshaped, the
# image [N, C, D*H, W] whose pixel d*H*W + h*W + w is voxel (d, h, w): the
# row-major flat index that max_pool3d's indices hold. A 3-d window is the
# product of its depth, height and width taps, so image_windows.window_ids
# over three axes gives its voxels as pixel ids of the tall image, laid out
# [OD*OH, OW, KD*KH*KW] like a 2-d window op's, taps in (depth, height,
# width) order as PyTorch's kernels visit them. Every 2-d pooling routine
# then runs on 3-d windows unchanged: max pooling's first maximum and its
# pixel id (the index), the average's sums, and the backwards' gathers of the
# windows that read each pixel; their [N, C, OD*OH, OW] results reshape to
# [N, C, OD, OH, OW]. Tests: Conv3dTest.test_three_d_pooling_matches_torch,
# test_max_pool3d_indices_match_torch and the pooling gradient tests
# (tests/python/importer_math_ops_test.py).


def _triple(value):
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    return value * 3 if len(value) == 1 else value


def _depth_sources(depth, out_depth, taps, stride, padding, dilation):
    """Per depth tap, the input depth each output depth reads (None: the
    padding)."""
    return [[source if 0 <= source < depth else None
             for source in (o * stride - padding + t * dilation for o in range(out_depth))]
            for t in range(taps)]


def _geometry(c, a, x, weight, out_depth):
    """(the depth sources of each kernel tap, the 2-d convolution's
    arguments) of a 3-d convolution of x by weight with `out_depth` output
    depths."""
    if a.get("transposed"):
        raise Unsupported("transposed 3-d convolution")  # aten_conv_transpose_ops' case
    depth, kd = shape_of(c, x)[2], shape_of(c, weight)[2]
    stride, padding, dilation = _triple(a["stride"]), _triple(a["padding"]), _triple(a["dilation"])
    sources = _depth_sources(depth, out_depth, kd, stride[0], padding[0], dilation[0])
    planar = dict(a, stride=stride[1:], padding=padding[1:], dilation=dilation[1:])
    return sources, planar


def _depth_slices(c, x, sources, dtype):
    """x [N, C, D, H, W] (an fx node or an Image) read at depths `sources`
    (None: a zero plane) as the Image [N*OD, C, H, W]."""
    n, channels, depth, height, width = shape_of(c, x)
    name = operand_of(c, x, dtype)
    shape = [n, channels, depth, height, width]
    if any(source is None for source in sources):
        zero = c.emit("full", [], {"value": 0.0, "shape": [n, channels, 1, height, width],
                                   "dtype": dtype_name(dtype)})
        name = c.emit("concat", [name, zero], {"dim": 2})
        shape[2] += 1
    picked = take_positions(c, name, shape, 2, [depth if s is None else s for s in sources])
    picked = c.emit("permute", [picked], {"order": [0, 2, 1, 3, 4]})
    folded = [n * len(sources), channels, height, width]
    return Image(c.emit("reshape", [picked], {"shape": folded}), folded, dtype)


def _kernel_slice(c, weight, tap, dtype):
    """The weight [OC, C/G, KD, KH, KW]'s depth tap as the Image [OC, C/G, KH, KW]."""
    out_channels, group_channels, _, kh, kw = shape_of(c, weight)
    sliced = c.emit("slice", [operand_of(c, weight, dtype)],
                    {"dim": 2, "start": tap, "end": tap + 1})
    shape = [out_channels, group_channels, kh, kw]
    return Image(c.emit("reshape", [sliced], {"shape": shape}), shape, dtype)


def _folded_depths(c, value, dtype):
    """value [N, C, D, H, W] (an fx node or an Image) as the Image [N*D, C, H, W]."""
    n, channels, depth, height, width = shape_of(c, value)
    rows = c.emit("permute", [operand_of(c, value, dtype)], {"order": [0, 2, 1, 3, 4]})
    folded = [n * depth, channels, height, width]
    return Image(c.emit("reshape", [rows], {"shape": folded}), folded, dtype)


def _unfolded_depths(c, name, n, depth, channels, height, width):
    """[N*D, C, H, W] -> [N, C, D, H, W]."""
    value = c.emit("reshape", [name], {"shape": [n, depth, channels, height, width]})
    return c.emit("permute", [value], {"order": [0, 2, 1, 3, 4]})


def convolution_3d(c, a, x, weight, out_size):
    """The 3-d convolution of x by weight (fx nodes or Images) with ATen's
    arguments `a` (a["bias"] added) and output sizes [OD, OH, OW]."""
    dtype = dtype_of(c, x)
    sources, planar = _geometry(c, a, x, weight, out_size[0])
    n, out_channels = shape_of(c, x)[0], shape_of(c, weight)[0]
    out_depth, out_h, out_w = out_size
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
    return _unfolded_depths(c, total, n, out_depth, out_channels, out_h, out_w)


def _convolution_3d(c, a):
    return convolution_3d(c, a, a["input"], a["weight"], list(c.result().shape[2:]))


def convolution_backward_3d(c, a, grad, x, weight):
    """convolution_backward of a 3-d convolution: grad, x and weight are fx
    nodes or Images; x's values are read only for the weight's gradient
    (without it, an Image of x's shape alone will do)."""
    dtype = dtype_of(c, x)
    n, channels, depth, height, width = shape_of(c, x)
    out_channels, group_channels, kd, kh, kw = shape_of(c, weight)
    out_depth = shape_of(c, grad)[2]
    sources, planar = _geometry(c, a, x, weight, out_depth)
    mask = list(a.get("output_mask") or [True, True, True])
    grad_image = _folded_depths(c, grad, dtype)
    planar = dict(planar, output_mask=[mask[0], mask[1], False])
    grad_input, taps = None, []
    for tap, reads in enumerate(sources):
        if all(source is None for source in reads):
            taps.append(c.emit("full", [], {"value": 0.0, "shape": [out_channels, group_channels,
                                                                     1, kh, kw],
                                             "dtype": dtype_name(dtype)}))
            continue
        slices = (_depth_slices(c, x, reads, dtype) if mask[1] else
                  Image(None, [n * out_depth, channels, height, width], dtype))
        slice_grad, weight_grad, _ = aten_conv_backward_ops._convolution_backward_2d(
            c, planar, grad_image, slices, _kernel_slice(c, weight, tap, dtype))
        if mask[0]:
            slice_grad = _unfolded_depths(c, slice_grad, n, out_depth, channels, height, width)
            summed = summed_at_sources(c, slice_grad, [n, channels, out_depth, height, width], 2,
                                       reads, depth, dtype)
            grad_input = summed if grad_input is None else c.emit("add", [grad_input, summed])
        if mask[1]:
            taps.append(c.emit("reshape", [weight_grad],
                               {"shape": [out_channels, group_channels, 1, kh, kw]}))
    grad_weight = c.emit("concat", taps, {"dim": 2}) if mask[1] else None
    grad_bias = None
    if mask[2]:
        grad_bias = c.emit("sum", [operand_of(c, grad, dtype)],
                           {"dims": [0, 2, 3, 4], "keepdim": 0})
    if mask[0] and grad_input is None:
        grad_input = c.emit("full", [], {"value": 0.0, "shape": list(shape_of(c, x)),
                                         "dtype": dtype_name(dtype)})
    return (grad_input, grad_weight, grad_bias)


def _convolution_backward_3d(c, a):
    return convolution_backward_3d(c, a, a["grad_output"], a["input"], a["weight"])


def _volume(c, x, what):
    shape = list(c.shape(x))
    if len(shape) != 5:
        raise Unsupported("%s of a rank-%d tensor (batched 3-d only)" % (what, len(shape)))
    return shape


def _tall(c, value, dtype):
    """value [N, C, D, H, W] as its tall image [N, C, D*H, W] (Note [Volumes
    as tall images])."""
    n, channels, depth, height, width = c.shape(value)
    shape = [n, channels, depth * height, width]
    return Image(c.emit("reshape", [c.operand(value, dtype)], {"shape": shape}), shape, dtype)


def _from_tall(c, name, shape):
    """A tall image [N, C, D*H, W] back as `shape` [N, C, D, H, W]."""
    return c.emit("reshape", [name], {"shape": list(shape)})


def _pool_arguments(a):
    kernel = _triple(a["kernel_size"])
    return (kernel, _triple(a.get("stride") or kernel), _triple(a.get("padding", 0)),
            _triple(a.get("dilation", 1)))


def _max_pool_ids(a, shape, out):
    """max_pool3d's windows over a volume of `shape` with outputs `out` [OD,
    OH, OW], as tall-image ids [OD*OH, OW, K]."""
    kernel, stride, padding, dilation = _pool_arguments(a)
    return window_ids(shape[2:], out, pooling_reach(shape[2:], kernel, padding, dilation),
                      stride, padding, dilation)


def _max_pool_3d(c, a):
    """max_pool3d (and its indices where read): 2-d max pooling of the tall
    image."""
    x = a["self"]
    shape = _volume(c, x, "max_pool3d")
    result = c.result()
    with_indices = isinstance(result, (tuple, list))
    out = list((result[0] if with_indices else result).shape)
    wanted = with_indices and 1 in {user.args[1] for user in c.node.users if user.users}
    pooled, indices = aten_conv_ops.pooled_maxima(c, _tall(c, x, c.dtype(x)),
                                                  _max_pool_ids(a, shape, out[2:]), wanted)
    pooled = _from_tall(c, pooled, out)
    if not with_indices:
        return pooled
    return (pooled, _from_tall(c, indices, out) if wanted else None)


def _max_pool_3d_backward(c, a):
    """Each voxel takes the gradients of the windows whose index names it
    (2-d max pooling's backward on the tall images)."""
    grad, x = a["grad_output"], a["self"]
    shape = _volume(c, x, "max_pool3d_with_indices_backward")
    dtype = c.dtype(x)
    tall_shape = [shape[0], shape[1], shape[2] * shape[3], shape[4]]
    summed = aten_conv_backward_ops.max_pool_backward(
        c, _tall(c, grad, dtype), _tall(c, a["indices"], torch.int64),
        _max_pool_ids(a, shape, c.shape(grad)[2:]), tall_shape, dtype)
    return _from_tall(c, summed, shape)


def _avg_pool_windows(a, shape, out):
    kernel, stride, padding, _ = _pool_arguments(a)
    return avg_pool_windows(shape[2:], out, kernel, stride, padding,
                            a.get("count_include_pad", True), a.get("divisor_override"))


def _avg_pool_3d(c, a):
    """avg_pool3d: 2-d average pooling of the tall image, over the windows'
    divisors as PyTorch counts them."""
    x = a["self"]
    shape = _volume(c, x, "avg_pool3d")
    out = list(c.result().shape)
    pooled = aten_conv_ops.windowed_mean(c, _tall(c, x, c.dtype(x)),
                                         *_avg_pool_windows(a, shape, out[2:]))
    return _from_tall(c, pooled, out)


def _tall_mean_backward(c, a, what, windows):
    """The 2-d mean backward of the tall images over `windows(volume shape,
    pooled extents)`: the gradient of a 3-d average pooling."""
    grad, x = a["grad_output"], a["self"]
    shape = _volume(c, x, what)
    dtype = c.dtype(x)
    summed = aten_conv_backward_ops.mean_backward(
        c, _tall(c, grad, dtype), _tall(c, x, dtype), *windows(shape, c.shape(grad)[2:]))
    return _from_tall(c, summed, shape)


def _avg_pool_3d_backward(c, a):
    return _tall_mean_backward(c, a, "avg_pool3d_backward",
                               lambda shape, out: _avg_pool_windows(a, shape, out))


def _adaptive_avg_pool_3d(c, a):
    x = a["self"]
    shape = _volume(c, x, "adaptive_avg_pool3d")
    out = list(c.result().shape)
    if out[2:] == [1, 1, 1]:
        return c.emit("mean", [c.tensor(x)], {"dims": [2, 3, 4], "keepdim": 1})
    pooled = aten_conv_ops.windowed_mean(c, _tall(c, x, c.dtype(x)),
                                         *adaptive_windows(shape[2:], out[2:]))
    return _from_tall(c, pooled, out)


def _adaptive_avg_pool_3d_backward(c, a):
    return _tall_mean_backward(c, a, "adaptive_avg_pool3d_backward",
                               lambda shape, out: adaptive_windows(shape[2:], out))


def _five_d(c, a):
    return len(c.shape(a["input"])) == 5 and len(c.shape(a["weight"])) == 5


converter_in_front(["aten.convolution", "aten._convolution"], _five_d, _convolution_3d)
converter_in_front(["aten.convolution_backward"], _five_d, _convolution_backward_3d)
CONVERTERS.update({
    "aten.max_pool3d_with_indices": _max_pool_3d,
    "aten.max_pool3d": _max_pool_3d,
    "aten.max_pool3d_with_indices_backward": _max_pool_3d_backward,
    "aten.avg_pool3d": _avg_pool_3d,
    "aten.avg_pool3d_backward": _avg_pool_3d_backward,
    "aten._adaptive_avg_pool3d": _adaptive_avg_pool_3d,
    "aten.adaptive_avg_pool3d": _adaptive_avg_pool_3d,
    "aten._adaptive_avg_pool3d_backward": _adaptive_avg_pool_3d_backward,
})
