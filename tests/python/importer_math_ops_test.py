"""The importer's converters found missing by the wide survey (benchmarks/
zoo_survey_wide.py), one family at a time on sim against torch: erf, the
hyperbolic functions and their inverses, asin/acos, log2/log10/exp2, the
fused multiply-adds addcmul/addcdiv/lerp, float math of integer tensors,
argmax/max of integers and bools (CLIP's pooling takes the argmax of int32
ids), Tensor.unfold with its backward (HaloNet), glu's backward, the edge
paddings' backwards, sums of bools and integers, tril/triu, any/all, and
writes through a boolean mask of one value. Each graph imports whole
and "cudagraphs" equals "eager" bitwise (ConverterCase.check)."""
import os
import sys

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from grove import importer  # noqa: E402
from importer_ops_test import BF16, ConverterCase  # noqa: E402
import junit_main  # noqa: E402


class MathOpsTest(ConverterCase):
    def test_hyperbolic_and_inverse_functions_match_torch(self):
        def function(x, unit, above_one):
            return (torch.erf(x), torch.sinh(x), torch.cosh(x), torch.asinh(x),
                    torch.atanh(unit), torch.asin(unit), torch.acos(unit),
                    torch.acosh(above_one), torch.log2(above_one), torch.log10(above_one),
                    torch.exp2(x))

        x = torch.cat([torch.rand(40) * 8 - 4, torch.tensor([0.0, 1e-6, -1e-5, 3e-4])])
        unit = torch.cat([torch.rand(40) * 2 - 1, torch.tensor([1.0, -1.0, 0.0, 1e-6])])
        above_one = torch.cat([1 + torch.rand(40) * 10, torch.tensor([1.0, 1 + 1e-6, 3e7,
                                                                     1e12])])
        plan = self.check(function, [x, unit, above_one])
        ops = {node["op"] for node in plan.programs()[0]["nodes"]}
        self.assertIn("erf", ops)
        # Near 0 the cancelling forms would lose every digit: relative accuracy.
        tiny = torch.tensor([1e-6, -2e-7, 5e-5])
        self.check(lambda t: (torch.sinh(t), torch.asinh(t), torch.atanh(t), torch.asin(t)),
                   [tiny], rtol=1e-5, atol=0)
        huge = torch.tensor([1e10, -3e20, 1e30])
        self.check(lambda t: (torch.asinh(t), torch.acosh(t.abs())), [huge], rtol=1e-6, atol=0)
        self.check(function, [x.bfloat16(), unit.bfloat16(), above_one.bfloat16()], **BF16)

    def test_fused_multiply_adds(self):
        def function(a, b, d, w):
            return (torch.addcmul(a, b, d), torch.addcmul(a, b, d, value=-0.5),
                    torch.addcdiv(a, b, d.abs() + 1, value=2), torch.lerp(a, b, w),
                    torch.lerp(a, b, 0.75), torch.lerp(a, b, 1.0))

        a, b, d = torch.randn(5, 6), torch.randn(5, 6), torch.randn(6)
        w = torch.rand(5, 6) * 2 - 0.5
        outputs = self.check(function, [a, b, d, w])
        self.assertIsNotNone(outputs)
        # lerp with weight 1 gives `end` exactly, as PyTorch's does.
        plan = importer.import_graph(make_fx(lambda s, e: torch.lerp(s, e, 1.0))(a, b), [a, b])
        self.assertTrue(torch.equal(plan.compile(backend="eager")(a, b), b))

    def test_float_math_of_integer_tensors(self):
        def function(n):
            return torch.sqrt(n), torch.exp(n / 10), torch.erf(n), torch.log2(n + 1), torch.rsqrt(
                n + 1)

        self.check(function, [torch.randint(0, 50, (4, 5))])

    def test_argmax_and_max_of_integers_and_bools(self):
        def function(ids, wide, flags):
            values, positions = wide.min(dim=1)
            return (ids.to(torch.int).argmax(dim=-1), wide.argmin(dim=0), wide.argmax(),
                    values, positions, wide.max(), ids.min(), flags.max(dim=1).indices,
                    flags.max(dim=0).values, flags.min(), wide.amax(dim=1), wide.amax(),
                    wide.amax(dim=(0, 1), keepdim=True), ids.to(torch.int).amax(0) + 1)

        ids = torch.randint(3, 1000, (3, 16))
        ids[:, 5] = 1000  # ties: the first position, as PyTorch
        ids[1, 9] = 1000
        wide = torch.randint(-2 ** 62, 2 ** 62, (4, 7))
        wide[2, 3] = torch.iinfo(torch.int64).min
        wide[0, 1] = torch.iinfo(torch.int64).max
        flags = torch.rand(3, 8) > 0.6
        flags[0] = False
        self.check(function, [ids, wide, flags], rtol=0, atol=0)  # exactly

    def test_tensor_unfold_and_its_backward(self):
        def function(x):
            return x.unfold(2, 4, 2), x.unfold(-1, 3, 3), x.unfold(0, 2, 1), x.unfold(3, 1, 5)

        self.check(function, [torch.randn(2, 3, 9, 7)])

        def backward(g, overlapping):  # what autograd's unfold backward calls
            return (torch.ops.aten.unfold_backward(g, [3, 11, 2], 1, 4, 3),
                    torch.ops.aten.unfold_backward(overlapping, [9, 5], 0, 4, 2))

        self.check(backward, [torch.randn(3, 3, 2, 4), torch.randn(3, 5, 4)])

    def test_glu_backward(self):
        # Wav2Vec2-Conformer's convolution module trains through glu.
        def function(g_last, g_channels, x):
            return (torch.ops.aten.glu_backward(g_last, x, -1),
                    torch.ops.aten.glu_backward(g_channels, x, 1))

        self.check(function, [torch.randn(2, 4, 3), torch.randn(2, 2, 6), torch.randn(2, 4, 6)])

    def test_edge_padding_backwards(self):
        # timm's ResNet-Blur and TResNet train through reflection padding.
        def function(g2, g1, x2, x1):
            return (torch.ops.aten.reflection_pad2d_backward(g2, x2, [2, 1, 1, 3]),
                    torch.ops.aten.replication_pad2d_backward(g2, x2, [2, 1, 1, 3]),
                    torch.ops.aten.reflection_pad1d_backward(g1, x1, [3, 2]))

        x2, x1 = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6)
        g2 = torch.randn(2, 3, 9, 7)
        self.check(function, [g2, torch.randn(2, 3, 11), x2, x1])
        self.check(lambda g, x: torch.ops.aten.replication_pad1d_backward(g, x, [0, 4]),
                   [torch.randn(2, 3, 10), x1])

    def test_sums_and_maxima_of_bools(self):
        # Hiera's backward sums a comparison (bool) over several dims.
        def function(x):
            flags = x > 0
            return (flags.sum(), flags.sum(dim=(1, 3)), flags.sum(dim=-1, keepdim=True),
                    flags.amax(dim=2), torch.ops.aten.sum(flags[0, 0, 0, 0]))

        self.check(function, [torch.randn(2, 3, 4, 5)])

    def test_triangles_of_values_that_depend_on_the_inputs(self):
        # Longformer's invalid-location masks, causal masks built from a
        # padding mask: tril and triu of values the inputs reach.
        def function(x, n, flags):
            return (x.tril(), x.triu(), x.tril(-1), x.triu(2), n.tril(1), flags.triu(-2),
                    (x * 2).tril()[0])

        self.check(function, [torch.randn(3, 4, 6), torch.randint(-5, 5, (5, 4)),
                              torch.rand(2, 4, 4) > 0.3])
        self.check(lambda x: (x.tril(), x.triu(1)), [torch.randn(2, 5, 5).bfloat16()], **BF16)

    def test_infinite_constants_stay_infinite(self):
        # Note [Infinite constants] (aten_ops.py): masked_fill with -inf (a
        # sliding window's invalid locations, a causal mask) gave -3.4e38.
        def function(x, mask):
            scores = x.masked_fill(mask, -float("inf"))
            return (scores, torch.softmax(scores, -1), x.masked_fill(mask, float("inf")),
                    torch.clamp(x, min=-float("inf"), max=0.5),
                    torch.nn.functional.pad(x, (1, 1), value=-float("inf")))

        x = torch.randn(4, 6)
        mask = torch.rand(4, 6) > 0.5
        mask[0] = True
        mask[0, 3] = False  # one score left: softmax puts all of the row on it
        mask[1] = False
        self.check(function, [x, mask])
        self.check(function, [x.bfloat16(), mask], **BF16)

    def test_topk_past_the_finite_values_gives_distinct_positions(self):
        # A sampler's logits with most of the vocabulary masked to -inf and
        # k larger than what is left: the taken positions leave by a mask, so
        # the -inf ones that follow are distinct (Note [Infinite constants]
        # made the masked values and the old taken-marker both -inf).
        logits = torch.randn(2, 12)
        logits[:, 3:] = -float("inf")
        graph = make_fx(lambda t: torch.topk(t, 6))(logits)
        plan = importer.import_graph(graph, [logits])
        self.assertEqual(plan.unsupported, [])
        values, indices = plan.compile(backend="eager")(logits)
        expected, _ = torch.topk(logits, 6)
        torch.testing.assert_close(values, expected)
        for row in range(2):
            self.assertEqual(len(set(indices[row].tolist())), 6, indices[row])
            self.assertEqual(sorted(indices[row, :3].tolist()), [0, 1, 2])
            torch.testing.assert_close(logits[row, indices[row]], values[row])

    def test_integer_sums_are_exact(self):
        # Note [Integer sums in f32-exact pieces] (aten_ops.py): token ids
        # summed over a sequence pass f32's 2^24; so do large int64 values.
        def function(ids, wide, small, flags):
            return (ids.sum(-1), ids.sum(), wide.sum(0), wide.sum(dim=(0, 1), keepdim=True),
                    small.sum(1, dtype=torch.int32), flags.sum(-1), (ids > 500).sum(),
                    small.sum(0))

        ids = torch.randint(0, 50000, (3, 700))
        wide = torch.randint(-2 ** 60, 2 ** 60, (5, 4, 3))
        wide[0, 0, 0] = -2 ** 62
        small = torch.randint(-2 ** 25, 2 ** 25, (4, 30), dtype=torch.int32)  # no int32 overflow
        flags = torch.rand(3, 700) > 0.5
        self.check(function, [ids, wide, small, flags], rtol=0, atol=0)  # exactly
        # Past what the pieces hold exactly, the sum stays in PyTorch.
        self.check(lambda t: t.sum(), [torch.randint(0, 9, (300, 300))],
                   unsupported=["aten.sum"])

    def test_any_and_all(self):
        # Longformer asks whether any token has global attention.
        def function(x, flags):
            return (flags.any(), flags.all(), flags.any(dim=1), flags.all(dim=-1, keepdim=True),
                    (x > 0).any(0), x.any(), x.all(dim=1), torch.ops.aten.any.dims(flags, [0, 2])
                    if hasattr(torch.ops.aten.any, "dims") else flags.any(2))

        x = torch.randint(0, 3, (4, 5, 3))
        flags = torch.rand(4, 5, 3) > 0.7
        flags[0] = False
        flags[1] = True
        self.check(function, [x, flags])

    def test_writes_through_a_boolean_mask_of_one_value(self):
        # x[mask] = v where v is one value (or one row) for every position
        # picked: a where; a value per position picked stays in PyTorch.
        def function(x, mask, row):
            y = x.clone()
            y[mask] = 0.5
            z = x.clone()
            z[mask] = row
            w = x.clone().index_put_((mask,), torch.tensor(2.0), accumulate=True)
            return y, z, w

        x = torch.randn(4, 5, 3)
        mask = torch.rand(4, 5) > 0.5
        self.check(function, [x, mask, torch.randn(3)])

        def per_position(x, mask, values):
            y = x.clone()
            y[mask] = values
            return y

        mask = torch.zeros(4, 5, dtype=torch.bool)
        mask[1, 2] = mask[3, 0] = True
        self.check(per_position, [x, mask, torch.randn(2, 3)], unsupported=["aten.index_put_"])


