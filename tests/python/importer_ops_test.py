"""The importer's converters of issue 33 part 1, one op at a time on sim
against torch (f32, and bf16 where grove takes it): the pointwise math family,
bitwise and logical ops, gather/index/index_select, in-place ops on
intermediates, convolution, batch norm and pooling. Each graph must import
whole (plan.unsupported empty) unless the test says otherwise; "cudagraphs"
equals "eager" bitwise. Tolerances as importer_test.py's."""
import operator
import os
import sys
import unittest

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from grove import importer, kept_attention  # noqa: E402
from grove.fx_common import op_name  # noqa: E402
from grove.aten_ops import CONVERTERS  # noqa: E402
import junit_main  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
BF16 = dict(rtol=2 ** -7, atol=1e-2)


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


class ConverterCase(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(20261126)

    def check(self, function, inputs, rtol=RTOL, atol=ATOL, unsupported=(),
              backends=("eager", "cudagraphs"), equal_nan=False, also=None):
        """Imports make_fx(function), runs it eagerly and as graphs, and
        compares with torch (NaN equal to NaN where `equal_nan`; then
        also(index, actual, wanted) per output, where given); returns the plan."""
        def fresh():  # a function may write into its inputs
            return [t.clone() for t in inputs]

        with torch.no_grad():
            graph = make_fx(function)(*fresh())
            expected = _as_list(function(*fresh()))
        plan = importer.import_graph(graph, fresh())
        self.assertEqual([op for _, op, _ in plan.unsupported], list(unsupported),
                         plan.unsupported)
        results = {}
        for backend in backends:
            runner = plan.compile(backend=backend)
            for _ in range(2):
                results[backend] = [t.clone() for t in _as_list(runner(*fresh()))]
        for index, (actual, wanted) in enumerate(zip(results["eager"], expected)):
            torch.testing.assert_close(actual, wanted, rtol=rtol, atol=atol, equal_nan=equal_nan,
                                       msg=lambda m: "output %d: %s" % (index, m))
            if also is not None:
                also(index, actual, wanted)
        for actual, eager in zip(results.get("cudagraphs", []), results["eager"]):
            if equal_nan and actual.is_floating_point():
                actual, eager = actual.nan_to_num(7.0), eager.nan_to_num(7.0)
            self.assertTrue(torch.equal(actual, eager))
        return plan


class PointwiseTest(ConverterCase):
    def test_trigonometry_and_logs_match_torch_in_f32_and_bf16(self):
        def function(x, y):
            return (torch.sin(x), torch.cos(x), torch.tan(y), torch.atan(x * 3),
                    torch.log1p(y.abs()), torch.expm1(y))

        def large(x):  # rotary angles: positions of contexts up to a million
            return (torch.cos(x * 40), torch.sin(x * 200), torch.sin(x * 1000),
                    torch.cos(x * 5e4), torch.sin(x * 2.5e5))

        x, y = torch.rand(6, 9) * 8 - 4, torch.rand(6, 9) * 2 - 1
        plan = self.check(function, [x, y])
        ops = {node["op"] for node in plan.programs()[0]["nodes"]}
        self.assertTrue({"sin", "cos", "atan", "log1p", "expm1"} <= ops, ops)
        self.check(large, [x], atol=1e-4)
        self.check(function, [x.bfloat16(), y.bfloat16()], **BF16)

    def test_small_arguments_keep_their_relative_accuracy(self):
        def function(x):
            return torch.log1p(x), torch.expm1(x), torch.sin(x)

        x = torch.tensor([1e-7, -3e-6, 2e-4, -1e-3, 0.0, 5e-2])
        self.check(function, [x], rtol=1e-5, atol=1e-12)

    def test_rounding_matches_torch_with_ties_to_even(self):
        def function(x, n):
            return (torch.floor(x), torch.ceil(x), torch.round(x), torch.trunc(x),
                    torch.round(x, decimals=1), torch.floor(n))

        x = torch.tensor([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], [-1.7, -0.2, 0.2, 1.2, 3.7, 9.5]])
        self.check(function, [x, torch.arange(6)])
        self.check(function, [x.bfloat16(), torch.arange(6)], **BF16)

    def test_clamp_maximum_minimum_sign_and_modulo(self):
        def function(x, y, n):
            return (torch.clamp(x, -0.5, 0.7), torch.clamp(x, min=y), torch.clamp(x, max=0.1),
                    x.clamp_min(0.2), torch.maximum(x, y), torch.minimum(x, y), torch.sign(x),
                    torch.remainder(x, 0.7), torch.fmod(x, y.abs() + 0.5), x % y.abs().add(0.3),
                    F.hardtanh(x * 3), torch.sign(n), torch.clamp(n, 1, 3), torch.maximum(n, n.t()),
                    torch.div(x, 0.3, rounding_mode="floor"),
                    torch.div(x, y, rounding_mode="trunc"), torch.floor_divide(x, 0.4),
                    n % 3, torch.remainder(n, n.t() - 5), torch.fmod(n, -3), n // 2,
                    torch.div(n, n.t() + 5, rounding_mode="trunc"))

        x, y = torch.randn(5, 5), torch.randn(5, 5)
        n = torch.randint(-4, 5, (5, 5))
        self.check(function, [x, y, n])


    def test_hardswish_and_hardsigmoid_gradients_at_their_corners(self):
        # The gradients MobileNetV3 trains with, on each side of -3 and 3.
        def function(g, x):
            return (torch.ops.aten.hardswish_backward(g, x),
                    torch.ops.aten.hardsigmoid_backward(g, x))

        x = torch.tensor([-4.0, -3.0, -2.9, -0.5, 0.0, 1.0, 2.9, 3.0, 3.5, 8.0])
        g = torch.randn(10)
        self.check(function, [g, x])
        self.check(function, [g.bfloat16(), x.bfloat16()], **BF16)


    def test_activations_and_their_gradients_match_torch(self):
        # LeakyReLU (YOLO, GAN discriminators), ELU, SELU, CELU, Softplus
        # (Mamba's step size), Mish (CSPDarknet), ReLU6's gradient.
        aten = torch.ops.aten

        def without_mish(x):
            return (F.leaky_relu(x, 0.2), F.leaky_relu(x), F.elu(x), F.selu(x), F.celu(x, 0.5),
                    F.softplus(x), F.softplus(x, beta=2, threshold=5), F.relu6(x * 3))

        def forward(x):
            return without_mish(x) + (F.mish(x),)

        def backward(g, x, y):
            return (aten.leaky_relu_backward(g, x, 0.2, False),
                    aten.elu_backward(g, 1.0, 1.0, 1.0, False, x),
                    aten.elu_backward(g, 1.6732632, 1.0507010, 1.0, True, y),
                    aten.softplus_backward(g, x, 2.0, 5.0),
                    aten.mish_backward(g, x), aten.hardtanh_backward(g, x * 3, 0.0, 6.0))

        x = torch.cat([torch.randn(40) * 4, torch.tensor([0.0, 2.0, 2.5, 3.0, -3.0, 12.0])])
        self.check(forward, [x])
        # (PyTorch 1.13 has no bf16 mish on the CPU.)
        self.check(without_mish, [x.bfloat16()], **BF16)
        self.check(backward, [torch.randn(46), x, F.selu(x)])


