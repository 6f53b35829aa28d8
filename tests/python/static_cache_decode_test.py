"""Decode through the torch door on sim (PyTorch 1.13, CPU tensors): a
gpt-fast-style decoder (static_cache_decoder.py: KV cache in module buffers
written with index_copy_ and index_put_ at `input_pos`) compiled as dynamo
would hand it over (parameters and buffers lifted to static inputs), one
graph for the prefill and one for the decode step. Greedy tokens must equal
eager PyTorch's over two sequences; each graph imports whole, records once
and replays every later step (graphs bounded by the shapes: none per
position); the cache updates are static input writes inside the graph, or,
with buffers that are not static, copied back by the tree. Issue 33 parts 2
and 4."""
import copy
import gc
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grove.torch  # noqa: E402
import junit_main  # noqa: E402
from static_cache_decoder import StaticCacheDecoder, functional_step, greedy  # noqa: E402

PROMPT, NEW_TOKENS = 5, 12


class CompiledByLength:
    """One grove graph per input length (prefill, decode), as dynamo's
    recompilation on a new shape gives."""

    def __init__(self, model, mode, static_buffers=True):
        self.step, self.state = functional_step(model, static_buffers)
        self.mode = mode
        self.graphs = {}

    def __call__(self, tokens, input_pos):
        graph = self.graphs.get(tokens.shape[1])
        inputs = self.state + [tokens, input_pos]
        if graph is None:
            graph = grove.torch.compile_graph(self.step, inputs, mode=self.mode, strict=True)
            self.graphs[tokens.shape[1]] = graph
        return graph(*inputs)


class StaticCacheDecodeTest(unittest.TestCase):
    def decode(self, static_buffers):
        """Greedy tokens of both modes against eager PyTorch's, two sequences;
        returns the counters of the tree the cudagraphs run used (a tree of
        its own: the models of earlier tests are gone)."""
        gc.collect()
        torch.manual_seed(20261126)
        model = StaticCacheDecoder().eval()
        reference = copy.deepcopy(model)
        prompts = [torch.randint(0, 64, (1, PROMPT)) for _ in range(2)]
        with torch.no_grad():
            expected = []
            for prompt in prompts:
                reference.reset_cache()
                expected.append(greedy(reference, prompt, NEW_TOKENS))
        for mode in ("eager", "cudagraphs"):
            compiled = CompiledByLength(model, mode, static_buffers)
            for index, prompt in enumerate(prompts):
                model.reset_cache()
                with torch.no_grad():
                    tokens = greedy(compiled, prompt, NEW_TOKENS)
                self.assertTrue(torch.equal(tokens, expected[index]), "%s sequence %d: %s != %s" % (
                    mode, index, tokens.tolist(), expected[index].tolist()))
            self.assertEqual(sorted(compiled.graphs), [1, PROMPT])
            for length, graph in compiled.graphs.items():
                self.assertEqual(list(graph.unsupported), [])
                self.assertEqual([kind for kind, _ in graph.runner.steps], ["grove"])
        return compiled.graphs[1].runner.models()[0].stats()["tree"]

    def check_bounded(self, counts):
        # Prefill and decode: one recording each, whatever the positions.
        self.assertEqual(counts["recordings"], 2, counts)
        self.assertEqual(counts["eager_calls"], 0, counts)
        self.assertGreaterEqual(counts["replays"], 2 * NEW_TOKENS - 4, counts)
        return counts

    def test_greedy_tokens_equal_eager_with_one_recording_per_graph(self):
        counts = self.check_bounded(self.decode(static_buffers=True))
        # Keys and values of 2 layers, written in place by each graph.
        self.assertEqual(counts["static_input_writes"], 2 * 4, counts)
        self.assertEqual(counts["copy_back_inputs"], 0, counts)

    def test_a_cache_that_is_not_static_is_copied_back(self):
        counts = self.check_bounded(self.decode(static_buffers=False))
        self.assertEqual(counts["static_input_writes"], 0, counts)
        self.assertEqual(counts["copy_back_inputs"], 2 * 4, counts)


if __name__ == "__main__":
    junit_main.main()
