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
from training_test import _autograd_graph  # noqa: E402
import junit_main  # noqa: E402


class SamplingCase(ConverterCase):
    def check_gradients(self, function, *inputs, expected_ops=(), atol=1e-4):
        """function's value and its gradients for every float input, through
        one imported forward-and-backward graph, against torch."""
        graph, joint = _autograd_graph(function, *inputs)
        ops = {importer.op_name(n.target) for n in graph.graph.nodes if n.op == "call_function"}
        for op in expected_ops:
            self.assertIn(op, ops, "the traced graph holds %s" % op)
        plan = importer.import_graph(graph, inputs)
        self.assertEqual(plan.unsupported, [])
        expected = [e.detach() for e in joint(*inputs)]
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend)
            for _ in range(2):
                actual = [a.detach() for a in runner(*inputs)]
            for index, (a, e) in enumerate(zip(actual, expected)):
                torch.testing.assert_close(a, e, rtol=1e-4, atol=atol,
                                           msg=lambda m: "%s output %d: %s" % (backend, index, m))
        return plan


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


if __name__ == "__main__":
    junit_main.main()