class Conv3dTest(ConverterCase):
    """Note [3-d convolutions as 2-d ones] (aten_conv3d_ops.py)."""

    def test_three_d_convolutions_match_torch(self):
        x = torch.randn(2, 4, 5, 6, 7)

        def function(x, w, b, depthwise, wide):
            return (F.conv3d(x, w, b, padding=1), F.conv3d(x, w, stride=(2, 1, 2)),
                    F.conv3d(x, depthwise, groups=4, padding=(2, 1, 0), dilation=(2, 1, 1)),
                    F.conv3d(x, wide, padding=(0, 1, 1)))

        self.check(function, [x, torch.randn(3, 4, 3, 3, 3), torch.randn(3),
                              torch.randn(4, 1, 3, 3, 2), torch.randn(5, 4, 1, 3, 3)], atol=1e-4)

    def test_three_d_convolution_gradients_match_torch(self):
        from training_test import check_forward_and_backward

        def function(x, w, b):
            return (F.conv3d(x, w, b, stride=(2, 1, 1), padding=(1, 0, 1)) ** 2).sum()

        check_forward_and_backward(self, function, torch.randn(2, 3, 5, 4, 5),
                                   torch.randn(4, 3, 3, 2, 3), torch.randn(4),
                                   expected_ops=["aten.convolution_backward"], atol=1e-3)

        def depthwise(x, w):  # R(2+1)D's and S3D's separable blocks
            return (F.conv3d(x, w, groups=3, padding=(1, 1, 0), dilation=(2, 1, 1)) ** 2).sum()

        check_forward_and_backward(self, depthwise, torch.randn(2, 3, 6, 4, 4),
                                   torch.randn(6, 1, 3, 1, 2),
                                   expected_ops=["aten.convolution_backward"], atol=1e-3)

    def test_three_d_pooling_matches_torch(self):
        # S3D's max and average pooling over time and space.
        def function(x):
            return (F.max_pool3d(x, (1, 3, 3), (1, 2, 2), (0, 1, 1)),
                    F.max_pool3d(x, 3, 2, 1), F.max_pool3d(x, (2, 2, 2), ceil_mode=True),
                    F.avg_pool3d(x, (2, 3, 3), 1), F.avg_pool3d(x, 3, 2, 1),
                    F.avg_pool3d(x, 3, 2, 1, count_include_pad=False),
                    F.avg_pool3d(x, 2, ceil_mode=True), F.avg_pool3d(x, 2, divisor_override=3))

        self.check(function, [torch.randn(2, 3, 5, 7, 6)])

    def test_max_pool3d_indices_match_torch(self):
        # Note [Volumes as tall images]: the indices are flat into D*H*W, the
        # first maximum in (depth, height, width) order where values tie.
        def function(x):
            pools = (F.max_pool3d(x, 2, return_indices=True),
                     F.max_pool3d(x, 3, 2, 1, return_indices=True),
                     F.max_pool3d(x, (2, 3, 2), (1, 2, 2), (1, 1, 0), dilation=(2, 1, 2),
                                  return_indices=True),
                     F.max_pool3d(x, 2, ceil_mode=True, return_indices=True),
                     F.max_pool3d(x, 3, 2, 1, ceil_mode=True, return_indices=True))
            return [value for pool in pools for value in pool]

        self.check(function, [torch.randn(2, 3, 5, 7, 6)])
        self.check(function, [torch.randint(0, 3, (2, 3, 5, 7, 6)).float()])  # ties

    def test_max_pool3d_gradients_match_torch(self):
        from training_test import check_forward_and_backward

        def function(x):
            return ((F.max_pool3d(x, 2, ceil_mode=True) ** 2).sum()
                    + (F.max_pool3d(x, 3, 2, 1) * 3).sum()
                    + (F.max_pool3d(x, (2, 3, 2), (1, 2, 2), (1, 1, 0), dilation=(2, 1, 2))
                       ** 2).sum())

        for x in (torch.randn(2, 3, 5, 7, 6), torch.randint(0, 3, (2, 3, 5, 7, 6)).float()):
            check_forward_and_backward(
                self, function, x, expected_ops=["aten.max_pool3d_with_indices_backward"])

    def test_avg_pool3d_gradients_match_torch(self):
        from training_test import check_forward_and_backward

        def function(x):
            weights = torch.arange(1.0, 5.0).view(4, 1, 1, 1, 1)
            pools = (F.avg_pool3d(x, 3, 2, 1), F.avg_pool3d(x, 3, 2, 1, count_include_pad=False),
                     F.avg_pool3d(x, (2, 3, 3), 2, ceil_mode=True),
                     F.avg_pool3d(x, 3, (1, 2, 2), (1, 0, 1), ceil_mode=True,
                                  count_include_pad=False),
                     F.avg_pool3d(x, 2, divisor_override=3))
            return sum((pool * weight).sum() for pool, weight in zip(pools, weights))

        check_forward_and_backward(self, function, torch.randn(2, 3, 5, 7, 6),
                                   expected_ops=["aten.avg_pool3d_backward"])

    def test_adaptive_avg_pool3d_matches_torch(self):
        from training_test import check_forward_and_backward

        def function(x):
            return (F.adaptive_avg_pool3d(x, 3), F.adaptive_avg_pool3d(x, (2, 4, 1)),
                    torch.ops.aten._adaptive_avg_pool3d(x, [1, 1, 1]))

        def loss(x):
            pools = function(x)
            return sum((pool ** 2).sum() * scale for pool, scale in zip(pools, (1, 2, 3)))

        x = torch.randn(2, 3, 5, 7, 6)
        self.check(function, [x])
        check_forward_and_backward(self, loss, x,
                                   expected_ops=["aten._adaptive_avg_pool3d_backward"])


