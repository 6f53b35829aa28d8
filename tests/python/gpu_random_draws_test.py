"""Note [Random draws run first] (python/grove/random_draws.py) on a GPU host:
a graph's training dropouts, rewritten as draws on new tensors at the start of
the graph, draw eager PyTorch's masks on CUDA under the same seed, in every
float dtype (the half-precision result computed in float32 and rounded, as
the fused kernel computes it); a dropout of a transposed operand (not
rewritten) gets its operand in the traced layout (Note [Layouts a PyTorch step
reads]). Every call of both modes equals eager bitwise. Skips without CUDA.
CI's counterpart is random_draws_test.py (sim, PyTorch 1.13)."""
import os
import sys
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import junit_main  # noqa: E402

from torch_features import HAS_CUDA  # noqa: E402

CALLS = 4


def block(x, w1, w2):
    hidden = F.gelu(x @ w1)
    hidden = F.dropout(hidden, 0.1, True)  # eager's call, traced to native_dropout
    out, mask = torch.native_dropout(hidden @ w2 + x, 0.25, True)
    return out * 2, mask


def transposed(x, w1, w2):
    first = F.dropout(x @ w1, 0.2, True)
    return F.dropout((first @ w2).t(), 0.3, True)


@unittest.skipUnless(HAS_CUDA, "no CUDA device: the masks are CUDA's fused dropout kernel's")
class GpuRandomDrawsTest(unittest.TestCase):
    def arguments(self, dtype):
        torch.manual_seed(0)
        return [torch.randn(48, 64, device="cuda", dtype=dtype),
                (torch.randn(64, 256, device="cuda") * 0.1).to(dtype),
                (torch.randn(256, 64, device="cuda") * 0.1).to(dtype)]

    def assert_every_call_is_eager(self, function, dtype, one_program):
        from torch.fx.experimental.proxy_tensor import make_fx

        from grove import importer

        args = self.arguments(dtype)
        plan = importer.import_graph(make_fx(function)(*args), args, static_inputs=[1, 2])
        kinds = [kind for kind, _ in plan.steps]
        if one_program:
            self.assertEqual(kinds.count("grove"), 1, kinds)
        for backend in ("cudagraphs", "eager"):
            runner = plan.compile(backend=backend, device="cuda")
            for seed in range(CALLS):
                torch.manual_seed(seed)
                expected = function(*args)
                torch.manual_seed(seed)
                got = runner(*args)
                expected = expected if isinstance(expected, tuple) else (expected,)
                got = got if isinstance(got, (tuple, list)) else (got,)
                for want, have in zip(expected, got):
                    self.assertTrue(torch.equal(have, want),
                                    "%s %s %s call %d: %s" % (function.__name__, dtype, backend,
                                                             seed, (have.float() - want.float())
                                                             .abs().max().item()))

    def test_rewritten_dropouts_draw_eagers_masks_in_every_float_dtype(self):
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            self.assert_every_call_is_eager(block, dtype, one_program=True)

    def test_a_dropout_of_a_transposed_operand_reads_it_in_the_traced_layout(self):
        self.assert_every_call_is_eager(transposed, torch.float32, one_program=False)


if __name__ == "__main__":
    junit_main.main()
