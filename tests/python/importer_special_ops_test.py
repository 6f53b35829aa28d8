"""The converters of grove/aten_special_ops.py, and the smooth L1, Huber and
logit BCE losses of grove/aten_loss_ops.py, on sim against torch, edge
values included (NaN, infinities, signed zeros): each graph imports whole,
matches torch with NaN equal to NaN, and "cudagraphs" equals "eager"
bitwise; the backwards match autograd's."""
import os
import sys

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from grove import importer  # noqa: E402
import importer_edge_values_test as edge  # noqa: E402
import junit_main  # noqa: E402

NAN, INF = float("nan"), float("inf")
X = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e30, -1e-30, 3.0, 0.25, -0.7])
Y = torch.tensor([1.0, NAN, 2.0, -0.0, 0.0, INF, -INF, 0.5, 1.0, -3.0, 2.0, 0.0, -0.1, 0.6])


def _gradient_of(loss):
    def gradient(a, b):
        a = a.clone().requires_grad_(True)
        return torch.autograd.grad(loss(a, b), [a])[0]

    return gradient


class SpecialOpsTest(edge.EdgeValuesCase):
    def test_signs_and_shrinkage(self):
        self.check_edges(lambda a, b: (torch.signbit(a), torch.copysign(a, b),
                                       torch.copysign(b, a), torch.sgn(a),
                                       torch.heaviside(a, b), F.softshrink(a),
                                       F.softshrink(a, 1.0), F.hardshrink(a, 0.3)), [X, Y])

    def test_logarithms_and_angles(self):
        unit = torch.rand(14) * 0.98 + 0.01
        self.check_edges(lambda u: (torch.logit(u), torch.logit(u, eps=0.05)), [unit])
        self.check_edges(lambda a, b: (torch.xlogy(a, b), torch.xlogy(a * 0, b.abs()),
                                       torch.logaddexp(a, b), torch.deg2rad(a),
                                       torch.rad2deg(a), torch.frac(a)), [X, Y])
        finite = torch.tensor([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e3, 0.25, -0.7, 1e-6])
        self.check_edges(lambda a: torch.sinc(a), [finite], signed_zeros=False)

    def test_amin_and_nansum(self):
        self.check_edges(lambda a: (a.amin(), a.view(2, 7).amin(1),
                                    a.view(2, 7).amin(0, keepdim=True), torch.nansum(a),
                                    torch.nansum(a.view(2, 7), 1)), [X])

    def test_regression_and_logit_losses(self):
        x, target = torch.randn(6, 5), torch.randn(6, 5) * 2
        self.check_edges(lambda a, b: (
            F.smooth_l1_loss(a, b), F.smooth_l1_loss(a, b, beta=0.5, reduction="sum"),
            F.smooth_l1_loss(a, b, beta=0.0, reduction="none"), F.huber_loss(a, b),
            F.huber_loss(a, b, delta=0.3, reduction="none"),
            F.binary_cross_entropy_with_logits(a, b.sigmoid()),
            F.binary_cross_entropy_with_logits(a * 30, b.sigmoid(), reduction="none"),
            F.binary_cross_entropy_with_logits(a, b.sigmoid(), pos_weight=torch.linspace(0.5, 2, 5),
                                               weight=torch.linspace(1, 2, 5), reduction="sum")),
            [x, target])

    def test_backwards_match_autograd(self):
        x, target = torch.randn(6, 5), torch.randn(6, 5) * 2
        for loss in (lambda a, b: F.smooth_l1_loss(a, b, beta=0.5),
                     lambda a, b: F.smooth_l1_loss(a, b, beta=0.0, reduction="sum"),
                     lambda a, b: F.huber_loss(a, b, delta=0.4),
                     lambda a, b: F.binary_cross_entropy_with_logits(a, b.sigmoid()),
                     lambda a, b: (torch.logit(a.sigmoid()) * b).sum(),
                     lambda a, b: (torch.logit(a.sigmoid() * 1.2 - 0.1, eps=0.05) * b).sum(),
                     lambda a, b: (F.softshrink(a, 0.3) * b + F.hardshrink(a, 0.6) * b).sum()):
            gradient = _gradient_of(loss)
            plan = importer.import_graph(make_fx(gradient)(x, target), [x, target])
            self.assertEqual(plan.unsupported, [])
            runner = plan.compile(backend="cudagraphs")  # alive while its outputs are read
            got = runner(x, target)
            got = got[0] if isinstance(got, (list, tuple)) else got
            torch.testing.assert_close(got, gradient(x, target), rtol=1e-5, atol=1e-7)


if __name__ == "__main__":
    junit_main.main()
