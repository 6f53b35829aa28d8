"""The importer's converters of session 28's ops, on sim against torch (f32):
col2im (F.fold), grid_sampler_2d (F.grid_sample) and its backward, sort and
argsort, and antialiased bilinear and bicubic resampling with their
backwards. Each graph imports whole unless the test names the op left to
PyTorch and why; forward-and-backward graphs come from make_fx of
torch.autograd.grad (training_test._autograd_graph), as AOTAutograd traces
them."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from grove import importer  # noqa: E402
from importer_ops_test import ConverterCase  # noqa: E402
from training_test import check_forward_and_backward  # noqa: E402
import junit_main  # noqa: E402


class SamplingCase(ConverterCase):
    def check_gradients(self, function, *inputs, expected_ops=(), atol=1e-4):
        """function's value and its gradients for every float input, through
        one imported forward-and-backward graph, against torch."""
        return check_forward_and_backward(self, function, *inputs, expected_ops=expected_ops,
                                          atol=atol)


class FoldTest(SamplingCase):
    def test_fold_sums_overlapping_windows_like_torch(self):
        cases = [
            dict(output_size=(6, 5), kernel_size=3, padding=1),
            dict(output_size=(7, 6), kernel_size=(2, 3), dilation=(2, 1), stride=(1, 2)),
            dict(output_size=(8, 8), kernel_size=2, stride=2),  # patches that tile
            dict(output_size=(7, 7), kernel_size=2, stride=3),  # pixels no window reads
            dict(output_size=(5, 6), kernel_size=(3, 2), stride=(2, 1), padding=(2, 1)),
        ]
        for case in cases:
            def windows(size):
                out = []
                for axis in range(2):
                    k, s, p, d = (torch.nn.modules.utils._pair(case.get(name, default))[axis]
                                  for name, default in (("kernel_size", 1), ("stride", 1),
                                                        ("padding", 0), ("dilation", 1)))
                    out.append((case["output_size"][axis] + 2 * p - d * (k - 1) - 1) // s + 1)
                return out[0] * out[1]

            kernel = torch.nn.modules.utils._pair(case["kernel_size"])
            rows = 3 * kernel[0] * kernel[1]
            with self.subTest(**{k: str(v) for k, v in case.items()}):
                columns = torch.randn(2, rows, windows(case))
                plan = self.check(lambda t: F.fold(t, **case) * 2, [columns])
                self.assertEqual([kind for kind, _ in plan.steps], ["grove"])
                self.check(lambda t: F.fold(t, **case), [columns[0]])  # unbatched

    def test_fold_and_unfold_gradients_match_torch(self):
        def function(columns, x):
            folded = F.fold(columns, (6, 5), 3, padding=1, stride=(1, 2))
            return (folded * folded).sum() + (F.unfold(x, 3, padding=1) ** 2).sum()

        self.check_gradients(function, torch.randn(2, 27, 18), torch.randn(2, 3, 6, 5),
                             expected_ops=["aten.col2im", "aten.im2col"])


def _grid(n, out_h, out_w, spread=1.2):
    """A grid reaching a little past the image (padding modes matter), with
    some samples exactly on pixel centres and on the border."""
    grid = (torch.rand(n, out_h, out_w, 2) * 2 - 1) * spread
    grid[0, 0, 0] = torch.tensor([-1.0, 1.0])
    grid[0, 0, 1] = torch.tensor([1.0, -1.0])
    grid[-1, -1, -1] = torch.tensor([0.0, 0.0])
    return grid


class GridSampleTest(SamplingCase):
    OPTIONS = [(mode, padding, align) for mode in ("bilinear", "nearest")
               for padding in ("zeros", "border", "reflection") for align in (False, True)]

    def test_grid_sample_matches_torch_for_every_supported_option(self):
        # (image, grid, how far past the image the grid reaches: 3.5 reflects
        # several times)
        shapes = [((2, 3, 6, 5), (2, 4, 7), 1.2), ((1, 2, 1, 4), (1, 3, 3), 1.2),
                  ((3, 1, 5, 5), (3, 5, 5), 1.2), ((1, 2, 3, 4), (1, 6, 6), 3.5)]
        for (image, (n, out_h, out_w), spread) in shapes:
            x, grid = torch.randn(image), _grid(n, out_h, out_w, spread)
            for mode, padding, align in self.OPTIONS:
                def function(x, grid):
                    return F.grid_sample(x, grid, mode=mode, padding_mode=padding,
                                         align_corners=align)

                with self.subTest(image=image, mode=mode, padding=padding, align=align):
                    plan = self.check(function, [x, grid])
                    self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

    def test_an_affine_grid_warp_matches_torch(self):
        # A spatial transformer: affine_grid's grid, sampled bilinearly.
        def function(x, theta):
            grid = F.affine_grid(theta, [2, 3, 8, 6], align_corners=False)
            return F.grid_sample(x, grid, align_corners=False) * 2

        theta = torch.tensor([[[0.9, 0.2, 0.1], [-0.1, 1.1, -0.2]],
                              [[1.2, 0.0, 0.3], [0.3, 0.8, 0.0]]])
        self.check(function, [torch.randn(2, 3, 8, 6), theta])

        def gradients(x, theta):
            grid = F.affine_grid(theta, [2, 3, 5, 4], align_corners=True)
            y = F.grid_sample(x, grid, padding_mode="border", align_corners=True)
            return (y * y).sum() + (grid * grid).sum()

        self.check_gradients(gradients, torch.randn(2, 3, 8, 6), theta,
                             expected_ops=["aten.affine_grid_generator",
                                           "aten.grid_sampler_2d_backward"])
        for align in (False, True):  # one step: the axis is 0
            self.check(lambda t: F.affine_grid(t, [2, 1, 1, 3], align_corners=align), [theta])

    def test_grid_sample_gradients_match_torch(self):
        x = torch.randn(2, 3, 5, 6)
        # Away from pixel edges: the bilinear weights' derivative jumps there.
        grid = _grid(2, 4, 3, spread=1.3)
        grid = grid + (torch.frac((grid + 1) * 10) - 0.5).abs().lt(0.05) * 0.02
        for mode, padding, align in self.OPTIONS:
            def function(x, grid):
                y = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
                return (y * y).sum()

            with self.subTest(mode=mode, padding=padding, align=align):
                self.check_gradients(function, x, grid,
                                     expected_ops=["aten.grid_sampler_2d_backward"])

    def test_cudnn_sampler_is_the_aligned_bilinear_zero_padded_one(self):
        # On CUDA F.grid_sample(align_corners=True) with the default mode
        # and padding traces to cudnn_grid_sampler (and its backward); here
        # CPU stand-ins, PyTorch's own grid_sampler_2d with those options,
        # let make_fx trace them.
        library = torch.library.Library("aten", "IMPL", "CPU")
        library.impl("cudnn_grid_sampler",
                     lambda x, g: torch.ops.aten.grid_sampler_2d(x, g, 0, 0, True))
        library.impl("cudnn_grid_sampler_backward",
                     lambda x, g, grad: torch.ops.aten.grid_sampler_2d_backward(
                         grad, x, g, 0, 0, True, [True, True]))
        self.addCleanup(lambda: library)  # alive until the test ends

        def function(x, grid):
            y = torch.ops.aten.cudnn_grid_sampler(x, grid)
            return (y * y).sum()

        x, grid = torch.randn(2, 3, 5, 6), _grid(2, 4, 3)
        self.check(lambda x, g: torch.ops.aten.cudnn_grid_sampler(x, g), [x, grid])
        self.check_gradients(function, x, grid,
                             expected_ops=["aten.cudnn_grid_sampler_backward"])

    def test_bicubic_other_dtypes_and_large_gradients_stay_in_pytorch_named(self):
        x, grid = torch.randn(1, 2, 4, 4), _grid(1, 3, 3)
        plan = self.check(lambda x, g: F.grid_sample(x, g, mode="bicubic", align_corners=False),
                          [x, grid], unsupported=["aten.grid_sampler_2d"])
        self.assertIn("mode 'bicubic'", plan.unsupported[0][2])
        plan = self.check(lambda x, g: F.grid_sample(x, g, align_corners=True),
                          [x.double(), grid.double()], unsupported=["aten.grid_sampler_2d"])
        self.assertIn("torch.float64", plan.unsupported[0][2])

        aten = torch.ops.aten
        big_x, big_grid = torch.randn(1, 1, 64, 64), _grid(1, 130, 128)

        def backward(g, x, grid):
            return aten.grid_sampler_2d_backward(g, x, grid, 0, 0, False, [True, True])

        def grid_only(g, x, grid):  # no input gradient: no matches, converted
            return aten.grid_sampler_2d_backward(g, x, grid, 0, 0, False, [False, True])[1]

        g = torch.randn(1, 1, 130, 128)
        plan = self.check(backward, [g, big_x, big_grid],
                          unsupported=["aten.grid_sampler_2d_backward", "getitem", "getitem"])
        self.assertIn("matches, beyond grove's", plan.unsupported[0][2])
        self.check(grid_only, [g, big_x, big_grid])


class SortTest(SamplingCase):
    def test_sort_matches_torch_along_every_dim_both_ways(self):
        x = torch.randn(3, 7, 5)
        for dim in (0, 1, -1):
            for descending in (False, True):
                def function(x):
                    values, indices = torch.sort(x, dim=dim, descending=descending)
                    return values * 2, indices

                with self.subTest(dim=dim, descending=descending):
                    plan = self.check(function, [x])
                    self.assertEqual([kind for kind, _ in plan.steps], ["grove"])
        # Rows of one element: the input itself, indices zero.
        self.check(lambda t: torch.sort(t, dim=1, descending=True), [torch.randn(3, 1)])

    def test_ties_keep_their_order_and_nan_goes_last(self):
        # Stable (stable=True promises it; PyTorch's CPU sort gives it
        # anyway); NaN is larger than every number; -0.0 ties with 0.0.
        x = torch.tensor([[2.0, 1.0, 2.0, float("nan"), 1.0, -0.0, 0.0, float("-inf")],
                          [float("nan"), 3.0, float("nan"), 3.0, float("inf"), 3.0, 0.0, 1.0]])
        for descending in (False, True):
            def function(x):
                values, indices = torch.sort(x, stable=True, descending=descending)
                return torch.where(values != values, 99.0, values), indices  # NaN as 99

            with self.subTest(descending=descending):
                self.check(function, [x])
        integers = torch.randint(0, 4, (4, 9))
        self.check(lambda t: torch.sort(t, dim=1, stable=True, descending=True), [integers])
        self.check(lambda t: torch.sort(t, dim=0, stable=True), [integers])

    def test_argsort_random_masking_matches_torch(self):
        # ViTMAE's random masking: argsort of noise, its inverse, the kept ids.
        def function(tokens, noise):
            shuffle = torch.argsort(noise, dim=1)
            restore = torch.argsort(shuffle, dim=1)
            keep = shuffle[:, :12]
            kept = torch.gather(tokens, 1, keep.unsqueeze(-1).repeat(1, 1, tokens.shape[-1]))
            return kept, restore

        self.check(function, [torch.randn(3, 49, 8), torch.rand(3, 49)])

        # aten.argsort itself (PyTorch 2.x's graphs may keep it).
        graph = torch.fx.symbolic_trace(lambda x: torch.ops.aten.argsort.default(x, 0, True))
        x = torch.randn(6, 4)
        plan = importer.import_graph(graph, [x])
        self.assertEqual(plan.unsupported, [])
        actual = plan.compile(backend="eager")(x)
        self.assertTrue(torch.equal(actual[0] if isinstance(actual, (list, tuple)) else actual,
                                    torch.argsort(x, 0, True)))

    def test_sort_gradient_matches_torch(self):
        def function(x):
            values, _ = torch.sort(x, dim=1, descending=True)
            return (values[:, :3] * torch.arange(3.0)).sum()

        self.check_gradients(function, torch.randn(4, 10), expected_ops=["aten.sort"])

    def test_long_rows_and_bools_stay_in_pytorch_named(self):
        plan = self.check(lambda x: torch.sort(x)[0] * 2, [torch.randn(2, 4096)],
                          unsupported=["aten.sort", "getitem"])
        self.assertIn("rows of up to 2048", plan.unsupported[0][2])
        plan = self.check(lambda x: torch.sort(x, dim=0)[0] * 2, [torch.randn(2048, 64)],
                          unsupported=["aten.sort", "getitem"])
        self.assertIn("64 rows of 2048", plan.unsupported[0][2])


class ResampleTest(SamplingCase):
    def test_antialiased_resampling_matches_torch(self):
        # timm resizing a ViT's 14x14 position embeddings, torchvision's
        # Resize: down and up, by size and by scale factor, both corners.
        cases = [((1, 8, 14, 14), dict(size=(7, 9))), ((2, 3, 14, 14), dict(size=(16, 16))),
                 ((2, 3, 11, 6), dict(size=(4, 13))), ((1, 2, 9, 10), dict(scale_factor=0.3)),
                 ((1, 2, 8, 8), dict(scale_factor=(0.5, 1.5))),
                 ((1, 2, 8, 8), dict(size=(8, 3)))]  # one axis unchanged
        for shape, size in cases:
            x = torch.randn(shape)
            for mode in ("bicubic", "bilinear"):
                for align in (False, True):
                    def function(x):
                        return F.interpolate(x, mode=mode, align_corners=align, antialias=True,
                                             **size) * 2

                    with self.subTest(shape=shape, size=str(size), mode=mode, align=align):
                        plan = self.check(function, [x])
                        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])

    def test_weights_that_do_not_reproduce_the_kernel_leave_it_to_pytorch(self):
        # On the GPU host's PyTorch 2.11 the impulse images once gave weights
        # 1.6 away from the kernel's own results (a wrong answer on sim, cpu
        # and cuda alike); every set of weights is now checked against the
        # kernel on a probe image. A kernel the weights cannot reproduce
        # stands in for that build here.
        from grove import aten_resample_ops

        mode = "antialiased bilinear"
        honest = aten_resample_ops.KERNELS[mode]

        def shifted(x, size, align, *scales):  # not separable: adds a constant after
            return honest(x, size, align, *scales) + 0.25

        def function(x):
            return F.interpolate(x, size=(7, 9), mode="bilinear", antialias=True) * 2

        x = torch.randn(1, 8, 14, 14)
        aten_resample_ops.KERNELS[mode] = shifted
        try:
            self.check(function, [x], unsupported=["aten._upsample_bilinear2d_aa"])
        finally:
            aten_resample_ops.KERNELS[mode] = honest

    def test_antialiased_resampling_gradients_match_torch(self):
        for mode in ("bicubic", "bilinear"):
            def function(x):
                y = F.interpolate(x, size=(5, 9), mode=mode, antialias=True, align_corners=False)
                return (y * y).sum()

            with self.subTest(mode=mode):
                self.check_gradients(function, torch.randn(2, 3, 12, 7),
                                     expected_ops=["aten._upsample_%s2d_aa_backward" % mode])

    def test_plain_upsampling_gradients_match_torch(self):
        # Segmentation heads upsample bilinearly in training: the backward
        # ran in PyTorch before (a split backward).
        sizes = [dict(scale_factor=2), dict(size=(7, 5)), dict(scale_factor=1.7),
                 dict(scale_factor=(0.5, 3))]
        for mode in ("bilinear", "bicubic"):
            for align in (False, True):
                for size in sizes:
                    def function(x):
                        y = F.interpolate(x, mode=mode, align_corners=align, **size)
                        return (y * y).sum()

                    with self.subTest(mode=mode, align=align, size=str(size)):
                        self.check_gradients(function, torch.randn(2, 3, 6, 8),
                                             expected_ops=["aten.upsample_%s2d_backward" % mode])


if __name__ == "__main__":
    junit_main.main()
