"""The importer's converters at the edges of their values, on sim against
torch: NaN in the reductions that give positions, casts to a narrow float
inside a fused kernel, values with no elements, products of dtypes grove's
GEMMs do not take, the tests for and replacements of non-finite values, and
the sign of zero where PyTorch defines it. Each graph imports whole (unless
a test names what runs in PyTorch), matches torch with NaN equal to NaN, and
"cudagraphs" equals "eager" bitwise."""
import os
import sys

import torch
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from grove import importer, value_kinds  # noqa: E402
from importer_ops_test import ConverterCase  # noqa: E402
import junit_main  # noqa: E402

NAN, INF = float("nan"), float("inf")
EDGES = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e30, -1e-30, 3.0])


def _as_list(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


class EdgeValuesCase(ConverterCase):
    def check_edges(self, function, inputs, unsupported=(), signed_zeros=True):
        """ConverterCase.check with NaN equal to NaN and, where
        `signed_zeros`, -0.0 told from 0.0."""
        def zeros_signed_alike(index, actual, wanted):
            if not (signed_zeros and actual.is_floating_point()):
                return
            zeros = wanted == 0
            self.assertTrue(torch.equal(torch.signbit(actual[zeros]), torch.signbit(wanted[zeros])),
                            "output %d: signs of zero %s, torch %s" % (
                                index, actual[zeros].tolist(), wanted[zeros].tolist()))

        return self.check(function, inputs, rtol=1e-5, atol=1e-6, unsupported=unsupported,
                          equal_nan=True, also=zeros_signed_alike)


class EdgeValuesTest(EdgeValuesCase):
    def test_positions_of_nan_extremes(self):
        # Note [NaN is the largest position] (grove/aten_argmax_ops.py): the
        # position was the row's size, out of range, in a row holding NaN.
        rows = torch.tensor([[1.0, NAN, 3.0, 2.0], [NAN, 0.0, 0.0, NAN], [5.0, 1.0, 5.0, 5.0],
                             [-INF, -INF, -INF, -INF]])

        def function(x):
            return (x.argmax(-1), x.argmin(-1), x.max(-1)[1], x.min(-1)[1], x.max(-1)[0],
                    x.min(-1)[0], x.argmax())

        self.check_edges(function, [rows])
        # topk takes NaN first (rows without ties: PyTorch orders ties as it likes).
        self.check_edges(lambda x: x.topk(2, -1), [torch.tensor([[1.0, NAN, 3.0, 2.0],
                                                                [4.0, 0.0, -1.0, NAN]])])
        self.check_edges(lambda x: (x.argmax(-1), x.max(-1)[1]), [rows.bfloat16()])
        # A long row: the positions stay inside it.
        wide = torch.randn(3, 5000)
        wide[0, 4321], wide[2, 17], wide[2, 4000] = NAN, NAN, NAN
        self.check_edges(lambda x: x.argmax(-1), [wide])

    def test_casts_to_a_narrow_float_round(self):
        # Note [Casts to a narrow float round in registers]
        # (compiler/codegen/kernel_spec.h): x.half().float() gave x back.
        x = torch.tensor([70000.0, 1e-8, -3.1415926, 1.00390625, 65504.0, 1e-3])

        def function(x):
            return (x.half().float(), x.bfloat16().float(), x.half().float() * 2,
                    (x.bfloat16().float() + 1).half().float(), x.to(torch.int32).float())

        self.check_edges(function, [x])
        plan = self.check_edges(lambda x: x.bfloat16().float() * 3, [x])
        # One kernel: the rounding happens in its registers.
        self.assertEqual(len(plan.programs()), 1)

    def test_values_with_no_elements(self):
        # Note [Values with no elements] (grove/value_kinds.py).
        empty, w = torch.randn(0, 4), torch.randn(4, 3)
        self.check_edges(lambda a, w: (a @ w, torch.softmax(a, -1), a.mean(-1), torch.exp(a) + 1),
                         [empty, w])
        # Elements out of no elements: PyTorch's rules, in PyTorch.
        self.check_edges(lambda a, b: (a.sum(0) + b, a.mean(0) * 2),
                         [empty, torch.randn(4)], unsupported=["aten.sum", "aten.mean"])
        self.check_edges(lambda a, i: a[i] * 2, [torch.randn(5, 3), torch.zeros(0, dtype=torch.long)])
        self.check_edges(lambda a, b: torch.cat([a, b]) * 2, [torch.randn(0, 3), torch.randn(2, 3)])
        # Folded whole: every value here follows from the shapes alone.
        self.check_edges(lambda a: torch.softmax(a, -1).sum(1) + 1, [torch.randn(2, 0, 3)])

    def test_products_of_other_dtypes_run_in_pytorch(self):
        # Note [GEMMs of integers run in PyTorch] (grove/value_kinds.py).
        ints = torch.randint(-5, 5, (3, 4)), torch.randint(-5, 5, (4, 2))
        self.check_edges(lambda a, b: (a @ b) + 1, list(ints), unsupported=["aten.mm"])

    def test_float64_and_narrow_integers_run_in_pytorch(self):
        # Note [Float64 runs in PyTorch] (grove/value_kinds.py): x.double() *
        # 1e-300 gave 0, every f64 value having passed through f32.
        a = torch.randn(3, 4, dtype=torch.float64) + 1e-12
        w = torch.randn(4, 2, dtype=torch.float64)
        plan = self.check_edges(
            lambda a, w, x: (torch.exp(a @ w) * 2, a.sum(-1), a * 1e-300,
                             (a.float() * 2).tanh(), x.double() + 1e-12),
            [a, w, torch.randn(3, 4)],
            unsupported=["aten.mm", "aten.exp", "aten.mul", "aten.sum", "aten.mul",
                         "aten._to_copy", "aten._to_copy", "aten.add"])
        # What the f32 value feeds stays in grove.
        self.assertEqual({op for program in plan.programs() for op in
                          (node["op"] for node in program["nodes"])} & {"mul", "tanh"},
                         {"mul", "tanh"})
        # An f32 op of a 0-d f64 tensor (a Python float dynamo passed as one) stays in grove.
        plan = self.check_edges(lambda x, scale: (x * scale).tanh(),
                                [torch.randn(3, 4), torch.tensor(0.5, dtype=torch.float64)])
        self.assertEqual(plan.unsupported, [])
        # Values grove holds no register for: the cast reading them runs in PyTorch.
        image = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
        for narrow in (image, image.to(torch.int8), image.to(torch.int16)):
            plan = self.check_edges(lambda x: (x.float() / 255 - 0.5) * 2, [narrow],
                                    unsupported=["aten._to_copy"])
            self.assertEqual([kind for kind, _ in plan.steps], ["torch", "grove"])

    def test_a_gemm_giving_integers_beside_its_float_result_is_taken(self):
        # Note [GEMMs of integers run in PyTorch] (grove/value_kinds.py): the
        # efficient attention returns its random seed and offset as int64
        # beside the float result (PyTorch 2.x); a lone integer result is refused.
        graph = make_fx(lambda a, b: a @ b)(torch.randn(2, 3), torch.randn(3, 4))
        node = next(n for n in graph.graph.nodes if n.op == "call_function")
        gemm, other = [{"op": "matmul"}], [{"op": "add"}]
        pair = (torch.randn(2, 4), torch.zeros(2, dtype=torch.int64))
        value_kinds.check_gemm_dtypes({node: pair}, node, gemm)
        value_kinds.check_gemm_dtypes({node: torch.randn(2, 4)}, node, gemm)
        integers = torch.zeros(2, 4, dtype=torch.int64)
        with self.assertRaises(importer.Unsupported):
            value_kinds.check_gemm_dtypes({node: integers}, node, gemm)
        value_kinds.check_gemm_dtypes({node: integers}, node, other)  # no GEMM: nothing to check

    def test_tests_for_non_finite_values(self):
        y = torch.tensor([1.0, NAN, 2.0, 3.0, 0.5, INF, -INF, NAN, 1.0, -3.0, 2.0, 0.0])

        def function(x, y):
            return (torch.isnan(x), torch.isinf(x), torch.isfinite(x), torch.isposinf(x),
                    torch.isneginf(x), torch.nan_to_num(x),
                    torch.nan_to_num(x, nan=1.5, posinf=7.0, neginf=-2.0), torch.fmax(x, y),
                    torch.fmin(x, y), x.masked_fill(x.isnan(), 0) * 2)

        plan = self.check_edges(function, [EDGES, y])
        ops = {node["op"] for program in plan.programs() for node in program["nodes"]}
        self.assertIn("ne", ops)
        self.check_edges(lambda x: (torch.nan_to_num(x), torch.isinf(x), torch.isfinite(x)),
                         [EDGES.half()])
        self.check_edges(lambda x, y: (torch.nan_to_num(x), torch.fmax(x, y)),
                         [EDGES.bfloat16(), y.bfloat16()])
        ints = torch.tensor([3, -4, 0]), torch.tensor([1, 5, -2])
        self.check_edges(lambda a, b: (torch.isnan(a), torch.isinf(a), torch.isfinite(a),
                                       torch.fmax(a, b), torch.nan_to_num(a)), list(ints))

    def test_signed_zeros_and_square_roots(self):
        # |-0.0| is +0.0; x ** 0.5 is sqrt(x) (NaN at -inf, -0.0 at -0.0).
        self.check_edges(lambda x: (x.abs(), torch.abs(x) * 1, x ** 0.5, torch.pow(x, 0.5),
                                    torch.sqrt(x)), [EDGES])


if __name__ == "__main__":
    junit_main.main()
