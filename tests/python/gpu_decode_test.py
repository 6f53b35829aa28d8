"""LLM decode with a static KV cache through the torch door on a GPU host:
Hugging Face's `generate(..., cache_implementation="static")` of a small
random-weight LLaMA with `model.forward = torch.compile(model.forward,
backend="grove")`, greedy, 48 new tokens, ten generate calls, each with a new
cache. Every call's tokens must equal eager PyTorch's (same model, same static
cache; generate's own compilation of the decode step turned off in both), and
after the second call (where the moved cache is demoted once, Note [Static
inputs that move]) no call compiles or records anything; with the option
reuse_state the cache never moves (Note [Reused state copies]). The
cache is created inside the compiled forward on its first call (Note [State
created inside a function], Note [State outputs leave the pool]) and written
by every decode step (Note [Writes into graph inputs]). Also with a
StaticCache made before each call. The graphs recorded are bounded by the
shapes (prefill and decode), not one per position. Prints tokens/s of eager
and of grove (its first call and its steady state) and what grove compiled
and recorded per call. A gpt-fast-style decoder (static_cache_decoder.py, KV
cache in module buffers) through torch.compile likewise. Skips without CUDA,
dynamo or transformers."""
import os
import sys
import time
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import junit_main  # noqa: E402

from torch_features import HAS_CUDA, HAS_DYNAMO  # noqa: E402
try:
    import transformers  # noqa: F401

    HAS_TRANSFORMERS = True
except ImportError:
    HAS_TRANSFORMERS = False

NEW_TOKENS = 48
# Generate calls per cache kind: each makes a new cache, so every call after
# the first brings the decode graph a static input at a new address (Note
# [Static inputs that move]); more than CompiledGraph used to allow (8).
CALLS = 10
# Graphs recorded by the first two calls and graphs compiled: prefill and
# decode, each a few times at most (a new cache may record under a new parent),
# far fewer than one per position.
MAX_RECORDINGS = 8


def new_graphs(earlier):
    """The graphs grove compiled since `earlier` (a list held by the caller)."""
    import grove.torch

    seen = {id(graph) for graph in earlier}
    return [graph for graph in grove.torch.compiled_graphs() if id(graph) not in seen]


def tree_counters():
    import grove.torch

    for graph in grove.torch.compiled_graphs():
        models = getattr(getattr(graph, "runner", None), "models", lambda: [])()
        if models:
            return models[0].stats()["tree"]
    return {}


def small_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                         max_position_embeddings=256)
    return LlamaForCausalLM(config).cuda().eval()


def without_hf_compile():
    """generate's options that keep Hugging Face from compiling the decode
    step itself: on CUDA with a static cache, generate otherwise wraps the
    model's call in its own torch.compile(mode="reduce-overhead") (its
    "auto compile"), so "eager" would not be eager and grove's compiled
    forward would run inside another compilation (Note [Hugging Face compiles
    its decode step], benchmarks/torch_zoo.py)."""
    from transformers import GenerationConfig

    return {"disable_compile": True} if hasattr(GenerationConfig(), "disable_compile") else {}


def generate(model, ids, **kwargs):
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False, **without_hf_compile(), **kwargs)
    torch.cuda.synchronize()
    return out, NEW_TOKENS / (time.perf_counter() - start)


