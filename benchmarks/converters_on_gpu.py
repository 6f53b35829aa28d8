#!/usr/bin/env python3
"""Checks session 28's converters on a GPU host against PyTorch there (2.x):
F.fold (col2im), F.grid_sample (grid_sampler_2d, cudnn_grid_sampler, their
backwards; affine_grid), torch.sort / argsort, F.interpolate(antialias=True)
(_upsample_*2d_aa and backwards), the math family (erf, hyperbolic and
inverse trigonometric functions, addcmul, lerp), integer argmax, Tensor.unfold
and pooling windows wider than the image, each in a
tiny function or module through torch.compile(backend="grove"), inference
and (where the op has a gradient) training (session 28's later ops too: tril/triu,
any/all, masked writes, integer sums, infinite constants, 3-d convolutions and
pools, transposed convolutions, histc; then max_pool3d's indices, the 3-d pools'
backwards and transposed 3-d convolution): outputs and gradients against
PyTorch eager on the same inputs, over three calls (warm-up, recording,
replay).

    GROVE_LIBRARY=.../libgrove.so PYTHONPATH=python python3 benchmarks/converters_on_gpu.py

Prints one line per case: the largest difference relative to the largest
expected magnitude (at least 1), or for integer results the count of
differing elements, and the ops left to PyTorch. Exits 1 on a difference
beyond 1e-4 or on any op left to PyTorch. TF32 is off on both sides.
--sim runs the inference cases on grove's sim device instead (CPU, any
PyTorch, through compile_graph's make_fx): no dynamo, no GPU."""

import importlib
import sys

import torch
import torch.nn.functional as F

TOLERANCE = 1e-4
CALLS = 3


def difference(actual, expected):
    if not expected.is_floating_point():
        return float((actual != expected).sum())
    scale = max(float(expected.abs().max()) if expected.numel() else 0.0, 1.0)
    return float((actual.float() - expected.float()).abs().max()) / scale


def as_list(value):
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in as_list(v)]
    return [value]


class Probe(torch.nn.Module):
    """function(*parameters, *inputs), the parameters trained (attributes
    p0, p1, ...: dynamo does not unpack a ParameterList with *)."""

    def __init__(self, function, parameters):
        super().__init__()
        self.function = function
        self.count = len(parameters)
        for index, value in enumerate(parameters):
            setattr(self, "p%d" % index, torch.nn.Parameter(value.clone()))

    @property
    def weights(self):
        return [getattr(self, "p%d" % index) for index in range(self.count)]

    def forward(self, *inputs):
        if self.count == 1:
            return self.function(self.p0, *inputs)
        if self.count == 2:
            return self.function(self.p0, self.p1, *inputs)
        return self.function(self.p0, self.p1, self.p2, *inputs)


def new_runners(before):
    from grove import dynamo_backend

    return [r for r in dynamo_backend._live_runners if id(r) not in before]


def check_inference(name, function, inputs):
    from grove import dynamo_backend

    torch._dynamo.reset()
    before = {id(r) for r in dynamo_backend._live_runners}
    compiled = torch.compile(function, backend="grove", dynamic=False)
    worst = 0.0
    with torch.no_grad():
        expected = as_list(function(*inputs))
        for _ in range(CALLS):
            actual = [t.clone() for t in as_list(compiled(*inputs))]
            for a, e in zip(actual, expected):
                worst = max(worst, difference(a, e))
    torch.cuda.synchronize()
    left = sorted({op for r in new_runners(before) for _, op, _ in r.unsupported})
    return worst, left


def check_training(name, function, parameters, inputs):
    """loss = sum(output^2) of each float output; the parameters' gradients
    and the outputs against eager."""
    from grove import dynamo_backend

    torch._dynamo.reset()
    before = {id(r) for r in dynamo_backend._live_runners}
    probe = Probe(function, parameters).cuda()
    reference = Probe(function, parameters).cuda()
    compiled = torch.compile(probe, backend="grove", dynamic=False)
    worst = 0.0
    for _ in range(CALLS):
        results = []
        for module in (compiled, reference):
            module.zero_grad(set_to_none=True)
            outputs = as_list(module(*inputs))
            loss = sum((o * o).sum() for o in outputs if o.is_floating_point())
            loss.backward()
            results.append([o.detach().clone() for o in outputs] +
                           [p.grad.clone() for p in (probe if module is compiled
                                                     else reference).weights])
        for a, e in zip(*results):
            worst = max(worst, difference(a, e))
    torch.cuda.synchronize()
    left = sorted({op for r in new_runners(before) for _, op, _ in r.unsupported})
    return worst, left


def sampler(mode, padding, align):
    def sample(x, grid):
        return F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)

    return sample


