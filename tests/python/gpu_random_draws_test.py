"""Note [Random draws run first] (python/grove/random_draws.py) on a GPU host:
a graph's training dropouts, rewritten as draws on new tensors at the start of
the graph, draw eager PyTorch's masks on CUDA under the same seed, in every
float dtype (the half-precision result computed in float32 and rounded, as
the fused kernel computes it); a dropout of a transposed operand (not
rewritten) gets its operand in the traced layout (Note [Layouts a PyTorch step
reads]). Every call of both modes draws eager's masks (compared bitwise) and
its values match eager's within the dtype's tolerance (grove's products are
not PyTorch's bit for bit; a mask drawn otherwise moves a value by the whole
kept element). Skips without CUDA.
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


TOLERANCES = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (2e-2, 6e-2),
              torch.float16: (2e-3, 8e-3)}


def block(x, w1, w2):
    hidden, first_mask = torch.native_dropout(F.gelu(x @ w1), 0.1, True)
    out, mask = torch.native_dropout(hidden @ w2 + x, 0.25, True)
    return out * 2, first_mask, mask


def transposed(x, w1, w2):
    first, first_mask = torch.native_dropout(x @ w1, 0.2, True)
    second, mask = torch.native_dropout((first @ w2).t(), 0.3, True)
    return second, first_mask, mask


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
                where = "%s %s %s call %d" % (function.__name__, dtype, backend, seed)
                for want_mask, mask in zip(expected[1:], got[1:]):
                    self.assertTrue(torch.equal(mask, want_mask), "%s: another mask" % where)
                rtol, atol = TOLERANCES[dtype]
                torch.testing.assert_close(got[0], expected[0], rtol=rtol, atol=atol,
                                           msg=lambda message: "%s: %s" % (where, message))

    def test_rewritten_dropouts_draw_eagers_masks_in_every_float_dtype(self):
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            self.assert_every_call_is_eager(block, dtype, one_program=True)

    def test_a_dropout_of_a_transposed_operand_reads_it_in_the_traced_layout(self):
        self.assert_every_call_is_eager(transposed, torch.float32, one_program=False)


if __name__ == "__main__":
    junit_main.main()