class GroupNormTest(ConverterCase):
    def test_group_norm_matches_torch_with_and_without_affine(self):
        def function(x, y, weight, bias):
            return (F.group_norm(x, 3, weight, bias), F.group_norm(x, 1), F.group_norm(x, 6),
                    F.group_norm(y, 2, weight, bias, eps=1e-3))

        x, y = torch.randn(2, 6, 5, 4) * 3 + 1, torch.randn(3, 6, 7)
        weight, bias = torch.randn(6), torch.randn(6)
        plan = self.check(function, [x, y, weight, bias])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])
        # PyTorch's bf16 kernel folds the statistics into a per-channel x scale
        # + shift, grove normalizes then scales: two bf16 steps apart at most.
        self.check(function, [t.bfloat16() for t in (x, y, weight, bias)], rtol=2 ** -6,
                   atol=1e-2)

    def test_group_norm_gradients_match_torch(self):
        # Training a GroupNorm model through the door (diffusion UNets, BiT).
        def gradients(g, x, weight):
            _, mean, rstd = torch.ops.aten.native_group_norm(x, weight, None, 2, 6, 20, 3, 1e-5)
            return (torch.ops.aten.native_group_norm_backward(
                        g, x, mean, rstd, weight, 2, 6, 20, 3, [True, True, True]) +
                    torch.ops.aten.native_group_norm_backward(
                        g, x, mean, rstd, None, 2, 6, 20, 3, [True, False, False])[:1])

        x = torch.randn(2, 6, 5, 4) * 3 + 1
        self.check(gradients, [torch.randn(2, 6, 5, 4), x, torch.randn(6)], rtol=1e-4,
                   atol=1e-4)


class WeightNormTest(ConverterCase):
    def test_weight_norm_and_its_gradients_match_torch(self):
        # wav2vec2's positional convolution: weight_norm(conv, dim=2), fused
        # as _weight_norm_interface on PyTorch 2.x; dim 0 and the last dim too.
        interface = torch.ops.aten._weight_norm_interface
        backward = torch.ops.aten._weight_norm_interface_backward

        def function(v, g2, g0, grad):
            w2, norms2 = interface(v, g2, 2)
            w0, norms0 = interface(v, g0, 0)
            return (w2, norms2, w0, norms0, *backward(grad, v, g2, norms2, 2),
                    *backward(grad, v, g0, norms0, 0))

        v = torch.randn(6, 4, 5)
        inputs = [v, torch.randn(1, 1, 5), torch.randn(6, 1, 1), torch.randn(6, 4, 5)]
        plan = self.check(function, inputs)
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])
        self.check(function, [t.bfloat16() for t in inputs], rtol=2 ** -6, atol=1e-2)


class NormTest(ConverterCase):
    """aten_norm_ops: vector norms (F.normalize, torch.norm, linalg's), logsumexp,
    std and var_mean against torch."""

    def test_vector_norms_of_every_order(self):
        def function(x):
            return (F.normalize(x, dim=-1),
                    torch.norm(x, p=2, dim=(1, 2), keepdim=True),  # ConvNeXt-V2's GRN
                    torch.linalg.vector_norm(x, 1, dim=0),
                    torch.linalg.vector_norm(x, float("inf"), dim=(0, 2), keepdim=True),
                    torch.linalg.vector_norm(x.relu(), 0, dim=-1),
                    torch.linalg.vector_norm(x, 3.0, dim=1),
                    torch.linalg.vector_norm(x))

        self.check(function, [torch.randn(3, 5, 4)])

    def test_logsumexp_std_and_var_mean(self):
        def function(x):
            masked = x.masked_fill(x > 1.0, float("-inf"))
            masked = torch.cat([masked, torch.full_like(masked[:1], float("-inf"))])
            var, mean = torch.var_mean(x, dim=(0, 2), keepdim=True, unbiased=False)
            var1, mean1 = torch.var_mean(x, dim=1)
            return (torch.logsumexp(x, dim=-1), torch.logsumexp(masked, dim=(1, 2),
                                                                 keepdim=True),
                    torch.std(x, dim=1), torch.std(x, dim=(0, 2), unbiased=False, keepdim=True),
                    var, mean, var1, mean1)

        self.check(function, [torch.randn(3, 5, 4)])


class ActivationAndTilingTest(ConverterCase):
    """dropout's backward, glu, prelu, repeat, pixel_shuffle/unshuffle, edge
    padding and bicubic upsampling against torch."""

    def test_dropout_backward_with_the_forwards_mask(self):
        # PyTorch 2.x's training graphs hold native_dropout_backward (the
        # mask is the forward's, drawn by PyTorch): the backward stays whole.
        def function(grad, mask):
            return torch.ops.aten.native_dropout_backward(grad, mask, 1.25)

        self.check(function, [torch.randn(3, 4), torch.rand(3, 4) > 0.2])

    def test_glu_and_prelu(self):
        def function(x, channel_weights, one_weight):
            return (F.glu(x, dim=-1), F.glu(x, dim=1), F.prelu(x, channel_weights),
                    F.prelu(x, one_weight))

        self.check(function, [torch.randn(2, 4, 6), torch.rand(4), torch.rand(1)])

    def test_reflection_and_replication_padding(self):
        def function(x):
            return (F.pad(x, (2, 1, 1, 3), mode="reflect"), F.pad(x, (0, 2, 3, 0), mode="replicate"),
                    F.pad(x[0], (1, 2), mode="reflect"), F.pad(x[0], (3, 1), mode="replicate"))

        self.check(function, [torch.randn(2, 3, 5, 4)])

    def test_bicubic_upsampling(self):
        # ViT's and DINOv2's position embeddings interpolated to another size.
        def function(x):
            return (F.interpolate(x, size=(7, 5), mode="bicubic", align_corners=False),
                    F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=True),
                    F.interpolate(x, size=(3, 2), mode="bicubic", align_corners=False))

        self.check(function, [torch.randn(2, 3, 4, 6)], rtol=1e-5, atol=1e-5)

    def test_repeat_and_pixel_shuffle(self):
        def function(x, mask):
            return (x.repeat(2, 1, 3), x.repeat(2, 1, 1, 1), mask.repeat(1, 2, 2),
                    x.repeat(1, 1, 1), F.pixel_shuffle(x.reshape(2, 12, 1, 1), 2),
                    F.pixel_unshuffle(x.reshape(1, 1, 6, 4), 2))

        self.check(function, [torch.randn(2, 3, 4), torch.rand(2, 3, 4) > 0.5])


