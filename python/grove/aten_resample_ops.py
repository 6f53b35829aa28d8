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
# kernels accumulate. The weights are checked once per shape against the
# kernel on a random probe image (verified_weights): on PyTorch 2.11 the
# impulse images of one pixel across gave weights 1.6 away from the kernel's
# results (H200 and its CPU alike), so a build whose kernel the products do
# not reproduce leaves the op to PyTorch. Tests: sampling_ops_test's
# ResampleTest, test_weights_that_do_not_reproduce_the_kernel_leave_it_to_pytorch
# among them.

KERNELS = {"antialiased bicubic": torch.ops.aten._upsample_bicubic2d_aa.default,
           "antialiased bilinear": torch.ops.aten._upsample_bilinear2d_aa.default,
           "bicubic": torch.ops.aten.upsample_bicubic2d.default,
           "bilinear": torch.ops.aten.upsample_bilinear2d.default}


# The other axis's extent in the impulse images: an axis of one pixel is a
# case of its own in some PyTorch builds' kernels, so the impulses run along
# a few pixels that the kernel copies unchanged (in = out, no scale).
_ACROSS = 4


def axis_weights(mode, in_size, out_size, align, scale, axis, dtype):
    """[out_size, in_size]: PyTorch's weights along one axis (axis 0: the
    height, 1: the width), or None where they are the identity."""
    eye = torch.eye(in_size, dtype=dtype)
    if axis == 0:
        image = eye.view(in_size, 1, in_size, 1).expand(in_size, 1, in_size, _ACROSS)
        size, scales = [out_size, _ACROSS], (scale, None)
    else:
        image = eye.view(in_size, 1, 1, in_size).expand(in_size, 1, _ACROSS, in_size)
        size, scales = [_ACROSS, out_size], (None, scale)
    out = KERNELS[mode](image.contiguous(), size, align, *scales)
    out = out[:, 0, :, 0] if axis == 0 else out[:, 0, 0, :]
    weights = out.reshape(in_size, out_size).t()
    if out_size == in_size and torch.equal(weights, eye):
        return None
    return weights.contiguous()


def verified_weights(mode, in_hw, out_hw, align, scales, what):
    """Both axes' weights, checked against PyTorch's kernel on a random image
    of the shape once: where the products do not give the kernel's values
    (within f32 rounding), the op stays in PyTorch (Unsupported), never a
    wrong answer. Note [Resampling as two constant products]."""
    matrices = [axis_weights(mode, in_hw[0], out_hw[0], align, scales[0], 0, torch.float32),
                axis_weights(mode, in_hw[1], out_hw[1], align, scales[1], 1, torch.float32)]
    probe = torch.randn((1, 2) + tuple(in_hw), generator=torch.Generator().manual_seed(0))
    expected = KERNELS[mode](probe, list(out_hw), align, *scales)
    got = probe.double()
    if matrices[0] is not None:
        got = torch.einsum("oh,nchw->ncow", matrices[0].double(), got)
    if matrices[1] is not None:
        got = torch.einsum("pw,nchw->nchp", matrices[1].double(), got)
    error = (got - expected.double()).abs().max().item()
    if error > 1e-5 * max(1.0, expected.abs().max().item()):
        raise Unsupported("%s: the per-axis weights taken from this PyTorch's kernel do not "
                          "reproduce it (%.2g off on a probe image)" % (what, error))
    return matrices


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


def _in_dtype(matrices, dtype):
    return [None if matrix is None else matrix.to(dtype) for matrix in matrices]


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
        matrices = _in_dtype(verified_weights(mode, shape[2:], [out_h, out_w], align, scales,
                                              what), compute)
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
        matrices = _in_dtype(verified_weights(mode, in_shape[2:], [out_h, out_w], align,
                                              scales, what), compute)
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
