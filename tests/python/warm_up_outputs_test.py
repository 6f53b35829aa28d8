"""Outputs of a graph's first call, its warm-up, leave the CUDA graph tree's
pool (Note [Warm-up outputs leave the pool], runner.py): a module that caches
a tensor made on its first compiled call (a rotary table, Wav2Vec2-Conformer's)
reads the same values at every later call. On sim; the runner tests run on
PyTorch 1.13, the torch.compile test where dynamo exists (PyTorch 2.x)."""
import os
import sys
import unittest

import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grove.torch  # noqa: E402
from grove import importer, runner as runner_module  # noqa: E402
from torch_features import HAS_DYNAMO  # noqa: E402
import junit_main  # noqa: E402
from lockstep_training import step_in_lockstep  # noqa: E402


def _tables(x):
    return (x * 3).sin(), x.cos()[1:]


def _pool_runner(leave_pool):
    """A runner over _tables whose outputs stay in the tree's pool after the
    warm-up unless `leave_pool` (copies off, as where PyTorch has the storage
    hook)."""
    x = torch.randn(64, 32)
    plan = importer.import_graph(make_fx(_tables)(x), [x])
    return plan.compile(backend="cudagraphs", device="sim", output_copies=lambda node: False,
                        warm_up_outputs_leave_pool=leave_pool)


def _kept_through_generations(test, leave_pool):
    """The outputs of a first call, held through four later calls (each a
    generation: the recording, then replays, every result checked), and
    what they were."""
    generator = torch.Generator().manual_seed(3)
    runner = _pool_runner(leave_pool)
    first = torch.randn(64, 32, generator=generator)
    kept = runner(first)
    expected = _tables(first)
    for _ in range(4):
        later = torch.randn(64, 32, generator=generator)
        torch.testing.assert_close(runner(later), _tables(later))
    return kept, expected


class WarmUpOutputsTest(unittest.TestCase):
    def test_a_kept_warm_up_output_outlives_later_generations(self):
        kept, expected = _kept_through_generations(self, leave_pool=True)
        for value, reference in zip(kept, expected):
            torch.testing.assert_close(value, reference)

    def test_without_it_the_warm_up_output_is_overwritten(self):
        # The case the Note guards: here, with copies off and no storage hook
        # (PyTorch 1.13), the kept output silently changes; where the hook
        # exists, reading it raises StaleOutputError. Either way not its value.
        kept, expected = _kept_through_generations(self, leave_pool=False)
        try:
            differs = any(not torch.allclose(value, reference)
                          for value, reference in zip(kept, expected))
        except grove.StaleOutputError:
            differs = True
        self.assertTrue(differs, "the pool memory was reused: the test must see a change")

    def test_later_calls_hand_out_pool_memory(self):
        # Only the warm-up is copied: later calls' outputs are the tree's.
        # Two replays write the same pool memory; the warm-up's copy is elsewhere.
        runner = _pool_runner(leave_pool=True)
        addresses = [runner(torch.randn(64, 32))[0].data_ptr() for _ in range(4)]
        self.assertEqual(addresses[2], addresses[3])
        self.assertNotIn(addresses[0], addresses[1:])

    def test_the_copies_are_named_in_a_log_line(self):
        runner = _pool_runner(leave_pool=True)
        with self.assertLogs("grove", level="INFO") as logged:
            runner(torch.randn(64, 32))
        self.assertTrue(any("warm-up's outputs [[64, 32], [63, 32]]" in line
                            for line in logged.output), logged.output)

    def test_outputs_sharing_a_storage_share_its_copy_and_inputs_pass_through(self):
        base = torch.arange(12.0)
        x = torch.randn(3)
        whole, tail, same = runner_module._in_memory_of_their_own(
            (base.view(3, 4), base[4:], x), (x,))
        self.assertIs(same, x)
        self.assertNotEqual(whole.data_ptr(), base.data_ptr())
        torch.testing.assert_close(whole, base.view(3, 4))
        torch.testing.assert_close(tail, base[4:])
        whole[1, 0] = -1.0  # element 4 of the one copy
        self.assertEqual(tail[0].item(), -1.0)
        self.assertEqual(base[4].item(), 4.0)

    def test_state_outputs_keep_their_own_copies(self):
        # Note [Reused state copies]: a state output is already the copy the
        # next call reuses; copying it again gave a second address.
        state, other = torch.randn(4), torch.randn(4)
        kept, copied = runner_module._in_memory_of_their_own((state, other), (), left=(0,))
        self.assertIs(kept, state)
        self.assertNotEqual(copied.data_ptr(), other.data_ptr())
        self.assertIs(runner_module._in_memory_of_their_own(state, (), left=(0,)), state)


class _CachedTable(nn.Module):
    """Builds a table on its first call and keeps it, as rotary embeddings
    do; every later call reads the kept table."""

    def __init__(self, graph_break=False):
        super().__init__()
        self.linear = nn.Linear(16, 16)
        self.table = None
        self.graph_break = graph_break

    def forward(self, x):
        if self.table is None or self.table.shape[0] != x.shape[0]:
            positions = torch.arange(x.shape[0], dtype=x.dtype, device=x.device)
            self.table = (positions[:, None] * torch.linspace(0.1, 1.6, 16)).sin()
        if self.graph_break:  # the table's graph has no input that needs gradients
            torch._dynamo.graph_break()
        return self.linear(x) * self.table


@unittest.skipUnless(HAS_DYNAMO, "torch.compile needs torch._dynamo (PyTorch 2.x)")
class DoorWarmUpOutputsTest(unittest.TestCase):
    def test_state_cached_on_the_first_call_outlives_the_warm_up(self):
        torch.manual_seed(0)
        module = _CachedTable()
        reference = _CachedTable()
        reference.load_state_dict(module.state_dict())
        compiled = torch.compile(module, backend="grove", dynamic=False)
        with torch.no_grad():
            for call in range(6):
                x = torch.randn(8, 16)
                torch.testing.assert_close(compiled(x), reference(x),
                                           msg=lambda m: "call %d: %s" % (call, m))
        torch.testing.assert_close(module.table, reference.table)

    def test_a_training_step_reads_the_table_made_at_its_first_step(self):
        # Wav2Vec2-Conformer's case: the table is made by a graph without
        # gradients at the first training step and read at every later step,
        # each step a generation of its own.
        torch.manual_seed(0)
        module = _CachedTable(graph_break=True)
        reference = _CachedTable(graph_break=True)
        reference.load_state_dict(module.state_dict())
        compiled = torch.compile(module, backend="grove", dynamic=False)
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (module, reference)]
        for step in range(6):
            x = torch.randn(8, 16)
            losses = step_in_lockstep((compiled, reference), optimizers,
                                      lambda call: call(x).square().mean())
            torch.testing.assert_close(losses[0], losses[1],
                                       msg=lambda m: "step %d: %s" % (step, m))
        torch.testing.assert_close(module.linear.weight, reference.linear.weight)


if __name__ == "__main__":
    junit_main.main()