class ReductionAndLayoutTest(ConverterCase):
    def test_sums_with_a_dtype_cast_their_input_first(self):
        # autocast's float32 sums of bf16 values (a loss under torch.autocast).
        def function(x):
            return torch.sum(x, dtype=torch.float32), x.sum(dim=1, dtype=torch.float32)

        self.check(function, [torch.randn(6, 8).to(torch.bfloat16)])

    def test_argmax_argmin_and_max_min_with_indices(self):
        def function(x, y):
            values, indices = torch.max(x, 1)
            low, where = x.min(dim=-1, keepdim=True)
            return (torch.argmax(x, -1), torch.argmin(x, 0, keepdim=True), torch.argmax(x),
                    values, indices, low, where, x.max(), x.min(), torch.max(x, y))

        x = torch.randn(4, 6, 5)
        x[0, :, 0] = 3.0  # ties: the first position wins, as in PyTorch
        self.check(function, [x, torch.randn(4, 6, 5)])

    def test_integer_cumsum_like_position_ids_from_a_mask(self):
        def function(mask):
            return mask.long().cumsum(-1) - 1, torch.cumsum(mask, 0), mask.int().cumsum(1)

        mask = torch.ones(3, 11, dtype=torch.long)
        mask[1, :4] = 0
        self.check(function, [mask * torch.randint(1, 1000, (3, 11))])

    def test_roll_like_swins_shifted_windows(self):
        def function(x):
            return (torch.roll(x, shifts=(-3, -3), dims=(1, 2)), torch.roll(x, 2, 0),
                    torch.roll(x, 5), torch.roll(x, shifts=(14, -1), dims=(1, -1)))

        self.check(function, [torch.randn(2, 7, 7, 3)])

    def test_baddbmm_like_blooms_alibi_scores(self):
        def function(bias, q, k):
            return (torch.baddbmm(bias, q, k, beta=1.0, alpha=0.125),
                    torch.baddbmm(bias, q, k, beta=0.5))

        q, k = torch.randn(6, 5, 8), torch.randn(6, 8, 5)
        self.check(function, [torch.randn(6, 1, 5), q, k])

        # With beta 0 the input is not read (its NaNs do not reach the result).
        # PyTorch 1.13's own CPU baddbmm reads uninitialized memory for a
        # broadcast input then, so the reference is the product itself.
        def ignored(bias, q, k):
            nan = torch.full_like(bias, float("nan"))
            return (torch.baddbmm(nan, q, k, beta=0.0),
                    torch.addmm(nan[0], q[0], k[0], beta=0.0))  # addmm likewise

        args = [torch.randn(6, 1, 5), q, k]
        with torch.no_grad():
            plan = importer.import_graph(make_fx(ignored)(*args), args)
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend)  # held: its outputs live in its pool
            batched, single = runner(*args)
            torch.testing.assert_close(batched, torch.bmm(q, k), rtol=RTOL, atol=ATOL)
            torch.testing.assert_close(single, q[0] @ k[0], rtol=RTOL, atol=ATOL)

    def test_slices_with_a_step_and_their_gradients(self):
        # LeViT's subsampling (x[:, ::2, ::2]), YOLOv5's Focus (x[..., ::2,
        # 1::2]); the gradient puts each row back or a zero where it was skipped.
        def function(x):
            return x[:, ::2, ::2] * 2, x[..., 1::2], x[:, -5::3], x[::2, 1:7:2, 2:]

        x = torch.randn(3, 9, 8)
        plan = self.check(function, [x])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

        def gradient(g):
            return (torch.ops.aten.slice_backward(g, [3, 9, 8], 1, 1, 9, 2),
                    torch.ops.aten.slice_backward(g, [3, 9, 8], 1, -8, 100, 2))

        self.check(gradient, [torch.randn(3, 4, 8)])

    def test_bilinear_upsampling_like_segmentation_heads(self):
        def function(x):
            return (F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
                    F.interpolate(x, size=(11, 7), mode="bilinear", align_corners=False),
                    F.interpolate(x, size=(13, 16), mode="bilinear", align_corners=True),
                    F.interpolate(x, size=(3, 2), mode="bilinear", align_corners=False),
                    F.interpolate(x, scale_factor=1.5, mode="bilinear"))

        x = torch.randn(2, 3, 5, 8)
        plan = self.check(function, [x])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])
        # bf16 weighs in f32 as PyTorch's GPU kernels do (its CPU kernel rounds
        # between passes): the reference is f32 on the bf16 input, rounded.
        low = x.bfloat16()
        with torch.no_grad():
            plan = importer.import_graph(make_fx(function)(low), [low])
        for actual, wanted in zip(plan.compile(backend="eager")(low), function(low.float())):
            torch.testing.assert_close(actual, wanted.bfloat16(), **BF16)

    def test_global_average_pooling_of_a_channels_last_tensor(self):
        # ConvNeXt's head (timm and torchvision) left as_strided_, mean and
        # permute to PyTorch on the H100 survey: adaptive_avg_pool2d to 1x1 of
        # a channels-last input is a mean, then as_strided_ of it to the
        # channels-last strides, which moves no element.
        def function(x):
            y = x.permute(0, 3, 1, 2)  # channels-last strides, as ConvNeXt's blocks leave it
            pooled = F.adaptive_avg_pool2d(y, 1)
            return F.layer_norm(pooled.permute(0, 2, 3, 1), [8]).flatten(1) * 2

        plan = self.check(function, [torch.randn(2, 5, 5, 8)])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

        def moved(x):  # a restride that moves elements: a gather (the transpose here)
            return torch.as_strided(x * 2, [4, 3], [1, 4]) + 1

        self.check(moved, [torch.randn(3, 4)])

    def test_row_major_as_strided_windows_and_their_scatter(self):
        # The backward of that restride in training (AOTAutograd): a flat
        # gradient made by as_strided_scatter into zeros, then viewed as
        # [N, C, 1, 1] by as_strided; windows at an offset too.
        def function(x, g):
            base = x.new_zeros(24)
            whole = torch.ops.aten.as_strided_scatter(base, g, [2, 6], [6, 1], 0)
            viewed = torch.as_strided(whole * 1, [2, 6, 1, 1], [6, 1, 1, 1], 0)
            part = torch.ops.aten.as_strided_scatter(x.reshape(24) + 1, g[:, :3], [2, 3],
                                                     [3, 1], 5)
            window = torch.as_strided(x * 3, [3, 1, 4], [4, 4, 1], 6)
            return viewed + 1, part, window

        self.check(function, [torch.randn(6, 4), torch.randn(4, 6)[:2]])

        def moved(x, g):  # a window out of order stays in PyTorch
            return torch.ops.aten.as_strided_scatter(x * 1, g, [3, 2], [1, 3], 0) * 2

        self.check(moved, [torch.randn(6), torch.randn(3, 2)],
                   unsupported=["aten.as_strided_scatter"])

        def of_an_input(x):  # an input's storage offset may differ per call
            return torch.ops.aten.as_strided(x, [2, 2], [2, 1], 0) * 2

        self.check(of_an_input, [torch.randn(4)], unsupported=["aten.as_strided"])

    def test_topk_matches_torch(self):
        def function(logits):
            values, indices = torch.topk(logits, 5)
            low, where = logits.topk(2, dim=0, largest=False)
            return values, indices, low, where, torch.topk(logits, 1)[1]

        self.check(function, [torch.randn(3, 40)])
        self.check(function, [torch.randn(3, 40).bfloat16()], **BF16)

    def test_constant_pad_nearest_upsampling_cumsum_and_flip(self):
        def function(x):
            return (F.pad(x, (1, 2)), F.pad(x, (2, 0, 1, 1), value=-3.0), F.pad(x, (-1, 1, 0, -2)),
                    F.interpolate(x, scale_factor=2, mode="nearest"),
                    F.interpolate(x, size=(5, 11), mode="nearest"),
                    torch.cumsum(x, -1), torch.cumsum(x, 1), torch.cumsum(x[0, 0, 0], 0),
                    torch.flip(x, (1, -1)))

        self.check(function, [torch.randn(2, 3, 4, 6)])