def resizer(mode, **size):
    def resize(t):
        return F.interpolate(t, mode=mode, antialias=True, align_corners=False, **size)

    return resize


def cases(device):
    def randn(*shape):
        return torch.randn(*shape, device=device)

    def grid(n, h, w, spread=1.3):
        return (torch.rand(n, h, w, 2, device=device) * 2 - 1) * spread

    inference, training = [], []
    # F.fold: overlapping windows summed (col2im).
    inference.append(("fold", lambda c: F.fold(c, (14, 13), 3, padding=1, stride=(1, 2)) * 2,
                      [randn(2, 27, 14 * 7)]))
    inference.append(("fold_tiling", lambda c: F.fold(c, (8, 8), 2, stride=2),
                      [randn(2, 12, 16)]))
    training.append(("fold_grad", lambda c: F.fold(c, (14, 13), 3, padding=1, stride=(1, 2)),
                     [randn(2, 27, 14 * 7)], []))
    # F.grid_sample: every mode and padding grove takes, both corners
    # (bilinear + zeros + align_corners=True is cuDNN's sampler on CUDA).
    x, g = randn(2, 3, 9, 8), grid(2, 6, 7)
    for mode in ("bilinear", "nearest"):
        for padding in ("zeros", "border", "reflection"):
            for align in (False, True):
                sample = sampler(mode, padding, align)
                name = "grid_sample_%s_%s_%s" % (mode, padding, "aligned" if align else "centres")
                inference.append((name, sample, [x, grid(2, 6, 7, 3.5 if padding == "reflection"
                                                          else 1.3)]))
                training.append((name + "_grad", sample, [x, g], []))

    def transformer(theta, x):
        grid = F.affine_grid(theta, [2, 3, 7, 6], align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)

    theta = torch.tensor([[[0.9, 0.2, 0.1], [-0.1, 1.1, -0.2]],
                          [[1.2, 0.0, 0.3], [0.3, 0.8, 0.0]]], device=device)
    inference.append(("affine_grid_sample", transformer, [theta, x]))
    training.append(("affine_grid_sample_grad", transformer, [theta, x], []))
    # torch.sort / argsort (ViTMAE's random masking).
    inference.append(("sort_descending", lambda t: torch.sort(t, dim=1, descending=True),
                      [randn(4, 37, 5)]))
    inference.append(("sort_stable_ties", lambda t: torch.sort(t, stable=True),
                      [torch.randint(0, 5, (3, 40), device=device).float()]))

    def masking(tokens, noise):
        shuffle = torch.argsort(noise, dim=1)
        restore = torch.argsort(shuffle, dim=1)
        keep = shuffle[:, :49]
        return torch.gather(tokens, 1, keep.unsqueeze(-1).repeat(1, 1, tokens.shape[-1])), restore

    inference.append(("argsort_masking", masking, [randn(4, 196, 16), torch.rand(4, 196,
                                                                                 device=device)]))
    training.append(("sort_grad", lambda t: torch.sort(t, dim=-1, descending=True)[0][:, :5],
                     [randn(4, 30)], []))
    # F.interpolate(antialias=True): timm's position-embedding resize.
    for mode in ("bicubic", "bilinear"):
        for size in ((7, 9), (16, 16)):
            inference.append(("%s_aa_%dx%d" % (mode, size[0], size[1]),
                              resizer(mode, size=size), [randn(2, 8, 14, 14)]))
        training.append(("%s_aa_grad" % mode, resizer(mode, scale_factor=0.4),
                         [randn(2, 3, 14, 12)], []))
    # The wide survey's finds: erf and the math family, integer argmax,
    # Tensor.unfold, pooling windows wider than the image.
    def math_family(x, unit, above_one):
        return (torch.erf(x), torch.sinh(x), torch.cosh(x), torch.asinh(x), torch.atanh(unit),
                torch.asin(unit), torch.acos(unit), torch.acosh(above_one),
                torch.log2(above_one), torch.log10(above_one), torch.exp2(x),
                torch.addcmul(x, unit, above_one, value=0.5), torch.lerp(x, unit, above_one / 11))

    x = randn(6, 40)
    unit = torch.rand(6, 40, device=device) * 1.8 - 0.9
    above_one = 1 + torch.rand(6, 40, device=device) * 10
    inference.append(("math_family", math_family, [x, unit, above_one]))
    training.append(("math_family_grad", math_family, [x, unit, above_one], []))
    wide = torch.randint(-2 ** 62, 2 ** 62, (4, 33), device=device)
    wide[1, 7] = 2 ** 62 + 1
    wide[1, 9] = 2 ** 62
    ids = torch.randint(3, 1000, (3, 16), device=device)
    inference.append(("integer_argmax", lambda w, i: (
        w.argmax(-1), w.max(), w.min(dim=0), i.to(torch.int).argmax(-1),
        (i == 5).int().argmax(-1)), [wide, ids]))
    inference.append(("tensor_unfold", lambda t: t.unfold(2, 4, 2) * 2, [randn(2, 3, 9, 7)]))
    training.append(("tensor_unfold_grad", lambda t: t.unfold(1, 4, 3), [randn(3, 11, 2)], []))
    inference.append(("pooling_wider_than_image", lambda t: (
        F.avg_pool2d(t, 1280, ceil_mode=True), F.max_pool2d(t, 1280, ceil_mode=True)),
        [randn(1, 2560, 2, 3)]))
    # Session 28's later finds: tril/triu, any/all, boolean-mask writes,
    # integer sums past f32, infinite constants, 3-d convolutions and pools,
    # transposed convolutions, histc (MoE routing).
    inference.append(("tril_triu", lambda t: (torch.tril(t, -1), torch.triu(t, 2) * 3),
                      [randn(2, 7, 9)]))
    training.append(("tril_triu_grad", lambda t: torch.tril(t, 1) + torch.triu(t, -2),
                     [randn(7, 5)], []))
    inference.append(("any_all", lambda t: ((t > 0).any(-1), (t > 0.5).all(), (t > -2).all(0),
                                           t.bool().any()), [randn(3, 6, 4)]))

    def masked_write(t, m):
        t = t.clone()
        t[m > 0] = 0.5
        return t * 2

    inference.append(("masked_index_put", masked_write, [randn(4, 9), randn(4, 9)]))
    big = torch.randint(0, 2 ** 40, (3, 50), device=device)
    inference.append(("integer_sums", lambda i: (i.sum(-1), i.sum(), (i > 2 ** 39).sum(-1),
                                                 (i % 1000).to(torch.int32).sum(0)), [big]))
    inference.append(("infinite_constants", lambda t: (
        torch.where(t > 0.5, float("-inf"), t).max(-1)[0],
        torch.topk(t.masked_fill(t > 1, float("-inf")), 3, dim=-1)[0],
        t.clamp(max=float("inf")) * 2), [randn(4, 12)]))
    x3 = randn(2, 3, 6, 10, 9)
    training.append(("conv3d_grad", lambda w, x: F.conv3d(x, w, padding=1, stride=(1, 2, 2)),
                     [randn(4, 3, 3, 3, 3)], [x3]))
    training.append(("conv3d_groups_grad", lambda w, b, x: F.conv3d(x, w, b, groups=3,
                                                                    dilation=(1, 2, 1)),
                     [randn(6, 1, 2, 3, 3), randn(6)], [x3]))
    inference.append(("pools_3d", lambda t: (F.max_pool3d(t, 2), F.avg_pool3d(t, (1, 3, 3), 2,
                                                                             padding=(0, 1, 1)),
                                             F.adaptive_avg_pool3d(t, 1),
                                             F.max_pool3d(t, 3, 2, ceil_mode=True)), [x3]))
    training.append(("pools_3d_grad", lambda t: (F.max_pool3d(t, 2), F.avg_pool3d(t, 3, 2,
                                                                                padding=1),
                                                 F.adaptive_avg_pool3d(t, (2, 1, 1))), [x3], []))
    inference.append(("max_pool3d_indices", lambda t: (
        F.max_pool3d(t, 3, 2, 1, return_indices=True),
        F.max_pool3d(t, (2, 3, 2), (1, 2, 2), (1, 1, 0), dilation=(2, 1, 2), ceil_mode=True,
                     return_indices=True),
        F.max_pool3d(t.round(), 2, return_indices=True)), [x3]))  # .round(): ties
    inference.append(("adaptive_avg_pool3d", lambda t: (F.adaptive_avg_pool3d(t, (5, 3, 4)),
                                                        F.adaptive_avg_pool3d(t, (4, 7, 2))),
                      [x3]))
    training.append(("max_pool3d_indices_grad", lambda t: (
        F.max_pool3d(t, 3, 2, 1, ceil_mode=True, return_indices=True),
        F.max_pool3d(t, (2, 3, 2), (1, 2, 2), (1, 1, 0), dilation=(2, 1, 2))), [x3], []))
    training.append(("avg_pool3d_grad", lambda t: (
        F.avg_pool3d(t, 3, 2, 1, count_include_pad=False),
        F.avg_pool3d(t, (2, 3, 3), 2, (1, 1, 0), ceil_mode=True),
        F.avg_pool3d(t, 2, divisor_override=3)), [x3], []))
    training.append(("adaptive_avg_pool3d_grad", lambda t: (
        F.adaptive_avg_pool3d(t, (5, 3, 4)),
        torch.ops.aten._adaptive_avg_pool3d(t, [1, 1, 1])), [x3], []))
    inference.append(("conv_transpose3d", lambda x, w, b: (
        F.conv_transpose3d(x, w, b, stride=2, padding=1, output_padding=1),
        F.conv_transpose3d(x, w, stride=(1, 2, 3), dilation=(2, 1, 1), output_padding=(0, 1, 2))),
        [randn(2, 4, 3, 5, 4), randn(4, 3, 3, 2, 3), randn(3)]))
    training.append(("conv_transpose2d_grad", lambda w, b, x: F.conv_transpose2d(
        x, w, b, stride=2, padding=1, output_padding=1), [randn(3, 5, 3, 3), randn(5)],
        [randn(2, 3, 7, 6)]))
    training.append(("conv_transpose2d_groups_grad", lambda w, x: F.conv_transpose2d(
        x, w, stride=(2, 1), groups=2, dilation=2), [randn(4, 3, 2, 3)], [randn(2, 4, 5, 5)]))
    training.append(("conv_transpose1d_grad", lambda w, x: F.conv_transpose1d(x, w, stride=3),
                     [randn(3, 2, 4)], [randn(2, 3, 11)]))
    training.append(("conv_transpose3d_grad", lambda w, x: F.conv_transpose3d(
        x, w, stride=2, padding=1), [randn(3, 2, 3, 3, 3)], [randn(1, 3, 3, 4, 4)]))
    training.append(("conv_transpose3d_groups_grad", lambda w, b, x: F.conv_transpose3d(
        x, w, b, groups=2, stride=(2, 1, 2), padding=(0, 1, 1), dilation=(1, 2, 1),
        output_padding=(1, 0, 0)), [randn(4, 3, 2, 3, 3), randn(6)], [randn(2, 4, 3, 4, 4)]))
    def chunks(t):  # HF Longformer's overlapping windows over a transposed projection
        y = (t * 2).transpose(0, 1).transpose(1, 2).reshape(6, 8, 2).view(6, 2, 4, 2)
        size, stride = list(y.size()), list(y.stride())
        size[1], stride[1] = 3, stride[1] // 2
        return y.as_strided(size, stride) + 1

    inference.append(("as_strided_windows", chunks, [randn(8, 2, 3, 2)]))
    training.append(("as_strided_windows_grad", chunks, [randn(8, 2, 3, 2)], []))
    inference.append(("histc", lambda t: torch.histc(t, bins=8, min=0, max=8),
                      [torch.randint(0, 8, (40,), device=device).float()]))
    if device != "cpu":  # PyTorch's CPU histc takes no integers
        inference.append(("histc_int32", lambda t: (torch.histc(t, bins=8, min=0, max=7),
                                                    torch.histc(t.long() - 3, bins=3, min=0,
                                                                max=4)),
                          [torch.randint(0, 8, (40,), device=device, dtype=torch.int32)]))
    return inference, training


