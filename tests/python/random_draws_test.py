"""Note [Random draws run first] (python/grove/random_draws.py): a graph's
random draws move to its start, so the rest imports as one grove program,
and every call still equals eager PyTorch under the same seed (sim, CPU)."""
import os
import sys
import unittest

import torch
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grove  # noqa: E402,F401  (loads libgrove)
from grove import importer  # noqa: E402
from grove.fx_common import op_name  # noqa: E402
import junit_main  # noqa: E402


def block(x, w1, w2):
    """Two dropouts, a drop-path draw and noise drawn like a value around two
    products, as a transformer block trained at its default configuration
    has them."""
    hidden, mask = torch.native_dropout(x @ w1, 0.3, True)
    hidden = torch.relu(hidden) @ w2
    keep = hidden.new_empty((hidden.shape[0], 1)).bernoulli_(0.8)
    hidden = hidden * keep / 0.8 + 0.05 * torch.rand_like(hidden)
    out, _ = torch.native_dropout(hidden + x, 0.1, True)
    return out.tanh(), mask


def arguments():
    torch.manual_seed(0)
    return [torch.randn(8, 32), torch.randn(32, 64) * 0.2, torch.randn(64, 32) * 0.2]


def kinds(plan):
    return [kind for kind, _ in plan.steps]


class RandomDrawsTest(unittest.TestCase):
    def compiled(self, function, args, backend="cudagraphs"):
        plan = importer.import_graph(make_fx(function)(*args), args, static_inputs=[1, 2])
        return plan, plan.compile(backend=backend)

    def assert_calls_match_eager(self, function, runner, args, calls=4):
        for seed in range(calls):
            torch.manual_seed(seed)
            expected = function(*args)
            torch.manual_seed(seed)
            got = runner(*args)
            for want, have in zip(expected, got):
                torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-6)
            # The generator advanced as eager's did: the next draw matches too.
            self.assertTrue(torch.equal(torch.rand(4), (torch.manual_seed(seed), function(*args),
                                                        torch.rand(4))[2]))

    def test_draws_run_first_and_the_rest_is_one_program(self):
        args = arguments()
        for backend in ("cudagraphs", "eager"):
            plan, runner = self.compiled(block, args, backend)
            steps = kinds(plan)
            self.assertEqual(steps.count("grove"), 1, steps)
            self.assertEqual(steps[-1], "grove", steps)
            pytorch_ops = [op_name(node.target) for kind, node in plan.steps if kind == "torch"]
            # The draws, what they write (the drop path's new tensor) and
            # the picks of their results.
            self.assertEqual(sorted(op for op in pytorch_ops if op != "getitem"),
                             ["aten.bernoulli_", "aten.empty", "aten.native_dropout",
                              "aten.native_dropout", "aten.rand"], pytorch_ops)
            self.assert_calls_match_eager(block, runner, args)

    def test_a_transposed_operand_keeps_its_dropout_and_the_draws_after_it(self):
        # Its mask follows its memory order, not its shape: that draw stays,
        # and so does every draw after it (the draws keep their order).
        def transposed(x, w1, w2):
            first, _ = torch.native_dropout(x @ w1, 0.2, True)
            second, _ = torch.native_dropout((first @ w2).t(), 0.2, True)
            third = torch.rand(second.shape)
            return (second + third).sum(0), first

        args = arguments()
        plan, runner = self.compiled(transposed, args)
        steps = kinds(plan)
        self.assertEqual(steps[0], "torch", steps)  # the first dropout moved up
        self.assertGreater(steps.count("grove"), 1, steps)
        self.assert_calls_match_eager(transposed, runner, args)

    def test_a_half_precision_dropout_on_the_host_stays_and_matches_eager(self):
        # The CPU kernel rounds a bfloat16 product its own way: the draw is
        # not rewritten there (on CUDA it is: GpuRandomDrawsTest).
        def half(x, w1, w2):
            hidden, mask = torch.native_dropout((x @ w1).to(torch.bfloat16), 0.3, True)
            return hidden.float() @ w2, mask

        args = arguments()
        plan, runner = self.compiled(half, args, "eager")
        dropouts = [node for kind, node in plan.steps if kind == "torch"
                    and op_name(node.target) == "aten.native_dropout"]
        self.assertEqual([node.args[0].op for node in dropouts], ["call_function"])
        self.assertNotEqual(op_name(dropouts[0].args[0].target), "aten.ones")
        self.assert_calls_match_eager(half, runner, args)

    def test_a_new_tensor_read_before_its_draw_keeps_the_draw_in_place(self):
        # bernoulli_ writes the tensor it is given: where something reads
        # that tensor first, moving the draw ahead would change what it read.
        def read_first(x, w1, w2):
            noise = x.new_zeros(x.shape)
            before = (x + noise) @ w1
            noise.bernoulli_(0.5)
            return before @ w2 + noise.sum(), noise

        args = arguments()
        plan, runner = self.compiled(read_first, args, "eager")
        order = [op_name(getattr(step, "target", None)) if kind == "torch" else "grove"
                 for kind, step in plan.steps]
        self.assertLess(order.index("grove"), order.index("aten.bernoulli_"), order)
        self.assert_calls_match_eager(read_first, runner, args)

    def test_grove_draws_first_off_leaves_the_draws_in_place(self):
        os.environ["GROVE_DRAWS_FIRST"] = "0"
        try:
            args = arguments()
            plan, runner = self.compiled(block, args)
        finally:
            del os.environ["GROVE_DRAWS_FIRST"]
        self.assertGreater(kinds(plan).count("grove"), 1)
        self.assert_calls_match_eager(block, runner, args)


if __name__ == "__main__":
    junit_main.main()