class StackTest(ConverterCase):
    def test_stack_on_each_dim_and_the_backward_of_unbind(self):
        def function(x, y, z):
            q, k, v = x.reshape(2, 5, 3, 4).permute(2, 0, 1, 3).unbind(0)
            return (torch.stack([x, y, z]), torch.stack([x, y], dim=1), torch.stack([x, z], -1),
                    torch.stack([y]), torch.stack([q * 2, k + 1, v], dim=2))

        self.check(function, [torch.randn(10, 12), torch.randn(10, 12), torch.randn(10, 12)])


class BitwiseTest(ConverterCase):
    def test_bitwise_and_logical_ops_on_bool_and_integers(self):
        def function(p, q, m, n):
            return (p & q, p | q, p ^ q, ~p, torch.logical_and(p, m), torch.logical_or(m, n),
                    torch.logical_xor(p, q), torch.logical_not(m), m & n, m | (n + 1), m ^ n, ~n,
                    torch.bitwise_and(m, 6))

        p, q = torch.rand(4, 6) > 0.5, torch.rand(6) > 0.3
        m = torch.randint(-8, 8, (4, 6))
        n = torch.randint(-8, 8, (4, 6), dtype=torch.int32)
        self.check(function, [p, q, m, n.to(torch.int64)])
        self.check(lambda a, b: (a & b, ~a, a | b), [n, n.flip(0)])

    def test_comparisons_on_integers(self):
        def function(m, n):
            return (m < n, m >= 2, m == n, m != 0, (m > n) & (m < 5), torch.where(m > n, m, n),
                    torch.where(m > 0, m > n, m < -2))

        m, n = torch.randint(-5, 5, (3, 7)), torch.randint(-5, 5, (7,))
        self.check(function, [m, n])


class IndexingTest(ConverterCase):
    def test_gather_on_each_dim_matches_torch(self):
        x = torch.randn(4, 5, 6)
        for dim in (0, 1, 2, -1):
            size = x.shape[dim]
            index_shape = list(x.shape)
            index_shape[dim] = 7
            index_shape[0] = min(index_shape[0], 3)  # an index smaller than self elsewhere
            index = torch.randint(0, size, index_shape)
            with self.subTest(dim=dim):
                self.check(lambda t, i: torch.gather(t, dim, i), [x, index])

    def test_gather_of_integers_like_bert_token_types(self):
        def function(token_types, positions):
            return torch.gather(token_types.expand(positions.shape[0], -1), 1, positions)

        self.check(function, [torch.randint(0, 2, (1, 16)), torch.randint(0, 16, (3, 10))])

    def test_index_select_and_index_with_tensors(self):
        x = torch.randn(5, 6, 7)
        rows = torch.tensor([4, 0, -1, 2])
        cols = torch.tensor([[1, 5], [0, -2]])
        cases = {
            "index_select": lambda t: torch.index_select(t, 1, rows.abs()),
            "first_dim": lambda t: t[rows],
            "middle_dim": lambda t: t[:, cols],
            "last_dim": lambda t: t[:, :, rows],
            "adjacent_pair": lambda t: t[:, rows, rows[:, None]],
            "split_pair": lambda t: t[rows, :, rows],
            "all_three": lambda t: t[rows[:, None], cols[:1], 3 - rows[:, None]],
        }
        for name, function in cases.items():
            with self.subTest(case=name):
                self.check(function, [x])
                self.check(function, [x.bfloat16()], **BF16)

    def test_embedding_bags_of_one_size(self):
        def function(ids, table, weights):
            return (F.embedding_bag(ids, table, mode="sum"), F.embedding_bag(ids, table),
                    F.embedding_bag(ids, table, mode="max"),
                    F.embedding_bag(ids, table, mode="sum", per_sample_weights=weights))

        self.check(function, [torch.randint(0, 10, (3, 5)), torch.randn(10, 4),
                              torch.rand(3, 5)])

    def test_index_by_input_tensors(self):
        def function(table, ids, batch):
            return table[batch[:, None], ids] * 2

        table = torch.randn(3, 10)
        self.check(function, [table, torch.randint(0, 10, (3, 4)), torch.tensor([2, 0, 1])])

    @unittest.skipUnless(hasattr(torch.ops.aten, "_unsafe_index"),
                         "this PyTorch (1.13) has no aten._unsafe_index; 2.x's upsample "
                         "decompositions make it")
    def test_unsafe_index_is_index(self):
        def function(x, rows, columns):
            return (torch.ops.aten._unsafe_index(x, [None, rows]),
                    torch.ops.aten._unsafe_index(x, [rows.unsqueeze(1), columns]))

        self.check(function, [torch.randn(5, 6), torch.tensor([4, 0, 2]),
                              torch.tensor([5, 1, 1, 0])])