class ConvTransposeTest(ConverterCase):
    """Note [Transposed convolutions as input gradients] (aten_conv_transpose_ops.py)."""

    def test_transposed_convolutions_match_torch(self):
        def function(x, w, b, grouped, x1, w1):
            return (F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
                    F.conv_transpose2d(x, w, stride=(1, 2), dilation=(2, 1)),
                    F.conv_transpose2d(x, grouped, groups=2, stride=3, padding=(0, 2)),
                    F.conv_transpose1d(x1, w1, b, stride=4, padding=2, output_padding=1))

        self.check(function, [torch.randn(2, 4, 5, 6), torch.randn(4, 3, 3, 3), torch.randn(3),
                              torch.randn(4, 2, 2, 4), torch.randn(2, 4, 9),
                              torch.randn(4, 3, 8)], atol=1e-4)

    def test_transposed_convolution_gradients_match_torch(self):
        from training_test import check_forward_and_backward

        def planar(x, w, b):
            return (F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1) ** 2).sum()

        def grouped(x, w):
            return (F.conv_transpose2d(x, w, groups=2, stride=(1, 2), dilation=(2, 1)) ** 2).sum()

        def line(x, w, b):
            return (F.conv_transpose1d(x, w, b, stride=3, padding=1) ** 2).sum()

        check_forward_and_backward(self, planar, torch.randn(2, 4, 5, 6), torch.randn(4, 3, 3, 3),
                                   torch.randn(3), expected_ops=["aten.convolution_backward"],
                                   atol=1e-3)
        check_forward_and_backward(self, grouped, torch.randn(2, 4, 5, 6),
                                   torch.randn(4, 2, 2, 3), atol=1e-3)
        check_forward_and_backward(self, line, torch.randn(2, 4, 9), torch.randn(4, 3, 5),
                                   torch.randn(3), atol=1e-3)

    def test_three_d_transposed_convolutions_match_torch(self):
        def function(x, w, b, grouped, grouped_bias):
            return (F.conv_transpose3d(x, w, b, stride=2, padding=1, output_padding=1),
                    F.conv_transpose3d(x, w, stride=(1, 2, 3), dilation=(2, 1, 1),
                                       output_padding=(0, 1, 2)),
                    F.conv_transpose3d(x, grouped, grouped_bias, groups=2, stride=(2, 1, 2),
                                       padding=(0, 1, 2), dilation=(1, 2, 1)))

        self.check(function, [torch.randn(2, 4, 3, 5, 4), torch.randn(4, 3, 3, 2, 3),
                              torch.randn(3), torch.randn(4, 3, 2, 3, 3), torch.randn(6)],
                   atol=1e-4)

    def test_three_d_transposed_convolution_gradients_match_torch(self):
        from training_test import check_forward_and_backward

        def strided(x, w, b):
            return (F.conv_transpose3d(x, w, b, stride=2, padding=1, output_padding=1)
                    ** 2).sum()

        def grouped(x, w, b):
            return (F.conv_transpose3d(x, w, b, groups=2, stride=(2, 1, 2), padding=(0, 1, 1),
                                       dilation=(1, 2, 1), output_padding=(1, 0, 0)) ** 2).sum()

        check_forward_and_backward(self, strided, torch.randn(2, 4, 3, 5, 4),
                                   torch.randn(4, 3, 3, 2, 3), torch.randn(3),
                                   expected_ops=["aten.convolution_backward"], atol=1e-3)
        check_forward_and_backward(self, grouped, torch.randn(2, 4, 3, 4, 4),
                                   torch.randn(4, 3, 2, 3, 3), torch.randn(6),
                                   expected_ops=["aten.convolution_backward"], atol=1e-3)