def check_on_sim(name, function, inputs):
    """--sim (no GPU, PyTorch without dynamo): the inference cases through
    grove's compile_graph (make_fx) on the sim device."""
    from grove import dynamo_backend

    compiled = dynamo_backend.compile_graph(function, inputs, mode="eager")
    worst = 0.0
    with torch.no_grad():
        expected = as_list(function(*inputs))
        for _ in range(CALLS):
            for a, e in zip(as_list(compiled(*inputs)), expected):
                worst = max(worst, difference(a, e))
    return worst, sorted({op for _, op, _ in compiled.runner.unsupported})


def report(name, worst, left, failed):
    ok = worst <= TOLERANCE and not left
    print("%-44s %s diff %.3g  left to PyTorch: %s" % (name, "ok  " if ok else "FAIL", worst,
                                                       left or "none"))
    if not ok:
        failed.append(name)


def main(argv):
    importlib.import_module("grove.torch")  # registers backend="grove"
    failed = []
    torch.manual_seed(20261127)
    if "--sim" in argv:
        inference, _ = cases("cpu")
        for name, function, inputs in inference:
            report(name, *check_on_sim(name, function, inputs), failed)
        print("torch %s, sim: %d cases, %d failed" % (torch.__version__, len(inference),
                                                      len(failed)))
        return 1 if failed else 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    inference, training = cases("cuda")
    for name, function, inputs in inference:
        report(name, *check_inference(name, function, inputs), failed)
    for name, function, parameters, inputs in training:
        report(name, *check_training(name, function, parameters, inputs), failed)
    print("torch %s, %s: %d cases, %d failed%s" % (
        torch.__version__, torch.cuda.get_device_name(), len(inference) + len(training),
        len(failed), (": " + ", ".join(failed)) if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