class IndexPutTest(ConverterCase):
    def test_masked_scatter_fills_the_mask_in_order(self):
        # A vision-language model's merge: image features into the embeddings
        # of the image tokens, the mask broadcast over the hidden dim.
        def function(embeddings, ids, features):
            mask = (ids == 7).unsqueeze(-1)
            merged = embeddings.masked_scatter(mask, features)
            exact = embeddings.masked_scatter(embeddings > 0.5, torch.arange(60.0).reshape(3, 20))
            return merged * 2, exact

        ids = torch.tensor([[1, 7, 7, 2, 7], [7, 3, 3, 7, 1]])
        self.check(function, [torch.randn(2, 5, 6), ids, torch.randn(5, 6)])

    def test_index_put_copy_and_add_match_torch(self):
        cache = torch.randn(2, 4, 10, 3)
        new = torch.randn(2, 4, 2, 3)
        rows = torch.tensor([7, -1])

        def function(cache, new, positions, batch, head):
            written = cache * 1
            written[:, :, positions] = new  # index_put_ into an intermediate
            wrapped = batch, head
            return (cache.index_copy(2, positions, new), written,
                    torch.index_put(cache, wrapped, new[0, 0, 0], accumulate=True),
                    cache.index_add(0, wrapped[0], new[:, :1, :1].expand(2, 4, 10, 3),
                                    alpha=0.5),
                    torch.index_put(cache[0, 0], (rows,), torch.tensor(2.0)))

        self.check(function, [cache, new, torch.tensor([3, 8]), torch.tensor([1, 0]),
                              torch.tensor([3, -4])])

    def test_one_written_position_is_one_where(self):
        # Note [One written position is a where] (aten_index_put_ops.py): a
        # decode step's cache writes at one position (the last one too),
        # and a value broadcast into it, against PyTorch.
        cache = torch.randn(2, 4, 10, 3)

        def function(cache, new, position):
            written = cache * 1
            torch.ops.aten.index_put_(written, [None, None, position], new)
            broadcast = torch.ops.aten.index_put(cache, [None, None, position],
                                                 torch.tensor(2.5))
            return cache.index_copy(2, position, new), written, broadcast

        for position in (4, 9):
            inputs = [cache, torch.randn(2, 4, 1, 3), torch.tensor([position])]
            plan = self.check(function, inputs)
            runner = plan.compile(backend="cudagraphs")
            runner(*inputs)
            lowered = runner.models()[0].stats()["programs"][0]["lowered"]
            # No gather of the cache's rows: each write is elementwise over it.
            self.assertNotIn("embedding", lowered)


    def test_scatter_and_scatter_add_match_torch(self):
        x = torch.randn(3, 5, 4)

        def function(x, index, ones):
            grads = torch.zeros(3, 5, 4).scatter_add(1, index, torch.ones(3, 2, 4) * 2)
            return (x.scatter(1, index[:, :1], ones[:, :1]), x.scatter_add(1, index, ones),
                    x.scatter(-1, index.transpose(1, 2)[:, :, :2].clamp(max=3), 3.5),
                    grads, x.scatter(0, torch.tensor([[[2, 0, 1, 1]] * 5]), x[:1] * 2),
                    # an index smaller than self, a src larger than the index
                    x.scatter_add(2, index[:2, :, :3].clamp(max=3), x * 3))

        index = torch.tensor([[[1, 4, 0, 1], [1, 2, 0, 3]]] * 3)
        self.check(function, [x, index, torch.randn(3, 2, 4)])

    def test_gather_backward_is_a_scatter_add(self):
        from training_test import _autograd_graph

        def function(x, index):
            return (torch.gather(x, 1, index) * torch.arange(6.0).view(2, 3)).sum()

        x, index = torch.randn(2, 5), torch.tensor([[4, 0, 4], [1, 1, 3]])
        graph, joint = _autograd_graph(function, x, index)
        plan = importer.import_graph(graph, [x, index], strict=True)
        for actual, wanted in zip(plan.compile()(x, index), joint(x, index)):
            torch.testing.assert_close(actual, wanted.detach(), rtol=RTOL, atol=ATOL)