@unittest.skipUnless(HAS_CUDA, "no CUDA device")
@unittest.skipUnless(HAS_TRANSFORMERS, "transformers is not installed")
class GpuDecodeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.backends.cuda.matmul.allow_tf32 = False

    def check(self, make_cache, options=None):
        import statistics

        import grove.torch

        model = small_llama()
        ids = torch.randint(0, 1000, (1, 12), device="cuda")
        eager = [generate(model, ids, **make_cache(model)) for _ in range(3)]
        expected = eager[0][0]
        eager_rate = statistics.median(rate for _, rate in eager[1:])  # the first warms up
        torch._dynamo.reset()
        earlier = grove.torch.compiled_graphs()
        model.forward = torch.compile(model.forward, backend="grove", options=options)
        rates, recorded, compiled, rebuilds, trees = [], [], [], [], []
        for call in range(CALLS):
            out, rate = generate(model, ids, **make_cache(model))
            self.assertTrue(torch.equal(out, expected), "call %d: grove's tokens %s differ from "
                            "eager's %s" % (call, out[0, ids.shape[1]:].tolist(),
                                            expected[0, ids.shape[1]:].tolist()))
            graphs = new_graphs(earlier)
            rates.append(rate)
            trees.append(tree_counters())
            recorded.append(trees[-1].get("recordings", 0))
            compiled.append(len(graphs))
            rebuilds.append(sum(getattr(graph, "rebuilds", 0) for graph in graphs))
        graphs = new_graphs(earlier)
        unsupported = sorted({op for graph in graphs for _, op, _ in graph.unsupported})
        tree = tree_counters()
        # The tree's counters add up over the calls: recordings per call are differences.
        per_call = [recorded[0]] + [b - a for a, b in zip(recorded, recorded[1:])]
        print("static-cache decode%s, %d generate calls of %d tokens: eager %.1f tokens/s (after "
              "a first call), grove first call %.1f, steady (median of calls 2..%d) %.1f; "
              "graphs compiled per call %s, demotions (rebuilds) %s, recordings per call %s "
              "(re-record reasons %s); %d replays, %d eager calls, static input writes %d, "
              "copy-back inputs %d, input patches %d, zero-copy refusals %d, input copies %d, "
              "input copy-backs %d; ops in PyTorch: %s"
              % (" (options %s)" % options if options else "", CALLS, NEW_TOKENS, eager_rate,
                 rates[0], CALLS, statistics.median(rates[1:]),
                 compiled, rebuilds, per_call, tree.get("rerecord_reasons", {}),
                 tree.get("replays", 0), tree.get("eager_calls", 0),
                 tree.get("static_input_writes", 0), tree.get("copy_back_inputs", 0),
                 tree.get("input_patches", 0), tree.get("zero_copy_refusals", 0),
                 tree.get("input_copies", 0), tree.get("input_copy_backs", 0),
                 unsupported or "none"))
        # Rate-independent facts: the first call compiles the graphs; a
        # static input that moves is demoted once (the second call, the
        # first new cache, which may also meet a prefill graph of a cache
        # that exists); later calls compile, demote and record nothing.
        self.assertEqual(compiled[2:], [compiled[1]] * (CALLS - 2), "graphs compiled per call")
        self.assertEqual(rebuilds[2:], [rebuilds[1]] * (CALLS - 2), "rebuilds after the second")
        self.assertLessEqual(rebuilds[-1], len(graphs), "more than one demotion per graph")
        self.assertEqual(per_call[2:], [0] * (CALLS - 2), "recordings per call")
        self.assertLessEqual(recorded[1], MAX_RECORDINGS, "a graph recorded per position?")
        self.assertLessEqual(len(graphs), MAX_RECORDINGS, "a graph compiled per position?")
        self.assertEqual(tree.get("eager_calls", 0), 0, tree)
        return rebuilds, trees

    def test_static_cache_made_inside_the_compiled_forward(self):
        self.check(lambda model: {"cache_implementation": "static"})

    def test_static_cache_with_reused_state(self):
        # Note [Reused state copies] (grove/runner.py): every sequence's cache
        # lands where the first one's did, so the decode graph keeps it bound:
        # no demotion, nothing recorded after the first call, and the caches
        # written in place (no per-step copy of them in or back).
        rebuilds, trees = self.check(lambda model: {"cache_implementation": "static"},
                                     options={"reuse_state": True})
        self.assertEqual(rebuilds, [0] * CALLS)
        copy_backs = trees[-1].get("input_copy_backs", 0) - trees[0].get("input_copy_backs", 0)
        self.assertEqual(copy_backs, 0, trees[-1])

    def test_static_cache_made_before_the_call(self):
        from transformers import StaticCache

        def make_cache(model):
            return {"past_key_values": StaticCache(config=model.config, max_cache_len=128)}

        self.check(make_cache)


@unittest.skipUnless(HAS_CUDA, "no CUDA device")
@unittest.skipUnless(HAS_DYNAMO, "this PyTorch has no torch._dynamo")
class GpuStaticCacheDecoderTest(unittest.TestCase):
    def test_gpt_fast_style_decoder_through_torch_compile(self):
        import copy

        import grove.torch
        from static_cache_decoder import StaticCacheDecoder, greedy

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.manual_seed(0)
        model = StaticCacheDecoder(vocab=512, width=256, heads=8, layers=4,
                                   max_length=128).cuda().eval()
        reference = copy.deepcopy(model)
        prompt = torch.randint(0, 512, (1, 9), device="cuda")
        with torch.no_grad():
            expected = greedy(reference, prompt, NEW_TOKENS)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="grove")
        earlier = grove.torch.compiled_graphs()
        recorded = []
        for sequence in range(2):
            model.reset_cache()
            with torch.no_grad():
                tokens = greedy(compiled, prompt, NEW_TOKENS)
            recorded.append(tree_counters().get("recordings", 0))
            self.assertTrue(torch.equal(tokens, expected), "sequence %d: %s != %s" % (
                sequence, tokens.tolist(), expected.tolist()))
        graphs = new_graphs(earlier)
        unsupported = sorted({op for graph in graphs for _, op, _ in graph.unsupported})
        tree = tree_counters()
        recordings = recorded[1] - recorded[0]  # the second sequence replays
        print("gpt-fast-style decode: %d graphs, %d recordings in the second sequence, static "
              "input writes %d, "
              "copy-back inputs %d; ops in PyTorch: %s" % (
                  len(graphs), recordings, tree.get("static_input_writes", 0),
                  tree.get("copy_back_inputs", 0), unsupported or "none"))
        self.assertEqual(unsupported, [])
        self.assertLessEqual(len(graphs), 4, "prefill and decode, each compiled once or twice")
        self.assertLessEqual(recordings, 2)


if __name__ == "__main__":
    junit_main.main()