def _grouped_reference(x, weight, offs):
    """A grouped product written plainly: rows [start, end) of group e times weight[e]."""
    out = torch.zeros(x.shape[0], weight.shape[2])
    start = 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end] @ weight[e]
        start = end
    return out


class GroupedProductTest(ConverterCase):
    """Note [Grouped products computed densely] (aten_grouped_mm_ops.py): a
    stand-in for transformers' grouped_mm_fallback with its schema."""

    library = None

    @classmethod
    def setUpClass(cls):
        if not hasattr(torch.ops, "transformers") or not hasattr(torch.ops.transformers,
                                                                   "grouped_mm_fallback"):
            cls.library = torch.library.Library("transformers", "DEF")
            cls.library.define("grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs) "
                               "-> Tensor")
            cls.library.impl("grouped_mm_fallback", _grouped_reference,
                             "CompositeExplicitAutograd")

    def test_experts_by_router_counts(self):
        # Mixtral's dispatch: tokens sorted by expert, counted by histc.
        def function(x, weight, chosen):
            counts = torch.histc(chosen.float(), bins=4, min=0, max=3)
            offs = torch.cumsum(counts, 0).to(torch.int32)
            return torch.ops.transformers.grouped_mm_fallback(x, weight, offs), counts

        chosen = torch.sort(torch.randint(0, 4, (10,))).values
        chosen[:3] = 0
        self.check(function, [torch.randn(10, 6), torch.randn(4, 6, 5), chosen], atol=1e-4)

    def test_histc_with_a_range(self):
        def function(x):
            return torch.histc(x, bins=7, min=-1.5, max=2.0), torch.histc(x, bins=3, min=0, max=1)

        x = torch.randn(50)
        x[:3] = torch.tensor([2.0, -1.5, 1.0])  # the edges themselves
        self.check(function, [x])
        self.check(lambda t: torch.histc(t, bins=5), [x], unsupported=["aten.histc"])

    def test_an_op_that_means_another_product_stays_in_pytorch(self):
        from grove import aten_grouped_mm_ops
        from grove.aten_ops import CONVERTERS

        library = torch.library.Library("grove_test_moe", "DEF")
        library.define("grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs) -> Tensor")
        library.impl("grouped_mm_fallback",
                     lambda x, w, offs: _grouped_reference(x, w.flip(0), offs),
                     "CompositeExplicitAutograd")
        name = "grove_test_moe.grouped_mm_fallback"
        CONVERTERS[name] = aten_grouped_mm_ops._transformers_grouped_mm
        try:
            def function(x, weight, offs):
                return torch.ops.grove_test_moe.grouped_mm_fallback(x, weight, offs) * 2

            self.check(function, [torch.randn(6, 3), torch.randn(2, 3, 4),
                                  torch.tensor([2, 6], dtype=torch.int32)], unsupported=[name])
        finally:
            del CONVERTERS[name]
            aten_grouped_mm_ops._CHECKED.pop(name, None)
            del library


if __name__ == "__main__":
    junit_main.main()