class InPlaceTest(ConverterCase):
    def test_in_place_ops_on_intermediates_are_imported_with_their_new_value(self):
        def function(x, y):
            h = x * 2
            h.relu_()
            h.add_(y, alpha=0.5)
            z = h * 3  # reads h after both writes
            h.mul_(-1)
            return z, h, h.sum()

        x, y = torch.randn(4, 5), torch.randn(5)
        plan = self.check(function, [x, y])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

    def test_a_write_through_a_view_nobody_else_reads_stays_in_grove(self):
        # Note [Aliases nobody reads after the write] (inplace.py): Falcon's
        # mlp_output += attention_output, where mlp_output is the _unsafe_view
        # of an mm, left the mm, the view and the add_ to PyTorch.
        def falcon(x, w, o):
            h = x @ w.t()
            h += o
            return h * 2

        args = [torch.randn(2, 3, 4), torch.randn(5, 4), torch.randn(2, 3, 5)]
        plan = self.check(falcon, args)
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

        # The base read after the write sees it: PyTorch writes, as before.
        def read_after(x, w, o):
            m = x.reshape(6, 4) @ w.t()
            v = m.view(2, 3, 5)
            v.add_(o)
            return v * 2, m + 1

        plan = self.check(read_after, args, unsupported=["aten.mm", "aten.view", "aten.add_"])

    def test_writes_into_a_mask_no_input_reaches_fold(self):
        # Note [Writes into storage no input reaches] (importer.py):
        # torchvision Swin's shifted-window mask, written slice by slice into
        # new_zeros at every call (in PyTorch: 20 replays a call on the survey).
        def swin(x):
            mask = x.new_zeros((7, 7))
            count = 0
            for h in ((0, -3), (-3, -1), (-1, None)):
                for w in ((0, -3), (-3, -1), (-1, None)):
                    mask[h[0]:h[1], w[0]:w[1]].fill_(float(count))
                    count += 1
            mask = mask.view(7, 7).unsqueeze(0)
            return x + (mask != 0).float() * -100 + mask

        plan = self.check(swin, [torch.randn(2, 7, 7)])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

        # As torchvision writes it: item assignment of a Python number, which
        # tracing turns into fill_ of a lifted constant (a get_attr).
        def swin_setitem(x):
            mask = x.new_zeros((7, 7))
            count = 0
            for h in ((0, -3), (-3, -1), (-1, None)):
                for w in ((0, -3), (-3, -1), (-1, None)):
                    mask[h[0]:h[1], w[0]:w[1]] = count
                    count += 1
            windows = mask.view(7, 7).permute(1, 0).reshape(1, 49)
            windows = windows.unsqueeze(1) - windows.unsqueeze(2)
            return x.reshape(2, 1, 49) + windows.masked_fill(windows != 0, -100.0)[0]

        plan = self.check(swin_setitem, [torch.randn(2, 7, 7)])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

        # A storage an input reaches is still written in PyTorch, and the
        # constant part of it is not folded under that write.
        def reached(x):
            mask = x.new_zeros((7, 7))
            mask[:3].fill_(2.0)
            mask[4:].copy_(x[0, 4:])
            return x * mask

        self.check(reached, [torch.randn(2, 7, 7)],
                   unsupported=["aten.new_zeros", "aten.slice", "aten.fill_", "aten.slice",
                                "aten.copy_"])

        # A written storage the graph returns stays in PyTorch: the caller
        # may write the tensor it gets, which must not be a folded constant.
        def returned(x):
            mask = x.new_zeros((3, 7))
            mask[1:].fill_(5.0)
            return x * 2, mask

        self.check(returned, [torch.randn(2, 7)],
                   unsupported=["aten.new_zeros", "aten.slice", "aten.fill_"])

    def test_an_element_of_a_tuple_written_in_pytorch_runs_with_its_op(self):
        # Note [Elements of a result PyTorch writes] (inplace.py): an in-place
        # op grove lacks (lgamma_) writes an element of batch norm's result
        # tuple, so the element and the op that makes the tuple run in
        # PyTorch; they failed as "value 'native_batch_norm' was never computed".
        mean, var = torch.randn(4), torch.rand(4) + 0.5

        def function(x):
            y = F.batch_norm(x * 3, mean, var, training=False)
            return y.lgamma_() * 2

        plan = self.check(function, [torch.randn(2, 4, 3)],
                          unsupported=["aten.native_batch_norm", "getitem", "aten.lgamma_"])
        self.assertEqual([kind for kind, _ in plan.steps],
                         ["grove", "torch", "torch", "torch", "grove"])

    def test_hardswish_and_hardsigmoid_in_place_after_a_batch_norm(self):
        # MobileNetV3's Conv, BatchNorm, Hardswish(inplace=True) and its
        # squeeze-excite gate (Hardsigmoid), whole in grove.
        mean, var = torch.randn(4), torch.rand(4) + 0.5

        def function(x):
            y = F.batch_norm(x * 3, mean, var, training=False)
            gate = F.hardsigmoid(y.mean(-1, keepdim=True), inplace=True)
            return F.hardswish(y, inplace=True) * gate, F.hardswish(x * 4), F.hardsigmoid(x * 4)

        plan = self.check(function, [torch.randn(2, 4, 9)])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

    def test_an_in_place_view_op_leaves_its_argument_shape(self):
        # Note [In-place view ops keep their argument's shape] (importer.py):
        # a plain trace of a 1-D operand's matmul is unsqueeze, mm, squeeze_
        # of the product; t_ and unsqueeze_ change their argument's sizes too.
        def function(v, w, x):
            product = torch.tanh(v @ w)  # [D], through mm's [1, D]
            h = x * 2
            h.t_()
            g = x + 1
            g.unsqueeze_(1)
            return product, product.sum(), h * 3, g - 1

        graph = make_fx(function)(torch.randn(8), torch.randn(8, 8), torch.randn(4, 8))
        ops = [op_name(node.target) for node in graph.graph.nodes if node.op == "call_function"]
        self.assertIn("aten.squeeze_", ops)  # the graph shape this test is about
        plan = self.check(function, [torch.randn(8), torch.randn(8, 8), torch.randn(4, 8)])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

    def test_values_read_before_a_write_keep_their_earlier_value(self):
        def function(x):
            base = torch.zeros(3, 4)
            before = base + 1  # reads base before the write
            base.add_(x)
            base[:, 1:] = 7.0  # a write through a view: base's family runs in PyTorch
            return before * 2, base

        # The written family, as this PyTorch traces it (1.13 slices twice,
        # once per dimension; 2.x drops the whole-dimension slice): all of it
        # runs in PyTorch, and nothing else does.
        traced = make_fx(function)(torch.randn(3, 4))
        family = [op_name(node.target) for node in traced.graph.nodes
                  if node.op == "call_function"
                  and op_name(node.target) in {"aten.zeros", "aten.add_", "aten.slice",
                                               "aten.fill_"}]
        self.assertIn("aten.fill_", family)
        self.check(function, [torch.randn(3, 4)], unsupported=family)

    def test_copy_zero_fill_and_masked_fill_in_place(self):
        def function(x, y, mask):
            h = x + 1
            g = x * 2
            g.copy_(y)  # broadcast into g's shape
            k = x - 1
            k.zero_()
            m = x * 3
            m.masked_fill_(mask, -5.0)
            n = x.clone()
            n.fill_(0.25)
            return h + g, k, m, n

        self.check(function, [torch.randn(3, 4), torch.randn(4), torch.rand(3, 4) > 0.5])

    def test_fill_with_a_tensor_value(self):
        # fill.Tensor: the value a one-element tensor (a lifted constant, or
        # one the graph computes), in the filled tensor's dtype.
        def function(x, y):
            a = torch.ops.aten.fill.Tensor(x, torch.tensor(2.5))
            b = torch.ops.aten.fill.Tensor(x.to(torch.int32), y.sum())
            c = torch.ops.aten.fill.Tensor(x > 0, y[0] > 100)
            return a * x, b, c

        self.check(function, [torch.randn(3, 4), torch.randn(5)])

    def test_empty_strided_copied_into(self):
        # PyTorch 2.x's decompositions make row-major empty_strided tensors
        # to copy into (timm GhostNet's training graph).
        def function(x):
            a = x.new_empty_strided((3, 4), (4, 1))
            a.copy_(x * 2)
            b = torch.empty_strided((3, 4), (4, 1))
            b.copy_(x + 1)
            return a + b

        self.check(function, [torch.randn(3, 4)])

    def test_writes_that_others_would_see_stay_in_torch(self):
        def into_input(x):
            x.add_(1)
            return x * 2

        self.check(into_input, [torch.randn(3)], unsupported=["aten.add_"])

        def through_a_view(x):
            h = x * 2
            row = h[0]
            row.mul_(10)  # writes into h
            return h + 1

        # The whole alias family runs in PyTorch, so h + 1 sees the write.
        self.check(through_a_view, [torch.randn(3, 4)],
                   unsupported=["aten.mul", "aten.select", "aten.mul_"])


