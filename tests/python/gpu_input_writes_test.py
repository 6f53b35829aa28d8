"""Writes into graph inputs through torch.compile(backend="grove") on a GPU
host (PyTorch 2.x, dynamo; issue 33 part 2): a module whose buffers are
updated in place (a step counter's add_, running statistics, a cache written
with index_copy_ at a position), a `torch._dynamo.mark_static_address` cache
written through a slice view, and batch norm in training mode under no_grad
(its running statistics). Every call in both modes is compared with eager
PyTorch on its own copy of the state, state included; each graph must import
whole (no op left to PyTorch) and replay without eager fallbacks. Prints the
tree's mutation counts. Skips without CUDA or dynamo. CI's counterpart is
input_writes_test.py (sim, PyTorch 1.13)."""
import copy
import os
import sys
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import junit_main  # noqa: E402

from torch_features import HAS_CUDA, HAS_DYNAMO  # noqa: E402

CALLS = 6


class StatefulLayer(nn.Module):
    def __init__(self, width=64, slots=8):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.register_buffer("running", torch.zeros(width))
        self.register_buffer("cache", torch.zeros(slots, width))

    def forward(self, x, slot):
        y = self.linear(x)
        self.steps.add_(1)
        self.running.mul_(0.9).add_(y.mean(0), alpha=0.1)
        self.cache.index_copy_(0, slot, y[:1])
        return y + self.running + self.cache.sum(0) * self.steps


def write_slice(cache, values, start):
    cache[:, start:start + values.shape[1]] = values
    return cache.sum(1)


class BatchNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.norm(self.conv(x)))


def tree_counters():
    import grove.torch

    for graph in grove.torch.compiled_graphs():
        models = getattr(getattr(graph, "runner", None), "models", lambda: [])()
        if models:
            return models[0].stats().get("tree", {})
    return {}


@unittest.skipUnless(HAS_CUDA, "no CUDA device")
@unittest.skipUnless(HAS_DYNAMO, "this PyTorch has no torch._dynamo")
class GpuInputWritesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def compare(self, name, module, make_inputs, state_of):
        import grove.torch

        for mode in ("eager", "cudagraphs"):
            torch.manual_seed(0)
            reference = copy.deepcopy(module)
            subject = copy.deepcopy(module)
            torch._dynamo.reset()
            earlier = grove.torch.compiled_graphs()
            compiled = torch.compile(subject, backend="grove", options={"mode": mode})
            for call in range(CALLS):
                inputs = make_inputs(call)
                with torch.no_grad():
                    expected = reference(*inputs)
                    result = compiled(*inputs)
                torch.testing.assert_close(result, expected, rtol=2e-4, atol=2e-4, msg=lambda m: (
                    "%s %s call %d: %s" % (name, mode, call, m)))
                for index, (mine, theirs) in enumerate(zip(state_of(subject),
                                                           state_of(reference))):
                    torch.testing.assert_close(mine, theirs, rtol=2e-4, atol=2e-4, msg=lambda m: (
                        "%s %s call %d, state %d: %s" % (name, mode, call, index, m)))
            seen = {id(graph) for graph in earlier}
            graphs = [g for g in grove.torch.compiled_graphs() if id(g) not in seen]
            unsupported = sorted({op for graph in graphs for _, op, _ in graph.unsupported})
            tree = tree_counters() if mode == "cudagraphs" else {}
            print("%s %s: ops in PyTorch %s; static input writes %s, copy-back inputs %s, "
                  "eager calls %s" % (name, mode, unsupported or "none",
                                      tree.get("static_input_writes"),
                                      tree.get("copy_back_inputs"), tree.get("eager_calls")))
            self.assertEqual(unsupported, [], "%s %s: the writes split the graph" % (name, mode))

    def test_buffers_updated_in_place(self):
        module = StatefulLayer().cuda().eval()

        def make_inputs(call):
            return (torch.randn(4, 64, device="cuda"), torch.tensor([call % 8], device="cuda"))

        self.compare("stateful_layer", module, make_inputs,
                     lambda m: [m.steps, m.running, m.cache])

    def test_a_static_cache_written_through_a_slice(self):
        class Holder(nn.Module):
            def __init__(self):
                super().__init__()
                self.cache = torch.zeros(2, 32, device="cuda")
                torch._dynamo.mark_static_address(self.cache)

            def forward(self, values):
                return write_slice(self.cache, values, 4)

        self.compare("static_slice_cache", Holder(),
                     lambda call: (torch.randn(2, 3, device="cuda"),), lambda m: [m.cache])

    def test_batch_norm_running_statistics(self):
        module = BatchNormNet().cuda().train()
        self.compare("batch_norm_train", module,
                     lambda call: (torch.randn(4, 3, 16, 16, device="cuda"),),
                     lambda m: [m.norm.running_mean, m.norm.running_var,
                                m.norm.num_batches_tracked])


if __name__ == "__main__":
    junit_main.main()
