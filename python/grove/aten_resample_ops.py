"""Converters of ATen's antialiased resampling, _upsample_bicubic2d_aa and
_upsample_bilinear2d_aa (F.interpolate(..., antialias=True): timm resizing
position embeddings, torchvision's Resize on tensors), their backwards, and
the backwards of plain bilinear and bicubic upsampling (segmentation heads in
training; the forwards are aten_layout_ops' gathers).
Importing this module adds them to aten_ops.CONVERTERS (Note [Resampling as
two constant products])."""

import torch

from grove.aten_layout_ops import upsampling
from grove.aten_ops import CONVERTERS, compute_dtype
from grove.fx_common import Unsupported

# Note [Resampling as two constant products]: antialiased resampling (and
# plain bilinear and bicubic upsampling, whose backwards this module takes) is
# separable and its weights depend only on the sizes, scales and align_corners,
# so each axis is one constant matrix [out, in] that the importer asks
# PyTorch's own kernel for once per shape (the kernel run on an identity image:
# column k is the resampled unit impulse at k, so the weights are PyTorch's to
# the bit) and the op is two GEMMs, along the height and then the width (an
# axis whose matrix is the identity is skipped); the backward multiplies by the
# transposed matrices. bf16 and f16 inputs are resampled in f32, as PyTorch's
# kernels accumulate. Tests: sampling_ops_test's ResampleTest.

KERNELS = {"antialiased bicubic": torch.ops.aten._upsample_bicubic2d_aa.default,
           "antialiased bilinear": torch.ops.aten._upsample_bilinear2d_aa.default,
           "bicubic": torch.ops.aten.upsample_bicubic2d.default,
           "bilinear": torch.ops.aten.upsample_bilinear2d.default}


def axis_weights(mode, in_size, out_size, align, scale, axis, dtype):
    """[out_size, in_size]: PyTorch's antialiased weights along one axis
    (axis 0: the height, 1: the width), or None where they are the identity."""
    eye = torch.eye(in_size, dtype=dtype)
    if axis == 0:
        image, size, scales = eye.view(in_size, 1, in_size, 1), [out_size, 1], (scale, None)
    else:
        image, size, scales = eye.view(in_size, 1, 1, in_size), [1, out_size], (None, scale)
    weights = KERNELS[mode](image, size, align, *scales).reshape(in_size, out_size).t()
    if out_size == in_size and torch.equal(weights, eye):
        return None
    return weights.contiguous()


def resample(c, name, matrices, transposed):
    """Grove value `name` [N, C, H, W] times the height's and the width's
    matrices (or their transposes)."""
    for axis, matrix in enumerate(matrices):
        dim = 2 + axis
        if matrix is None:
            continue
        weight = matrix.t().contiguous() if transposed else matrix  # [new, old]
        weight = c.importer.constant(c.segment, weight.to(c.importer.device))
        if dim == 2:
            name = c.emit("permute", [name], {"order": [0, 1, 3, 2]})
        name = c.emit("linear", [name, weight])
        if dim == 2:
            name = c.emit("permute", [name], {"order": [0, 1, 3, 2]})
    return name


def _checked_dtype(c, value, what):
    dtype = c.dtype(value)
    if not dtype.is_floating_point:
        raise Unsupported("%s of %s tensors" % (what, dtype))
    return dtype, compute_dtype(dtype)


def _resampling(mode):
    def convert(c, a):
        what = mode
        x, shape, out_h, out_w, scales = upsampling(c, a, what)
        dtype, compute = _checked_dtype(c, x, what)
        align = bool(a.get("align_corners"))
        matrices = [axis_weights(mode, shape[2], out_h, align, scales[0], 0, compute),
                    axis_weights(mode, shape[3], out_w, align, scales[1], 1, compute)]
        out = resample(c, c.operand(x, compute), matrices, False)
        return c.cast(out, compute, dtype)

    return convert


def _resampling_backward(mode):
    def convert(c, a):
        what = "%s upsampling's backward" % mode
        grad = a["grad_output"]
        in_shape = [int(s) for s in a["input_size"]]
        if len(in_shape) != 4 or len(c.shape(grad)) != 4:
            raise Unsupported("%s of rank %d" % (what, len(in_shape)))
        out_h, out_w = c.shape(grad)[2:]
        scales = a.get("scale_factors") or [a.get("scales_h"), a.get("scales_w")]
        dtype, compute = _checked_dtype(c, grad, what)
        align = bool(a.get("align_corners"))
        matrices = [axis_weights(mode, in_shape[2], out_h, align, scales[0], 0, compute),
                    axis_weights(mode, in_shape[3], out_w, align, scales[1], 1, compute)]
        out = resample(c, c.operand(grad, compute), matrices, True)
        return c.cast(out, compute, dtype)

    return convert


CONVERTERS.update({
    "aten._upsample_bicubic2d_aa": _resampling("antialiased bicubic"),
    "aten._upsample_bilinear2d_aa": _resampling("antialiased bilinear"),
    "aten._upsample_bicubic2d_aa_backward": _resampling_backward("antialiased bicubic"),
    "aten._upsample_bilinear2d_aa_backward": _resampling_backward("antialiased bilinear"),
    "aten.upsample_bicubic2d_backward": _resampling_backward("bicubic"),
    "aten.upsample_bilinear2d_backward": _resampling_backward("bilinear"),
})