class ConvolutionTest(ConverterCase):
    def test_unfold_as_im2col(self):
        # F.unfold: VOLO's outlook attention, HaloNet's blocks.
        def function(x):
            return (F.unfold(x, kernel_size=3, padding=1),
                    F.unfold(x, kernel_size=(2, 3), dilation=(2, 1), stride=(1, 2)),
                    F.unfold(x, kernel_size=2, stride=2))

        self.check(function, [torch.randn(2, 3, 6, 5)])

    def test_one_dimensional_convolutions(self):
        # Note [1-d convolutions as 2-d ones] (aten_conv_ops.py): Whisper's
        # front end (stride 2, padding 1), wav2vec2's (stride 5, no bias),
        # Mamba's causal depthwise conv (groups = channels, padding K - 1),
        # dilated. They made the compile fail before (the 2-d converter
        # unpacked one output size as two), then ran in PyTorch.
        def function(x, w, b, wide, depthwise):
            return (torch.tanh(F.conv1d(x, w, b, stride=2, padding=1)) * 2,
                    F.conv1d(x, wide, stride=5),
                    F.conv1d(x, depthwise, padding=3, groups=3)[..., :16],
                    F.conv1d(x, w, b, dilation=2, padding=2))

        x = torch.randn(2, 3, 16)
        args = [x, torch.randn(5, 3, 3), torch.randn(5), torch.randn(4, 3, 10),
                torch.randn(3, 1, 4)]
        plan = self.check(function, args)
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

        def gradients(g, x, w):  # the 1-d convolution's backward, as 2-d too
            aten = torch.ops.aten
            return (aten.convolution_backward(g, x, w, [5], [2], [1], [1], False, [0], 1,
                                              [True, True, True]) +
                    aten.convolution_backward(g[:, :3], x, w[:3, :1], [3], [2], [1], [1], False,
                                              [0], 3, [True, True, False])[:2])

        grad = torch.randn(2, 5, 8)
        plan = self.check(gradients, [grad, x, args[1]])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

        def volume(v, k):  # 3-d ones: Conv3dTest (importer_math_ops_test.py)
            return F.conv3d(v, k) * 2

        self.check(volume, [torch.randn(1, 2, 4, 4, 4), torch.randn(3, 2, 2, 2, 2)])

    def test_convolution_variants_match_torch(self):
        cases = [
            dict(stride=1, padding=1, dilation=1, groups=1, kernel=3, bias=True),
            dict(stride=2, padding=3, dilation=1, groups=1, kernel=7, bias=False),
            dict(stride=2, padding=0, dilation=1, groups=1, kernel=1, bias=False),
            dict(stride=1, padding=0, dilation=1, groups=1, kernel=1, bias=True),
            dict(stride=1, padding=2, dilation=2, groups=2, kernel=3, bias=True),
            dict(stride=(2, 1), padding=(1, 0), dilation=1, groups=4, kernel=(3, 2), bias=False),
            dict(stride=3, padding=0, dilation=1, groups=1, kernel=3, bias=True),  # patchify
            dict(stride=4, padding=0, dilation=1, groups=1, kernel=4, bias=True),  # remainder
        ]
        x = torch.randn(2, 4, 9, 11)
        for case in cases:
            kernel = case["kernel"]
            kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
            weight = torch.randn(8, 4 // case["groups"], kh, kw) * 0.3
            bias = torch.randn(8) if case["bias"] else None

            def function(t, w):
                return F.conv2d(t, w, bias, case["stride"], case["padding"], case["dilation"],
                                case["groups"])

            with self.subTest(**{k: str(v) for k, v in case.items()}):
                self.check(function, [x, weight], atol=1e-4)
        self.check(lambda t, w: F.conv2d(t, w, padding=1), [x.bfloat16(), weight[:, :1].repeat(
            1, 4, 1, 1).bfloat16()], rtol=2e-2, atol=5e-2)

    def test_batch_norm_in_inference_and_pooling(self):
        mean, var = torch.randn(4), torch.rand(4) + 0.5
        weight, bias = torch.randn(4), torch.randn(4)

        def function(x):
            y = F.batch_norm(x, mean, var, weight, bias, False, 0.1, 1e-5)
            return (y, F.max_pool2d(y, 3, 2, 1), F.max_pool2d(y, 2, ceil_mode=True),
                    F.max_pool2d(y, 3, 1, 1, dilation=2),
                    F.avg_pool2d(y, 3, 2, 1), F.avg_pool2d(y, 3, 2, 1, count_include_pad=False),
                    F.avg_pool2d(y, 2, ceil_mode=True), F.adaptive_avg_pool2d(y, 1),
                    F.adaptive_avg_pool2d(y, (3, 4)), F.batch_norm(x, mean, var, eps=1e-3))

        self.check(function, [torch.randn(2, 4, 9, 10)])

    def test_an_unread_element_of_an_unsupported_dtype_does_not_split(self):
        # cudnn_batch_norm's fourth result, its reserve space, is uint8 (CUDA only;
        # a stand-in op here).
        def with_reserve(x):
            return x * 2, torch.zeros(3, dtype=torch.uint8)

        def convert(c, a):
            return (c.emit("mul", [c.tensor(c.node.args[0]), c.scalar(2.0, torch.float32)]),
                    None)

        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        pair = graph.call_function(with_reserve, (x,))
        graph.call_function(operator.getitem, (pair, 1))  # read by nobody
        graph.output(graph.call_function(operator.getitem, (pair, 0)))
        module = torch.fx.GraphModule(torch.nn.Module(), graph)
        CONVERTERS["with_reserve"] = convert
        try:
            plan = importer.import_graph(module, [torch.randn(4)])
        finally:
            del CONVERTERS["with_reserve"]
        self.assertEqual(plan.unsupported, [])

    def test_max_pool_indices_match_torch(self):
        def function(x):
            values, indices = F.max_pool2d(x, 3, 2, 1, return_indices=True)
            dilated, where = F.max_pool2d(x, 2, 1, 1, dilation=2, return_indices=True)
            return values * 2, indices, dilated, where

        x = torch.randn(2, 3, 7, 8)
        x[0, 0, :3, :3] = 5.0  # ties: PyTorch's index is the first in the window
        self.check(function, [x])

    def test_pooling_windows_wider_than_the_image(self):
        # Note [Pooling windows wider than the image]: HF EfficientNet's last
        # pooling, a 1280x1280 window over a 2x2 map; gathering every tap made a
        # [1, 1, 1638400, 2560] table past grove's 2^31 elements.
        def function(x):
            return (F.avg_pool2d(x, 1280, ceil_mode=True),
                    F.avg_pool2d(x, (5, 1280), stride=(1, 1280), padding=(2, 0), ceil_mode=True),
                    F.max_pool2d(x, 1280, ceil_mode=True),
                    F.max_pool2d(x, 5, stride=1, padding=2, return_indices=True)[1])

        self.check(function, [torch.randn(1, 2560, 2, 3)])

class AttentionTest(ConverterCase):
    """Note [Fused attention in the importer]: with GROVE_FUSED_ATTENTION=1,
    scaled_dot_product_attention becomes one `attention` node (this PyTorch's
    aten._scaled_dot_product_attention; PyTorch 2's variants share the
    converter); by default (auto) where the sequence attention kernel takes
    its sizes; with 0 it is written out."""

    def setUp(self):
        super().setUp()
        self._fusion = os.environ.get("GROVE_FUSED_ATTENTION")
        os.environ["GROVE_FUSED_ATTENTION"] = "1"

    def tearDown(self):
        if self._fusion is None:
            os.environ.pop("GROVE_FUSED_ATTENTION", None)
        else:
            os.environ["GROVE_FUSED_ATTENTION"] = self._fusion
        super().tearDown()

    def test_attention_is_one_node_by_default_where_the_sequence_kernel_takes_it(self):
        del os.environ["GROVE_FUSED_ATTENTION"]
        sdpa = self.sdpa
        plan = self.check(lambda q, k, v: sdpa(q, k, v, causal=True),
                          [torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)])
        self.assertIn("attention", self.ops(plan))
        self.assertNotIn("softmax", self.ops(plan))
        # 200 keys of 64 features: past the sequence kernel's shared memory,
        # written out by default, one node with GROVE_FUSED_ATTENTION=1.
        from grove import aten_ops

        self.assertFalse(aten_ops._sequence_kernel_fits(200, 64, 64))
        self.assertTrue(aten_ops._sequence_kernel_fits(48, 64, 64))
        long_inputs = [torch.randn(1, 1, 3, 64), torch.randn(1, 1, 200, 64),
                       torch.randn(1, 1, 200, 64)]
        plan = self.check(lambda q, k, v: sdpa(q, k, v), long_inputs)
        self.assertNotIn("attention", self.ops(plan))
        os.environ["GROVE_FUSED_ATTENTION"] = "1"
        plan = self.check(lambda q, k, v: sdpa(q, k, v), long_inputs)
        self.assertIn("attention", self.ops(plan))

    @staticmethod
    def sdpa(q, k, v, mask=None, causal=False):
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return torch.ops.aten._scaled_dot_product_attention(q, k, v, mask, 0.0, False,
                                                             causal)[0]

    def ops(self, plan):
        return [node["op"] for program in plan.programs() for node in program["nodes"]]

    def test_causal_bool_and_additive_masks_are_one_attention_node_each(self):
        sdpa = self.sdpa

        def function(x, padding, keep):
            # Heads cut from one projection-like tensor: strided views.
            q, k, v = (x[..., i * 32:(i + 1) * 32].reshape(2, 6, 2, 16).transpose(1, 2)
                       for i in range(3))
            return (sdpa(q, k, v, causal=True), sdpa(q, k, v, mask=padding),
                    sdpa(q, k, v, mask=keep), sdpa(q * 2, k, v, mask=keep, causal=False))

        padding = torch.zeros(2, 1, 1, 6)
        padding[1, ..., 4:] = torch.finfo(torch.float32).min
        keep = torch.rand(2, 2, 6, 6) > 0.3
        keep[..., 0] = True  # (a row attending to nothing is NaN in PyTorch 1.13, 0 from 2.5)
        plan = self.check(function, [torch.randn(2, 6, 96), padding, keep])
        ops = self.ops(plan)
        self.assertEqual(ops.count("attention"), 4, ops)
        self.assertNotIn("softmax", ops)

    def test_written_out_when_fusion_is_off_with_equal_results(self):
        sdpa = self.sdpa
        if hasattr(F, "scaled_dot_product_attention") and kept_attention.registered():
            # PyTorch 2's make_fx writes out an attention whose value heads
            # are wider than its query's (no fused CPU kernel takes it); the
            # door keeps it whole as grove's op (Note [Attention kept whole
            # through tracing]), and so does this test.
            def sdpa(q, k, v, causal=False):
                return kept_attention.kept_attention(q, k, v, is_causal=causal)

        def function(q, k, v):
            return sdpa(q, k, v, causal=True)

        inputs = [torch.randn(1, 3, 5, 8), torch.randn(1, 3, 5, 8), torch.randn(1, 3, 5, 12)]
        fused = self.check(function, inputs)
        os.environ["GROVE_FUSED_ATTENTION"] = "0"
        written = self.check(function, inputs)
        self.assertIn("attention", self.ops(fused))
        self.assertNotIn("attention", self.ops(written))
        self.assertIn("softmax", self.ops(written))

    def test_long_keys_are_written_out(self):
        sdpa = self.sdpa

        def function(q, k, v):
            return sdpa(q, k, v)

        from grove import aten_ops

        keys = aten_ops.MAX_FUSED_KEYS + 1
        plan = self.check(function, [torch.randn(1, 1, 2, 4), torch.randn(1, 1, keys, 4),
                                     torch.randn(1, 1, keys, 4)])
        self.assertNotIn("attention", self.ops(plan))

    def test_kept_attention_is_one_node_imported_as_attention(self):
        # Note [Attention kept whole through tracing]: the op traces as one
        # node whatever kernel PyTorch would pick, and imports as `attention`.
        from grove import kept_attention

        self.assertTrue(kept_attention.registered())

        def function(q, k, v, padding):
            return (kept_attention.kept_attention(q, k, v, padding) * 2,
                    kept_attention.kept_attention(q, k, v, is_causal=True))

        padding = torch.zeros(2, 1, 1, 7)
        padding[0, ..., 5:] = -1e9
        plan = self.check(function, [torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8),
                                     torch.randn(2, 3, 7, 8), padding])
        self.assertEqual(self.ops(plan).count("attention"), 2, self.ops(plan))

    def test_keep_attention_points_dropout_free_calls_at_the_kept_op(self):
        from grove import kept_attention, training_steps

        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
            return q

        fx_graph = torch.fx.Graph()
        q = fx_graph.placeholder("q")
        kept = fx_graph.call_function(sdpa, (q, q, q, None, 0.0, True))
        dropped = fx_graph.call_function(sdpa, (q, q, q), {"dropout_p": 0.1})
        fx_graph.output(fx_graph.call_function(operator.add, (kept, dropped)))
        graph = torch.fx.GraphModule(torch.nn.Module(), fx_graph)
        saved = training_steps._attention_targets
        training_steps._attention_targets = lambda: {sdpa}
        try:
            self.assertEqual(kept_attention.keep_attention(graph), 1)
        finally:
            training_steps._attention_targets = saved
        targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
        self.assertEqual(targets.count(kept_attention.kept_attention), 1)
        self.assertEqual(targets.count(sdpa), 1)  # the call with dropout stays

    def test_a_bad_switch_value_is_a_clear_error(self):
        from grove import aten_ops

        os.environ["GROVE_FUSED_ATTENTION"] = "yes"
        try:
            with self.assertRaisesRegex(ValueError, "GROVE_FUSED_ATTENTION"):
                aten_ops._fused_attention_mode()
        finally:
            del os.environ["GROVE_FUSED_ATTENTION"]


if __name__ == "__main__":
    junit_main.main()
