"""Transposed 3-d, 2-d and 1-d convolution (ConvTranspose3d/2d/1d:
segmentation and depth decoders, GAN generators, vocoders, video decoders)
as the input gradient of the convolution it transposes, and its backward
(Note [Transposed convolutions as input gradients]). Importing this module
puts the transposed case in front of the other convolution converters."""

from grove import aten_conv3d_ops, aten_conv_backward_ops, aten_conv_ops
from grove.aten_conv_ops import Image, as_image, planar_arguments, shape_of
from grove.aten_ops import converter_in_front
from grove.fx_common import Unsupported

# Note [Transposed convolutions as input gradients]: conv_transpose(x, w)
# with stride, padding, dilation, groups and output_padding is the gradient,
# with respect to its input, of the convolution by the same weight and
# geometry that maps an [N, C_out, OH, OW] input to x's [N, C_in, H, W]:
# ConvTranspose's weight [C_in, C_out/G, KH, KW] is that convolution's
# weight as it is, and output_padding only sets OH and OW (the rows it adds
# are read by no window, so they get the bias alone). So the converter runs
# convolution_backward's input half (aten_conv_backward_ops; for 3-d ones
# aten_conv3d_ops', Note [3-d convolutions as 2-d ones]) with x as the
# gradient and an input of the result's shape, then adds the bias. 1-d ones
# go through the 2-d form (Note [1-d convolutions as 2-d ones]). Its
# backward is the transposed convolution's transpose (_transposed_backward).
# Test: ConvTransposeTest (tests/python/importer_math_ops_test.py), forward
# and backward, 1-d, 2-d and 3-d.


def _rank(c, x, weight, what):
    rank = len(c.shape(x))
    if rank not in (3, 4, 5) or len(c.shape(weight)) != rank:
        raise Unsupported("%s of rank %d (grove takes 1-d, 2-d and 3-d ones)" % (what, rank))
    return rank


def _convolution(c, args, x, weight, out_size):
    """The convolution (not transposed) of x by weight, 2-d or 3-d (fx nodes
    or Images), with output sizes `out_size`."""
    if len(out_size) == 3:
        return aten_conv3d_ops.convolution_3d(c, args, x, weight, out_size)
    return aten_conv_ops._convolution_2d(c, args, x, weight, *out_size)


def _convolution_backward(c, args, grad, x, weight):
    """convolution_backward of a 2-d or 3-d convolution (not transposed)."""
    if len(shape_of(c, x)) == 5:
        return aten_conv3d_ops.convolution_backward_3d(c, args, grad, x, weight)
    return aten_conv_backward_ops._convolution_backward_2d(c, args, grad, x, weight)


def _transposed(c, a):
    x, weight, bias = a["input"], a["weight"], a.get("bias")
    rank = _rank(c, x, weight, "a transposed convolution")
    dtype = c.dtype(x)
    out_shape = list(c.result().shape)
    args = dict(a, transposed=False, output_mask=[True, False, False])
    if rank == 3:
        args = planar_arguments(args)
        grad, kernel = as_image(c, x, dtype), as_image(c, weight, dtype)
        forward_input = Image(None, [out_shape[0], out_shape[1], 1, out_shape[2]], dtype)
    else:
        grad, kernel = x, weight
        forward_input = Image(None, out_shape, dtype)
    out, _, _ = _convolution_backward(c, args, grad, forward_input, kernel)
    if rank == 3:
        out = c.emit("reshape", [out], {"shape": out_shape})
    if bias is not None:
        shape = [1, out_shape[1]] + [1] * (rank - 2)
        out = c.emit("add", [out, c.emit("reshape", [c.operand(bias, dtype)], {"shape": shape})])
    return out


def _transposed_backward(c, a):
    """convolution_backward of a transposed convolution y = F^T(x), F the
    convolution it transposes: the input's gradient is F of y's gradient (a
    forward convolution), the weight's is F's weight gradient with y's
    gradient as F's input and x as F's output gradient (<F^T x, g> =
    <x, F g>), the bias's the sum of y's gradient."""
    grad, x, weight = a["grad_output"], a["input"], a["weight"]
    rank = _rank(c, x, weight, "a transposed convolution's backward")
    dtype = c.dtype(x)
    mask = list(a.get("output_mask") or [True, True, True])
    args = dict(a, transposed=False)
    in_shape = list(c.shape(x))
    if rank == 3:
        args = planar_arguments(args)
        grad_value, x_value = as_image(c, grad, dtype), as_image(c, x, dtype)
        kernel = as_image(c, weight, dtype)
    else:
        grad_value, x_value, kernel = grad, x, weight
    grad_input = grad_weight = grad_bias = None
    if mask[0]:
        out_size = ([1] + in_shape[2:]) if rank == 3 else in_shape[2:]
        grad_input = _convolution(c, dict(args, bias=None), grad_value, kernel, out_size)
        if rank == 3:
            grad_input = c.emit("reshape", [grad_input], {"shape": in_shape})
    if mask[1]:
        _, grad_weight, _ = _convolution_backward(
            c, dict(args, output_mask=[False, True, False]), x_value, grad_value, kernel)
        if rank == 3:
            grad_weight = c.emit("reshape", [grad_weight], {"shape": list(c.shape(weight))})
    if mask[2]:
        grad_bias = c.emit("sum", [c.operand(grad, dtype)],
                           {"dims": [0] + list(range(2, rank)), "keepdim": 0})
    return (grad_input, grad_weight, grad_bias)


def _is_transposed(c, a):
    return bool(a.get("transposed"))


converter_in_front(["aten.convolution", "aten._convolution"], _is_transposed, _transposed)
converter_in_front(["aten.convolution_backward"], _is_transposed, _transposed_backward)
