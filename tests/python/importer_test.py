"""The ATen importer and the torch backend on sim over torch CPU tensors
(PyTorch 1.13 here: graphs from make_fx, the backend function called
directly). Tolerances: f32 results within rtol 1e-4, atol 1e-5 of torch's
(grove computes in f32 with its own reduction order, and exact gelu's erf
within 1.5e-7);
results that pass through bf16 within one bf16 step (2^-7 relative);
"cudagraphs" equals "eager" bitwise."""
import operator
import os
import sys
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grove  # noqa: E402
import grove.torch  # noqa: E402
import grove.verify  # noqa: E402
from grove import importer  # noqa: E402
import junit_main  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


class Mlp(nn.Module):
    def __init__(self, width=32, depth=3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for index, layer in enumerate(self.layers):
            x = layer(x)
            x = F.gelu(x, approximate="tanh") if index % 2 == 0 else torch.relu(x)
        return x


class Block(nn.Module):
    """A GPT block: embedding, pre-LN causal self-attention, GELU MLP, head."""

    def __init__(self, vocab=50, width=32, heads=4):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, width)
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        batch, time, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)

        def heads(t):
            return t.view(batch, time, self.heads, width // self.heads).transpose(1, 2)

        q, k, v = heads(q), heads(k), heads(v)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / (width // self.heads) ** 0.5)
        mask = torch.tril(torch.ones(time, time)).bool()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).contiguous().view(batch, time, width)
        x = x + self.proj(y)
        x = x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return F.log_softmax(self.head(x), dim=-1)


class ManyOps(nn.Module):
    """One of most ops the importer maps, with a bf16 round trip."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8))

    def forward(self, x, y):
        a = torch.sigmoid(x) * torch.tanh(y) - x.neg().exp() / (y.abs() + 1.5)
        b = torch.sqrt(x * x + 1) + torch.rsqrt(y * y + 2) + torch.log(x.pow(2) + 1)
        c = F.silu(a) + b.unsqueeze(0).squeeze(0) + F.gelu(x)
        rms = c * torch.rsqrt(c.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        halves = torch.cat([rms[:, :4], rms[:, 4:]], dim=1)
        parts = halves.split(2, dim=1)
        picked = halves.select(0, 1) + parts[1].sum(-1).mean() + torch.ones_like(rms)[0]
        rows = rms.unbind(0)
        picked = picked + rows[2] - torch.zeros_like(rows[3])
        expanded = picked.unsqueeze(0).expand(3, 8).permute(1, 0)
        low = rms.to(torch.bfloat16).to(torch.float32)
        where = torch.where(x > 0, rms, 2.0 * y)
        return (F.softmax(where, -1), rms.var(-1), rms.amax(-1), expanded, low,
                F.log_softmax(c, 0), rms.sum())


def _left_to_pytorch():
    """Two ops the importer leaves to PyTorch (cos and sin when the HF LLaMA
    bug was found; grove takes those now), so that a graph splits."""
    from grove import door_fuzz

    ops = door_fuzz.splitters()
    assert len(ops) >= 2, "the tests of split graphs need two ops grove does not take"
    return ops[0][1], ops[1][1]


def _rows_viewed(x, rows):
    """A graph with a symbolic size: x viewed as `rows` rows (the size dynamo
    passes as an argument)."""
    return torch.tanh(x.view(rows, -1)) * 2


def trace(module, *inputs):
    with torch.no_grad():
        return make_fx(module)(*inputs)


def close(test, actual, expected, rtol=RTOL, atol=ATOL):
    for index, (a, b) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: "output %d: %s"
                                   % (index, m))


class ImporterTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(20260601)

    def run_both(self, module, inputs, calls=4):
        """Runs the imported graph eagerly and as graphs; returns both results."""
        graph = trace(module, *inputs)
        plan = importer.import_graph(graph, inputs)
        results = {}
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend)
            for _ in range(calls):
                results[backend] = [t.clone() for t in _as_list(runner(*inputs))]
        return plan, results

    def test_mlp_matches_torch_and_graphs_equal_eager_bitwise(self):
        module = Mlp().eval()
        x = torch.randn(4, 32)
        plan, results = self.run_both(module, [x])
        self.assertEqual(plan.unsupported, [])
        self.assertEqual(len(plan.programs()), 1)
        ops = [node["op"] for node in plan.programs()[0]["nodes"]]
        self.assertEqual(ops.count("linear"), 3, "addmm(b, x, t(w)) becomes one linear")
        self.assertNotIn("matmul", ops)
        with torch.no_grad():
            expected = [module(x)]
        close(self, results["eager"], expected)
        for a, b in zip(results["cudagraphs"], results["eager"]):
            self.assertTrue(torch.equal(a, b))

    def test_addmm_of_an_untransposed_weight_is_one_linear(self):
        """Note [Bias epilogues of addmm]: GPT-2's Conv1D, addmm(b, x, w) with
        w stored [in, out], becomes linear(x, t(w), b): one GEMM whose
        epilogue adds the bias, no add kernel."""
        class Conv1D(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(24, 40) * 0.2)
                self.bias = nn.Parameter(torch.randn(40))

            def forward(self, x):
                flat = torch.addmm(self.bias, x.view(-1, 24), self.weight)
                return torch.relu(flat.view(x.shape[0], x.shape[1], 40))

        module = Conv1D().eval()
        x = torch.randn(3, 5, 24)
        plan, results = self.run_both(module, [x])
        self.assertEqual(plan.unsupported, [])
        ops = [node["op"] for node in plan.programs()[0]["nodes"]]
        self.assertEqual(ops.count("linear"), 1, ops)
        self.assertNotIn("matmul", ops)
        self.assertNotIn("add", ops)
        with torch.no_grad():
            expected = [module(x)]
        close(self, results["eager"], expected)
        for a, b in zip(results["cudagraphs"], results["eager"]):
            self.assertTrue(torch.equal(a, b))

    def test_transformer_block_matches_torch(self):
        module = Block().eval()
        tokens = torch.randint(0, 50, (2, 8))
        plan, results = self.run_both(module, [tokens])
        self.assertEqual(plan.unsupported, [])
        with torch.no_grad():
            expected = [module(tokens)]
        close(self, results["eager"], expected)
        for a, b in zip(results["cudagraphs"], results["eager"]):
            self.assertTrue(torch.equal(a, b))

    def test_many_ops_match_torch(self):
        module = ManyOps().eval()
        x, y = torch.randn(4, 8), torch.randn(4, 8)
        plan, results = self.run_both(module, [x, y], calls=2)
        self.assertEqual(plan.unsupported, [], plan.unsupported)
        with torch.no_grad():
            expected = list(module(x, y))
        low = 4
        close(self, results["eager"][:low], expected[:low])
        close(self, results["eager"][low:low + 1], expected[low:low + 1], rtol=2 ** -7, atol=1e-5)
        close(self, results["eager"][low + 1:], expected[low + 1:])

    def test_a_constant_output_is_a_new_tensor_at_every_call(self):
        # Note [Constant outputs are handed out fresh] (runner.py): the folded
        # zeros came back as one tensor, and a caller's write reached later calls.
        def with_state(x):
            return x * 2, torch.zeros(3) + 1

        left, _ = _left_to_pytorch()

        def split(x):  # the same through the runner's step-by-step path
            return left(x * 2), torch.zeros(3) + 1

        x = torch.randn(3)
        for function in (with_state, split):
            plan = importer.import_graph(make_fx(function)(x), [x])
            for backend in ("eager", "cudagraphs"):
                runner = plan.compile(backend=backend, device="sim")
                _, state = runner(x)
                state.add_(100)
                _, again = runner(x)
                self.assertTrue(torch.equal(again, torch.ones(3)), (function.__name__, backend))
        # An attribute the graph returns is not a folded value: it is the
        # attribute itself at every call, as PyTorch returns it.
        weight = torch.randn(3)
        graph = make_fx(lambda x: (x * 2, weight))(x)
        [attribute] = [node for node in graph.graph.nodes if node.op == "get_attr"]
        plan = importer.import_graph(graph, [x])
        for backend in ("eager", "cudagraphs"):
            returned = plan.compile(backend=backend, device="sim")(x)[1]
            self.assertIs(returned, getattr(graph, attribute.target), backend)

    def test_random_draws_are_drawn_at_every_call(self):
        # Note [Random draws are never constants] (importer.py): depending on
        # no input, torch.rand was folded, and every call added the import
        # run's numbers.
        def noisy(x):
            noise = torch.empty(3, 4).uniform_(-1, 1)  # in place, on a fresh buffer
            return x + torch.rand(3, 4) + noise, torch.randn(3, 4).abs().sum() * 0 + x.sum()

        x = torch.zeros(3, 4)
        graph = make_fx(noisy)(x)
        plan = importer.import_graph(graph, [x])
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend, device="sim")
            first, second = [runner(x)[0].clone() for _ in range(2)]
            self.assertFalse(torch.equal(first, second), backend)
            self.assertTrue(bool(((first > -1) & (first < 2)).all()), backend)
        # A draw seeded the same way gives PyTorch's numbers.
        torch.manual_seed(7)
        grove_result = plan.compile(backend="eager", device="sim")(x)[0]
        torch.manual_seed(7)
        torch.testing.assert_close(grove_result, noisy(x)[0])

    def test_a_random_draw_nobody_reads_is_left_out(self):
        # Note [Random draws nobody reads] (importer.py): HF wav2vec2's
        # LayerDrop draw before every layer, read only when training, split
        # the graph at each draw in eval.
        def layers(x):
            for _ in range(3):
                torch.rand([])  # the draw LayerDrop reads only in training
                x = torch.tanh(x * 2 + 1)
            return x

        x = torch.randn(3, 4)
        plan = importer.import_graph(make_fx(layers)(x), [x])
        self.assertEqual(plan.unsupported, [])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])
        result = plan.compile(backend="eager", device="sim")(x)
        if isinstance(result, (tuple, list)):
            (result,) = result
        torch.testing.assert_close(result, layers(x))

    def test_host_tensors_among_device_params(self):
        # Note [Host tensors among a device graph's params] (importer.py). The
        # graph's inputs on the meta device stand for a GPU's: the host tensors
        # are the ones the trace lifted.
        def scaled(x):
            return x * torch.tensor(0.5) + 1

        graph = make_fx(scaled)(torch.randn(3))
        [lifted] = [n for n in graph.graph.nodes if n.op == "get_attr"]
        self.assertTrue(str(lifted.target).startswith("_tensor_constant"))
        plan = importer.import_graph(graph, [torch.randn(3, device="meta")])
        self.assertEqual(plan.unsupported, [])
        [(kind, segment)] = plan.steps
        [(name, (bound, node))] = segment.params.items()
        self.assertEqual(bound.device.type, "meta")  # a copy on the graph's device
        self.assertIsNone(node)  # owned by the importer, not the caller's to check
        # A host tensor the trace did not lift (a buffer left on the host)
        # stays the caller's: its readers run in PyTorch.
        graph = make_fx(scaled)(torch.randn(3))
        [lifted] = [n for n in graph.graph.nodes if n.op == "get_attr"]
        graph.kept_buffer = torch.tensor(0.5)
        lifted.target = "kept_buffer"
        graph.recompile()
        plan = importer.import_graph(graph, [torch.randn(3, device="meta")])
        self.assertTrue(plan.unsupported)
        self.assertTrue(all("in a graph on meta" in reason
                            for _, _, reason in plan.unsupported), plan.unsupported)
        # On the host (sim), the same graph binds the caller's tensor as before.
        graph = make_fx(scaled)(torch.randn(3))
        x = torch.randn(3)
        plan = importer.import_graph(graph, [x])
        self.assertEqual(plan.unsupported, [])
        self.assertTrue(torch.equal(plan.compile(backend="eager", device="sim")(x),
                                    scaled(x)))

    def test_unsupported_op_splits_the_graph_and_matches_torch(self):
        class WithCumprod(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(16, 16)
                self.b = nn.Linear(16, 16)

            def forward(self, x):
                return self.b(torch.cumprod(torch.relu(self.a(x)), dim=-1))

        module = WithCumprod().eval()
        x = torch.randn(3, 16)
        with self.assertLogs("grove", level="INFO") as logs:
            plan = importer.import_graph(trace(module, x), [x])
        self.assertIn("aten.cumprod", "\n".join(logs.output))
        self.assertEqual([op for _, op, _ in plan.unsupported], ["aten.cumprod"])
        kinds = [kind for kind, _ in plan.steps]
        self.assertEqual(kinds, ["grove", "torch", "grove"])
        with torch.no_grad():
            expected = module(x)
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend)
            for _ in range(3):
                (result,) = _as_list(runner(x))
            torch.testing.assert_close(result, expected, rtol=RTOL, atol=ATOL)

    def test_split_graph_segments_share_one_generation(self):
        # The rotary pattern of HF LLaMA: an output of the first segment
        # (the embedding) is read by the last one, with ops PyTorch runs and
        # another segment between. Outputs stay uncopied (PyTorch >= 2.1's
        # default through the door). Before Note [Invocations of several
        # models], each segment started a generation: the last one reclaimed
        # the embedding's pool memory while reading it (on cuda: wrong
        # logits on every call; here StaleOutputError).
        torch.manual_seed(0)

        first_left, second_left = _left_to_pytorch()

        def function(ids, table, inv_freq, weight):
            embedded = F.embedding(ids, table)
            angles = inv_freq[:, None] * ids[0, None, :].float()
            cos = first_left(angles)  # HF: cos and sin, which PyTorch ran then
            scaled = cos * 2.0
            sin = second_left(angles)
            hidden = torch.relu(embedded @ weight) + embedded
            return hidden[..., :8] * scaled.t()[None] + sin.t()[None] + hidden[..., 8:16]

        args = [torch.randint(0, 100, (1, 32)), torch.randn(100, 64), torch.randn(8),
                torch.randn(64, 64)]
        expected = function(*args)
        plan = importer.import_graph(trace(function, *args), args, static_inputs=[1, 2, 3])
        self.assertEqual([kind for kind, _ in plan.steps],
                         ["grove", "torch", "grove", "torch", "grove"])
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend, output_copies=lambda node: False)
            for call in range(4):
                result = runner(*args)
                torch.testing.assert_close(result, expected, rtol=RTOL, atol=ATOL,
                                           msg=lambda m: "%s call %d: %s" % (backend, call, m))
        self.assertGreater(runner.models()[0].stats()["tree"]["replays"], 0)

    def test_an_output_of_an_ended_generation_is_refused_as_an_input(self):
        # Note [Inputs in reclaimed pool memory]: two models called one after
        # the other without grove.invocation(): the first one's uncopied
        # output is stale once the second call starts a generation, and it
        # raises instead of being overwritten while it is read.
        program = {"name": "double", "inputs": [{"name": "x", "shape": [256], "dtype": "f32"}],
                   "nodes": [{"name": "y", "op": "add", "inputs": ["x", "x"]}],
                   "outputs": ["y"]}
        first = grove.compile(program, backend="cudagraphs", copy_outputs=[False])
        second = grove.compile(dict(program, name="again"), backend="cudagraphs",
                               copy_outputs=[False])
        x = torch.randn(256)
        (h,) = first(x)
        with self.assertRaisesRegex(grove.StaleOutputError, "grove.invocation"):
            second(h)
        with grove.invocation():
            (h,) = first(x)
            (y,) = second(h)
        torch.testing.assert_close(y, 4 * x)

    def test_importing_a_graph_that_updates_an_input_in_place_leaves_it_alone(self):
        # Note [The import run leaves the inputs alone]: HF's static KV cache
        # advances a position counter (add_) and writes the cache
        # (index_copy_) inside the compiled forward. Before the fix the
        # import run advanced the caller's counter once more: every later
        # call computed with a counter one ahead (wrong tokens, both modes).
        def function(x, counter, cache, position):
            counter.add_(1)
            cache.index_copy_(0, position, x[None] * counter)
            return cache.sum(0) + x * counter

        x = torch.randn(8)
        for backend in ("eager", "cudagraphs"):
            counter, cache = torch.zeros(1), torch.zeros(4, 8)
            position = torch.tensor([0])
            graph = trace(function, x, counter.clone(), cache.clone(), position)
            plan = importer.import_graph(graph, [x, counter, cache, position],
                                         static_inputs=[1, 2], name="decode_like")
            self.assertEqual(counter.item(), 0.0, "the import changed the caller's counter")
            self.assertEqual(cache.abs().sum().item(), 0.0, "the import wrote the caller's cache")
            runner = plan.compile(backend=backend, output_copies=lambda node: False,
                                  verify=True)
            expected_counter, expected_cache = torch.zeros(1), torch.zeros(4, 8)
            for step in range(4):
                position = torch.tensor([step])
                expected = function(x, expected_counter, expected_cache, position)
                result = runner(x, counter, cache, position)
                torch.testing.assert_close(result, expected, rtol=RTOL, atol=ATOL,
                                           msg=lambda m: "%s step %d: %s" % (backend, step, m))
                self.assertEqual(counter.item(), step + 1.0)
                torch.testing.assert_close(cache, expected_cache)

    def test_the_import_run_leaves_the_random_state_alone(self):
        # Note [The import run leaves the inputs alone]: a dropout mask drawn
        # in PyTorch between segments. Before the fix the import run drew one
        # mask and the first call the next: not eager's mask under the same
        # seed (dropout_training_test on PyTorch 2.11, which imports lazily).
        def function(x):
            mask = torch.empty_like(x).bernoulli_(0.5)
            return torch.relu(x * 2) * mask

        x = torch.randn(16, 16)
        graph = trace(function, x)
        for backend in ("eager", "cudagraphs"):
            torch.manual_seed(7)
            expected = function(x)
            torch.manual_seed(7)
            runner = importer.import_graph(graph, [x]).compile(backend=backend)
            self.assertIn("aten.bernoulli_", [op for _, op, _ in runner.unsupported])
            torch.testing.assert_close(runner(x), expected, msg=backend)

    def test_the_import_run_follows_the_traced_strides(self):
        # Note [The import run follows the traced strides]: the graph was
        # traced with a channels-last convolution result (what PyTorch 2.x's
        # meta function says for a channels-last input), so its view of the
        # transposed [B, H*W, C] tokens is valid there; the CPU kernel here
        # returns NCHW, on which that view fails (SegFormer's Mix-FFN).
        aten = torch.ops.aten

        def function(x, w):
            y = aten.convolution.default(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
            tokens = aten.transpose.int(aten.view.default(y, [2, 8, 4]), 1, 2)
            return aten.relu.default(aten.view.default(tokens, [8, 8]))

        x, w = torch.randn(2, 3, 4, 4), torch.randn(8, 3, 3, 3)
        graph = torch.fx.symbolic_trace(function)
        convolution = next(n for n in graph.graph.nodes if n.target is aten.convolution.default)
        convolution.meta["val"] = torch.empty_strided((2, 8, 2, 2), (32, 1, 16, 8))
        with self.assertRaisesRegex(RuntimeError, "view size is not compatible"):
            function(x, w)  # the real kernel's layout
        expected = torch.relu(F.conv2d(x, w).permute(0, 2, 3, 1).reshape(8, 8))
        plan = importer.import_graph(graph, [x, w])
        self.assertEqual([op for _, op, _ in plan.unsupported], [])
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend)
            torch.testing.assert_close(runner(x, w), expected, rtol=RTOL, atol=ATOL, msg=backend)

    def test_the_import_run_follows_an_inputs_traced_strides(self):
        # The same for a graph input: AOTAutograd traced HF ConvNeXtV2's
        # backward with a channels-last gradient (tangents_1) and took a view
        # of its permute; autograd hands the backward a contiguous gradient,
        # on which the recorder's view failed (H200, PyTorch 2.11).
        aten = torch.ops.aten

        def backward(grad):
            return aten.relu.default(aten.view.default(aten.permute.default(grad, [0, 2, 3, 1]),
                                                       [8, 8]))

        grad = torch.randn(2, 8, 2, 2)
        graph = torch.fx.symbolic_trace(backward)
        tangent = next(n for n in graph.graph.nodes if n.op == "placeholder")
        tangent.meta["val"] = torch.empty_strided((2, 8, 2, 2), (32, 1, 16, 8))
        with self.assertRaisesRegex(RuntimeError, "view size is not compatible"):
            backward(grad)
        expected = torch.relu(grad.permute(0, 2, 3, 1).reshape(8, 8))
        plan = importer.import_graph(graph, [grad])
        self.assertEqual([op for _, op, _ in plan.unsupported], [])
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend)
            torch.testing.assert_close(runner(grad), expected, rtol=RTOL, atol=ATOL, msg=backend)

    def test_as_strided_in_pytorch_reads_the_traced_layout(self):
        # Note [Layouts a PyTorch step reads]: HF Longformer chunks a
        # [seq, batch, heads, dim] projection as overlapping windows with
        # strides read off the tensor, which PyTorch made a transposed alias
        # (reshape of two transposes is a view); the overlapping as_strided
        # runs in PyTorch, and grove's contiguous segment output read through
        # those strides gave other elements (6.6 off here; Longformer's
        # gradients 0.5-16 off on an H200).
        def chunks(x):
            y = (x * 2).transpose(0, 1).transpose(1, 2).reshape(6, 8, 2).view(6, 2, 4, 2)
            size, stride = list(y.size()), list(y.stride())
            size[1], stride[1] = 3, stride[1] // 2
            return y.as_strided(size, stride) + 1

        from grove import aten_layout_ops

        x = torch.randn(8, 2, 3, 2)
        # Past the gather's limit (here: any window) the step stays in PyTorch.
        limit, aten_layout_ops._MOST_GATHERED = aten_layout_ops._MOST_GATHERED, 0
        try:
            plan = importer.import_graph(trace(chunks, x), [x])
        finally:
            aten_layout_ops._MOST_GATHERED = limit
        self.assertEqual([op for _, op, _ in plan.unsupported], ["aten.as_strided"])
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend)
            for _ in range(3):
                x = torch.randn(8, 2, 3, 2)
                torch.testing.assert_close(runner(x), chunks(x), msg=backend)

    def test_a_pytorch_step_reads_an_expanded_layout(self):
        # Note [Layouts a PyTorch step reads]: the traced layout of a value
        # a step left to PyTorch reads may hold one element for many (an
        # expand's stride 0, HF's attention masks under dynamic shapes); the
        # copy laid out that way failed ("more than one element of the
        # written-to tensor refers to a single memory location").
        def expanded(x):
            y = (x * 2)[:, None].expand(4, 3, 5)
            return y.as_strided(y.size(), y.stride()) + 1, y.as_strided((4, 2, 5), (5, 0, 1)) * 3

        from grove import aten_layout_ops

        x = torch.randn(4, 5)
        limit, aten_layout_ops._MOST_GATHERED = aten_layout_ops._MOST_GATHERED, 0
        try:
            plan = importer.import_graph(trace(expanded, x), [x])
        finally:
            aten_layout_ops._MOST_GATHERED = limit
        self.assertEqual([op for _, op, _ in plan.unsupported], ["aten.as_strided"] * 2)
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend)
            for _ in range(3):
                x = torch.randn(4, 5)
                for got, want in zip(runner(x), expanded(x)):
                    torch.testing.assert_close(got, want, msg=backend)

    def test_as_strided_windows_over_the_operand_run_in_grove(self):
        # Note [Strided windows over a value's own elements] (fx_common.py):
        # Longformer's overlapping chunks of a transposed projection, a
        # column-major read and a window at an explicit offset into an
        # intermediate are gathers by constant ids, nothing left to PyTorch.
        def windows(x):
            y = (x * 2).transpose(0, 1).transpose(1, 2).reshape(6, 8, 2).view(6, 2, 4, 2)
            size, stride = list(y.size()), list(y.stride())
            size[1], stride[1] = 3, stride[1] // 2
            z = (x - 1).reshape(16, 6)
            return (y.as_strided(size, stride) + 1, z.as_strided((6, 16), (1, 6)) * 3,
                    z.as_strided((4, 5), (7, 2), 3).exp())

        x = torch.randn(8, 2, 3, 2)
        plan = importer.import_graph(trace(windows, x), [x])
        self.assertEqual(plan.unsupported, [])
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend)
            for _ in range(3):
                x = torch.randn(8, 2, 3, 2)
                for got, expected in zip(runner(x), windows(x)):
                    torch.testing.assert_close(got, expected, msg=backend)

    def test_the_gradient_of_strided_windows_imports_whole(self):
        # The backward of overlapping as_strided windows (autograd's: an
        # index_add_ over as_strided ids, and an is_same_size query nobody
        # reads) runs in grove and equals autograd's gradient.
        def windows(t):
            y = (t * 2).transpose(0, 1).reshape(6, 4)
            return y.as_strided((5, 3), (2, 1)) * 3

        def gradient(t, g):
            t = t.detach().requires_grad_()
            return torch.autograd.grad(windows(t), t, g)

        t, g = torch.randn(4, 6), torch.randn(5, 3)
        plan = importer.import_graph(make_fx(gradient)(t, g), [t, g])
        self.assertEqual(plan.unsupported, [])
        runner = plan.compile(backend="cudagraphs")
        for _ in range(3):
            t, g = torch.randn(4, 6), torch.randn(5, 3)
            torch.testing.assert_close(_as_list(runner(t, g))[0], gradient(t, g)[0])

    def test_as_strided_past_a_grove_value_is_refused(self):
        # Note [Layouts a PyTorch step reads]: the window reaches the slice's
        # neighbours in its base, memory grove's value of the slice does not
        # have: the import refuses (dynamo's graph then runs in PyTorch)
        # instead of reading other memory.
        def past_the_slice(x):
            y = (x * 2)[:, :3]
            return y.as_strided((4, 5), (6, 1)) + 1

        x = torch.randn(4, 6)
        with self.assertRaisesRegex(importer.StorageOutsideOperandError, "outside the elements"):
            importer.import_graph(trace(past_the_slice, x), [x])

    def test_a_custom_op_named_like_an_aten_op_runs_in_pytorch(self):
        # Note [Op names keep their namespace] (fx_common.py): a library's
        # own "add" (here: x + 2y) was imported as aten.add (x + y).
        library = torch.library.Library("grove_test_ns", "DEF")
        library.define("add(Tensor x, Tensor y) -> Tensor")
        library.impl("add", lambda x, y: x + 2 * y, "CompositeExplicitAutograd")
        try:
            def function(x, y):
                return torch.ops.grove_test_ns.add(x * 1.5, y) - 1

            x, y = torch.randn(3, 4), torch.randn(3, 4)
            plan = importer.import_graph(trace(function, x, y), [x, y])
            self.assertEqual([op for _, op, _ in plan.unsupported], ["grove_test_ns.add"])
            for backend in ("eager", "cudagraphs"):
                torch.testing.assert_close(plan.compile(backend=backend)(x, y), function(x, y),
                                           msg=backend)
        finally:
            del library

    def test_constants_made_without_inputs_are_folded_and_bound(self):
        def function(x):
            mask = torch.ones(4, 4).tril().bool()
            scale = torch.tensor(0.5)
            return torch.where(mask, x * scale, torch.zeros(4, 4)) + torch.arange(4.0)

        x = torch.randn(4, 4)
        plan = importer.import_graph(trace(function, x), [x])
        self.assertEqual(plan.unsupported, [])
        (program,) = plan.programs()
        self.assertGreaterEqual(len(program["params"]), 3, "mask, scale, zeros and arange")
        self.assertEqual(len(program["inputs"]), 1)
        torch.testing.assert_close(_as_list(plan.compile()(x))[0], function(x))

    def attention_graph(self, with_mask, causal):
        """An fx graph calling ATen's attention op itself (PyTorch 1.13's
        _scaled_dot_product_attention; 2.x traces to its flash, efficient or
        cudnn forms, which the same converter takes)."""
        graph = torch.fx.Graph()
        q, k, v = (graph.placeholder(name) for name in ("q", "k", "v"))
        mask = graph.placeholder("mask") if with_mask else None
        target = getattr(torch.ops.aten, "_scaled_dot_product_attention", None)
        if target is None:
            self.skipTest("this PyTorch has no aten._scaled_dot_product_attention")
        attention = graph.call_function(target.default, (q, k, v, mask, 0.0, False, causal))
        graph.output(graph.call_function(operator.getitem, (attention, 0)))
        return torch.fx.GraphModule(torch.nn.Module(), graph)

    def test_attention_causal_and_masked_matches_torch(self):
        q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
        mask = torch.rand(6, 6) > 0.3
        mask.fill_diagonal_(True)
        for with_mask, causal in ((False, True), (True, False), (False, False)):
            module = self.attention_graph(with_mask, causal)
            inputs = [q, k, v] + ([mask] if with_mask else [])
            plan = importer.import_graph(module, inputs)
            self.assertEqual(plan.unsupported, [])
            with torch.no_grad():
                expected = module(*inputs)
            for backend in ("eager", "cudagraphs"):
                runner = plan.compile(backend=backend)
                for _ in range(3):
                    result = runner(*inputs)
                torch.testing.assert_close(result, expected, rtol=RTOL, atol=ATOL,
                                           msg=lambda m: "mask=%s causal=%s %s: %s"
                                           % (with_mask, causal, backend, m))

    def test_strict_raises_naming_the_op(self):
        class InverseErf(nn.Module):
            def forward(self, x):
                return torch.erfinv(torch.tanh(x) * 0.5)

        module = nn.Sequential(nn.Linear(4, 4), InverseErf())
        x = torch.randn(2, 4)
        with self.assertRaisesRegex(importer.StrictModeError, "erfinv"):
            importer.import_graph(trace(module, x), [x], strict=True)

    def test_a_converter_that_fails_leaves_its_node_to_pytorch(self):
        # Note [A converter that fails leaves its node to PyTorch] (importer.py).
        from unittest import mock

        from grove.aten_ops import CONVERTERS

        def broken(c, a):
            c.emit("neg", [c.tensor(a["self"])])  # emitted, then rolled back
            raise ValueError("not enough values to unpack (expected 2, got 1)")

        module = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3))
        x = torch.randn(2, 4)
        with mock.patch.dict(CONVERTERS, {"aten.relu": broken}):
            plan = importer.import_graph(trace(module, x), [x])
            with self.assertRaisesRegex(importer.StrictModeError, "converter failed"):
                importer.import_graph(trace(module, x), [x], strict=True)
        [(_, op, reason)] = plan.unsupported
        self.assertEqual(op, "aten.relu")
        self.assertIn("ValueError: not enough values to unpack", reason)
        self.assertEqual([kind for kind, _ in plan.steps], ["grove", "torch", "grove"])
        for backend in ("eager", "cudagraphs"):
            torch.testing.assert_close(plan.compile(backend=backend, device="sim")(x),
                                       module(x))

    def test_params_are_bound_never_copied(self):
        module = Mlp(depth=1).eval()
        x = torch.randn(2, 32)
        plan = importer.import_graph(trace(module, x), [x])
        runner = plan.compile(backend="cudagraphs")
        (model,) = runner.models()
        params = plan.programs()[0]["params"]
        addresses = {model.state(p["name"]).data_ptr() for p in params}
        self.assertEqual(addresses, {module.layers[0].weight.data_ptr(),
                                     module.layers[0].bias.data_ptr()})
        for _ in range(3):
            runner(x)
        with torch.no_grad():
            module.layers[0].weight.mul_(0.5)  # in place: the replay reads the new values
            expected = module(x)
        torch.testing.assert_close(_as_list(runner(x))[0], expected, rtol=RTOL, atol=ATOL)

    def test_static_inputs_are_bound_and_a_moved_one_is_refused(self):
        def function(x, weight):
            return torch.tanh(x @ weight)

        x, weight = torch.randn(3, 5), torch.randn(5, 2)
        plan = importer.import_graph(trace(function, x, weight), [x, weight], static_inputs=[1])
        self.assertEqual(len(plan.programs()[0]["inputs"]), 1)
        runner = plan.compile()
        torch.testing.assert_close(_as_list(runner(x, weight))[0], function(x, weight))
        with self.assertRaisesRegex(RuntimeError, "static input .* moved"):
            runner(x, weight.clone())


def _rotary_split(seed=0):
    """The split pattern of HF LLaMA's rotary embedding (see
    test_split_graph_segments_share_one_generation): a function, its
    arguments (the last three static) and its make_fx graph."""
    torch.manual_seed(seed)
    first_left, second_left = _left_to_pytorch()

    def function(ids, table, inv_freq, weight):
        embedded = F.embedding(ids, table)
        angles = inv_freq[:, None] * ids[0, None, :].float()
        scaled = first_left(angles) * 2.0
        sin = second_left(angles)
        hidden = torch.relu(embedded @ weight) + embedded
        return hidden[..., :8] * scaled.t()[None] + sin.t()[None] + hidden[..., 8:16]

    args = [torch.randint(0, 100, (1, 32)), torch.randn(100, 64), torch.randn(8),
            torch.randn(64, 64)]
    return function, args, trace(function, *args)


class _FakeGenerationTracker:
    """Dynamo's generation counter (torch._dynamo.mutation_guard.
    GenerationTracker) as a test sets it, also where PyTorch has no dynamo."""
    generation = 41


class fake_dynamo_generation:
    """Replaces the tracker the backend reads for the block's duration."""

    def __enter__(self):
        from grove import dynamo_backend

        dynamo_backend._dynamo_invocation_key()  # finds dynamo's tracker, if any
        self.saved = dynamo_backend._GENERATION_TRACKER
        dynamo_backend._GENERATION_TRACKER = _FakeGenerationTracker
        return _FakeGenerationTracker

    def __exit__(self, *exc):
        from grove import dynamo_backend

        dynamo_backend._GENERATION_TRACKER = self.saved
        return False


class DynamoBackendTest(unittest.TestCase):
    def test_training_graphs_are_found_by_their_parameters(self):
        # Note [Training graphs per parameter set] (grove/dynamo_backend.py):
        # twelve layers of one class share a graph (a graph break per layer),
        # each with its own parameters. Each set compiles once (the limit was
        # 8: timm's Sequencer2D, 18 blocks, failed to train), and each call
        # reaches its own graph at once: one refusal by the graph that ran
        # last, not one per graph tried.
        from grove.dynamo_backend import TrainingGraphs
        from grove.runner import StaticInputMovedError

        layers = [nn.Parameter(torch.randn(3)) for _ in range(12)]
        tried = []

        def compiled_for(arguments):
            bound = arguments[1].data_ptr()

            def graph(x, weight):
                tried.append(bound)
                if weight.data_ptr() != bound:
                    raise StaticInputMovedError(1, "static input 1 moved")
                return x * weight

            return graph

        compiles = []

        def compile_again(arguments):
            compiles.append(arguments[1].data_ptr())
            return compiled_for(arguments)

        x = torch.randn(3)
        graphs = TrainingGraphs(compiled_for([x, layers[0]]), compile_again,
                                parameters=[1], example=[x, layers[0]])
        for step in range(3):
            for weight in layers:
                del tried[:]
                torch.testing.assert_close(graphs(x, weight), x * weight)
                if step:  # the last graph, then its own (a new set searches them all)
                    self.assertLessEqual(len(tried), 2, tried)
        self.assertEqual(compiles, [w.data_ptr() for w in layers[1:]])
        self.assertEqual(graphs.count, 12)
        graphs.MOST_PARAMETER_SETS = 12
        with self.assertRaisesRegex(StaticInputMovedError, "12 sets of parameters"):
            graphs(x, nn.Parameter(torch.randn(3)))
        # Parameters replaced at every call (each new one made while the old
        # one lives, so at another address; the old one freed before the
        # call) compile MOST_REPLACED times more, then the refusal says why.
        graphs.MOST_PARAMETER_SETS = 128
        current = nn.Parameter(torch.randn(3))
        with self.assertRaisesRegex(StaticInputMovedError, "replaced, not updated in place"):
            for _ in range(20):
                current = nn.Parameter(current.detach() + 1)
                graphs(x, current)
        self.assertEqual(len(compiles), 11 + graphs.MOST_REPLACED)

    def test_training_graphs_compiled_from_fake_tensors_seed_no_lookup(self):
        # Note [Training graphs per parameter set]: dynamo's DDP optimizer
        # compiles its pieces from fake tensors, which have no address
        # (PyTorch 2.11's data_ptr raises; 1.13's says 0): the graph enters
        # the lookup from its first real call's refusal instead.
        from torch._subclasses.fake_tensor import FakeTensorMode

        from grove.dynamo_backend import TrainingGraphs
        from grove.runner import StaticInputMovedError

        mode = FakeTensorMode()
        fake_x, fake_weight = mode.from_tensor(torch.randn(3)), mode.from_tensor(torch.randn(3))
        first_weight, other_weight = nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(3))

        def compiled_for(bound):
            def graph(x, weight):
                if weight is not bound:
                    raise StaticInputMovedError(1, "static input 1 moved")
                return x * weight
            return graph

        graphs = TrainingGraphs(compiled_for(first_weight),
                                lambda arguments: compiled_for(arguments[1]),
                                parameters=[1], example=[fake_x, fake_weight])
        self.assertEqual(graphs.by_parameters, {})
        x = torch.randn(3)
        for weight in (first_weight, other_weight, first_weight):
            torch.testing.assert_close(graphs(x, weight), x * weight)
        self.assertEqual(graphs.count, 2)

    def test_dynamo_calls_share_an_invocation_only_from_the_backend(self):
        # Note [Dynamo's generation names an invocation only for dynamo's
        # calls] (grove/dynamo_backend.py): dynamo advances its generation
        # when a compiled frame is entered, nowhere else, and PyTorch 2.x has
        # the number even without torch.compile. A graph called directly
        # ignores it: each call an invocation of its own, one warm-up, one
        # recording, then replays. The backend's graph runs the calls of one
        # generation as one invocation, where no call replays (each call goes
        # a node deeper, as the caller still holds the earlier outputs), and
        # records once when every call has a generation of its own. The outputs are kept in the tree's pool, as
        # PyTorch >= 2.1 gets them (Note [Kept outputs through DLPack]).
        def function(x, weight):
            return (x @ weight).relu()

        weight = nn.Parameter(torch.randn(8, 8), requires_grad=False)
        x = torch.randn(4, 8)
        calls = 6

        def graph(from_dynamo):
            plan = importer.import_graph(make_fx(function)(x, weight), [x, weight],
                                         static_inputs=[1])
            runner = plan.compile(backend="cudagraphs", output_copies=lambda node: False)
            return grove.torch.CompiledGraph(runner, from_dynamo=from_dynamo)

        def counts(compiled, tracker, advance):
            # Each call's output is alive at the next call, as a decode loop's
            # logits are. The tree is the thread's (other live graphs share
            # it): counted from after the first call, a warm-up.
            outputs = []
            for call in range(calls):
                if advance:
                    tracker.generation += 1
                with torch.no_grad():
                    outputs.append(compiled(x, weight))
                torch.testing.assert_close(outputs[-1], function(x, weight))
                if call == 0:
                    before = compiled.runner.models()[0].stats()["tree"]
            tree = compiled.runner.models()[0].stats()["tree"]
            return tree["recordings"] - before["recordings"], tree["replays"] - before["replays"]

        self.assertFalse(grove.torch.compile_graph(function, [x, weight]).from_dynamo)
        self.assertTrue(grove.torch.grove_backend(function, [x, weight]).from_dynamo)
        with fake_dynamo_generation() as tracker:
            self.assertEqual(counts(graph(from_dynamo=False), tracker, advance=False),
                             (1, calls - 2))
            self.assertEqual(counts(graph(from_dynamo=True), tracker, advance=True),
                             (1, calls - 2))
            self.assertEqual(counts(graph(from_dynamo=True), tracker, advance=False)[1], 0)

    def test_a_graph_reading_a_value_as_a_number_runs_in_pytorch(self):
        # Note [Graphs that read values as numbers run in PyTorch]: HF
        # Longformer's view by a size dynamo kept a 0-d tensor. The backend
        # leaves the graph to PyTorch, says why, and answers as PyTorch does.
        def function(x, length):
            return (x.view(2, int(length) // 4, 4) * 3).sum(1)

        x, length = torch.randn(2, 8), torch.tensor(8)
        with self.assertLogs("grove", level="WARNING") as logged:
            compiled = grove.torch.grove_backend(function, [x, length])
        self.assertIn("read a tensor's value as a Python number", "\n".join(logged.output))
        self.assertEqual([op for _, op, _ in compiled.unsupported], ["the whole graph"])
        self.assertIn(compiled, grove.torch.compiled_graphs())
        for _ in range(3):
            x = torch.randn(2, 8)
            torch.testing.assert_close(compiled(x, length), function(x, length))
        with self.assertRaisesRegex(RuntimeError, "_local_scalar_dense|value out of"):
            grove.torch.compile_graph(function, [x, length])  # not dynamo's: the error stands

    def test_out_of_memory_while_compiling_waits_for_the_first_call(self):
        # Note [Out of memory while compiling waits for the first call]
        # (grove/dynamo_backend.py): the trace runs out of memory at dynamo's
        # compile and at the first call; the first call raises PyTorch's
        # OutOfMemoryError itself and the second compiles and runs.
        from unittest import mock

        from grove import dynamo_backend, input_writes

        torch_oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError

        def function(x, w):
            return torch.relu(x @ w) + 1

        x, w = torch.randn(3, 4), torch.randn(4, 5)
        real = input_writes.aten_graph
        failures = [2]

        def short_of_memory(*args, **kwargs):
            if failures[0] > 0:
                failures[0] -= 1
                raise torch_oom("CUDA out of memory. Tried to allocate 1024.00 MiB")
            return real(*args, **kwargs)

        with mock.patch.object(input_writes, "aten_graph", short_of_memory):
            with self.assertLogs("grove", level="WARNING") as logged:
                compiled = grove.torch.grove_backend(function, [x, w])
            self.assertIn("compiles at its first call", "\n".join(logged.output))
            self.assertIsInstance(compiled, dynamo_backend.PerShapeGraph)
            with self.assertRaises(torch_oom):
                compiled(x, w)
            for _ in range(2):
                x = torch.randn(3, 4)
                torch.testing.assert_close(compiled(x, w), function(x, w))
            # Not dynamo's graph: the error stands.
            failures[0] = 1
            with self.assertRaises(torch_oom):
                grove.torch.compile_graph(function, [x, w])

    def test_a_graph_grove_cannot_compile_runs_in_pytorch(self):
        # Note [A graph grove's compiler refuses runs in PyTorch]
        # (grove/dynamo_backend.py): the importer took every op, but grove's
        # compiler refuses the program (a refusal made here by the compile
        # step itself, as the C API reports one).
        from unittest import mock

        from grove._capi import GroveError

        def function(x, w):
            return torch.softmax(x @ w, -1) * 2

        x, w = torch.randn(3, 4), torch.randn(4, 5)

        def refuse(self, *args, **kwargs):
            raise GroveError(3, "grove_compile: model 'torch_graph_0': a program it refuses")

        with mock.patch.object(importer.Plan, "compile", refuse):
            with self.assertLogs("grove", level="WARNING") as logged:
                compiled = grove.torch.grove_backend(function, [x, w])
            self.assertIn("grove's compiler refused it", "\n".join(logged.output))
            self.assertIn("a program it refuses", "\n".join(logged.output))
            self.assertEqual([op for _, op, _ in compiled.unsupported], ["the whole graph"])
            for _ in range(2):
                x = torch.randn(3, 4)
                torch.testing.assert_close(compiled(x, w), function(x, w))
            # Not dynamo's graph, or strict: the error stands.
            with self.assertRaisesRegex(GroveError, "a program it refuses"):
                grove.torch.compile_graph(function, [x, w])
            with self.assertRaisesRegex(GroveError, "a program it refuses"):
                grove.torch.grove_backend(function, [x, w], options={"strict": True})
        # Without the refusal the same graph compiles.
        self.assertEqual(grove.torch.grove_backend(function, [x, w]).unsupported, [])

    def test_a_host_scalar_read_as_a_number_is_compiled_per_value(self):
        # Note [Host scalars specialized per value] (grove/dynamo_backend.py):
        # dynamo's graph of a Python float under dynamic=True (a 0-d CPU
        # float64 tensor read back with .item()), and a 0-d size read the same way.
        from grove import dynamo_backend

        def scaled(x, scale, length):
            return (x.view(2, length.item() // 4, 4) * scale.item()).sum(1) + 1

        graph = torch.fx.symbolic_trace(scaled)
        x, length = torch.randn(2, 8), torch.tensor(8)
        for mode in ("eager", "cudagraphs"):
            compiled = grove.torch.grove_backend(
                graph, [x, torch.tensor(2.0, dtype=torch.float64), length],
                options={"mode": mode})
            self.assertIsInstance(compiled, dynamo_backend.PerShapeGraph)
            for value in (2.0, 3.0, 2.0, 0.5):
                scale = torch.tensor(value, dtype=torch.float64)
                x = torch.randn(2, 8)
                torch.testing.assert_close(compiled(x, scale, length), scaled(x, scale, length),
                                           msg="%s, scale %s" % (mode, value))
            self.assertEqual(len(compiled.compiled), 3)  # one per value, none in PyTorch
            for _, function in compiled.compiled.values():
                self.assertNotIsInstance(function, dynamo_backend.GraphInPyTorch)
                self.assertEqual([kind for kind, _ in function.runner.steps], ["grove"])
            with self.assertLogs("grove", level="WARNING") as logged:
                for value in range(10, 10 + dynamo_backend.MAX_SCALAR_VALUES):
                    scale = torch.tensor(float(value), dtype=torch.float64)
                    torch.testing.assert_close(compiled(x, scale, length),
                                               scaled(x, scale, length))
            self.assertIn("further values run it in PyTorch", "\n".join(logged.output))
            self.assertEqual(len(compiled.compiled), dynamo_backend.MAX_SCALAR_VALUES)

    def test_a_static_input_that_moves_is_demoted_once(self):
        # Note [Static inputs that move] (grove/dynamo_backend.py): a cache
        # made again at another address for every sequence (HF's generate),
        # written by each step. The first move compiles the graph once more
        # with the cache bound per call; twelve more moves compile nothing,
        # and every step's output and cache equal eager PyTorch's.
        def step(x, cache, position, weight):
            cache.index_copy_(0, position, x)
            return (cache @ weight).relu().sum(0)

        weight = nn.Parameter(torch.randn(8, 8), requires_grad=False)

        def new_cache():
            cache = torch.zeros(6, 8)
            cache._dynamo_static_input_type = "unguarded"  # mark_static_address's mark
            return cache

        generator = torch.Generator().manual_seed(33)
        cache = new_cache()
        examples = [torch.randn(1, 8, generator=generator), cache, torch.tensor([0]), weight]
        compiled = grove.torch.compile_graph(step, examples)
        self.assertEqual(list(compiled.unsupported), [])
        self.assertEqual(compiled.runner.static_positions, [1, 3])
        first_runner = None
        for sequence in range(14):
            cache = examples[1] if sequence == 0 else new_cache()
            expected_cache = torch.zeros(6, 8)
            for position in range(4):
                x = torch.randn(1, 8, generator=generator)
                index = torch.tensor([position])
                expected = step(x, expected_cache, index, weight)
                with torch.no_grad():
                    actual = compiled(x, cache, index, weight)
                message = "sequence %d position %d" % (sequence, position)
                torch.testing.assert_close(actual, expected, msg=message)
                torch.testing.assert_close(cache, expected_cache, msg=message + " (cache)")
            if sequence == 1:
                first_runner = compiled.runner
                after_demotion = compiled.runner.models()[0].stats()["tree"]
            # The move of sequence 1 compiled once more; none after it.
            self.assertEqual(compiled.rebuilds, 0 if sequence == 0 else 1, sequence)
        self.assertIs(compiled.runner, first_runner)
        self.assertEqual(compiled.demoted, {1})
        # Note [Patchable graphs for inputs that moved]: the rebuilt graph's
        # GEMM is grove's small-M kernel, asked for by its own compile option.
        lowered = compiled.runner.models()[0].stats()["programs"][0]["lowered"]
        self.assertIn("kernel small_m_gemm", lowered)
        self.assertNotIn("GROVE_SMALL_M_GEMM", os.environ)
        self.assertEqual(compiled.runner.static_positions, [3])
        tree = compiled.runner.models()[0].stats()["tree"]
        later = {key: tree[key] - after_demotion[key] for key in (
            "recordings", "static_input_writes", "copy_back_inputs", "eager_calls", "replays",
            "input_copies", "input_copy_backs", "input_patches")}
        # Twelve moves: no recording, the cache written as the caller's
        # tensor (a copy-back input of the tree, zero-copy on sim), never eager.
        self.assertEqual(later["recordings"], 0, tree)
        self.assertEqual(later["static_input_writes"], 0, tree)
        self.assertEqual(later["eager_calls"], 0, tree)
        self.assertEqual(later["replays"], 12 * 4, tree)
        self.assertEqual(tree["copy_back_inputs"], 1, tree)
        # Per step nothing is copied in or back: sim's graph is all grove
        # kernels, so the tree patches their arguments to read and write each
        # new cache where it lies (Note [Zero-copy inputs], rules 1-6). A CUDA
        # graph with library (cuBLAS) nodes is not patchable and copies instead.
        self.assertEqual(later["input_copies"], 0, tree)
        self.assertEqual(later["input_copy_backs"], 0, tree)
        self.assertGreaterEqual(later["input_patches"], 12, tree)  # one per new cache at least

    def test_a_split_call_that_meets_a_moved_input_has_written_nothing(self):
        # Note [Static inputs that move]: the call that meets the move runs
        # again on the demoted graph, so it must have written nothing before
        # it raised (the runner checks every bound input before any step):
        # a split graph that writes its state and binds the weight that
        # moved; the state is advanced once per call.
        def step(x, state, weight):
            state.add_(x.mean(0))
            h = torch.cumprod(state * 0.01 + 1.0, -1)
            return (h @ weight).relu()

        self.assertNotIn("aten.cumprod", importer.CONVERTERS)
        state = torch.randn(8)
        state._dynamo_static_input_type = "unguarded"  # mark_static_address's mark
        weight = nn.Parameter(torch.randn(8, 8), requires_grad=False)
        x = torch.randn(4, 8)
        compiled = grove.torch.compile_graph(step, [x, state, weight])
        self.assertEqual([kind for kind, _ in compiled.runner.steps],
                         ["grove", "torch", "grove"])
        expected_state = state.clone()
        for call in range(3):
            if call == 1:
                weight = nn.Parameter(torch.randn(8, 8), requires_grad=False)
            x = torch.randn(4, 8)
            expected = step(x, expected_state, weight)
            with torch.no_grad():
                torch.testing.assert_close(compiled(x, state, weight),
                                           expected, msg=str(call))
            torch.testing.assert_close(state, expected_state, msg="state after call %d" % call)
        self.assertEqual((compiled.rebuilds, compiled.demoted), (1, {2}))

    def test_a_moved_parameter_past_its_demotion_still_raises(self):
        # The demotion does not hide a move it cannot fix: a runner without
        # a rebuild (or with nothing left to demote) reports the move.
        def function(x, cache):
            return (x @ cache).relu()

        x = torch.randn(4, 8)
        first = nn.Parameter(torch.randn(8, 8), requires_grad=False)
        with torch.no_grad():
            compiled = grove.torch.compile_graph(make_fx(function)(x, first), [x, first])
            compiled.rebuild = None
            with self.assertRaisesRegex(grove.runner.StaticInputMovedError, "static input 1"):
                compiled(x, nn.Parameter(torch.randn(8, 8), requires_grad=False))
            torch.testing.assert_close(compiled(x, first), function(x, first))


class _Tampered:
    """A segment's model whose outputs (or other values) a test changes."""

    def __init__(self, model, change):
        self.model = model
        self.change = change

    def __call__(self, *inputs, stream=None):
        outputs = self.model(*inputs, stream=stream)
        self.change(inputs, outputs)
        return outputs


class VerifyTest(unittest.TestCase):
    """Note [Verify mode] (python/grove/verify.py)."""

    def runner(self, backend, tamper=None):
        function, args, graph = _rotary_split()
        plan = importer.import_graph(graph, args, static_inputs=[1, 2, 3])
        runner = plan.compile(backend=backend, output_copies=lambda node: False, verify=True)
        grove_steps = [step for kind, step in runner.steps if kind == "grove"]
        for index, change in (tamper or {}).items():
            grove_steps[index]["model"] = _Tampered(grove_steps[index]["model"], change)
        return runner, function, args

    def test_a_right_split_graph_passes_every_verified_phase(self):
        for backend in ("eager", "cudagraphs"):
            runner, function, args = self.runner(backend)
            for _ in range(5):
                torch.testing.assert_close(runner(*args), function(*args), rtol=RTOL, atol=ATOL)
            self.assertEqual(runner.verified_calls, 3)

    def test_grove_verify_calls_checks_later_replays_too(self):
        os.environ["GROVE_VERIFY_CALLS"] = "6"
        try:
            runner, function, args = self.runner("cudagraphs")
        finally:
            del os.environ["GROVE_VERIFY_CALLS"]
        calls = []

        def wrong_from_the_fourth_call(inputs, outputs):
            calls.append(1)
            if len(calls) >= 5:
                outputs[-1].mul_(1.5)

        grove_steps = [step for kind, step in runner.steps if kind == "grove"]
        grove_steps[-1]["model"] = _Tampered(grove_steps[-1]["model"], wrong_from_the_fourth_call)
        for _ in range(4):
            runner(*args)
        with self.assertRaisesRegex(grove.verify.VerifyError, "replay 3"):
            runner(*args)
        os.environ["GROVE_VERIFY_CALLS"] = "0"
        try:
            with self.assertRaisesRegex(ValueError, "GROVE_VERIFY_CALLS"):
                self.runner("eager")
        finally:
            del os.environ["GROVE_VERIFY_CALLS"]

    def test_a_divergence_names_the_segment_the_fx_node_and_the_error(self):
        def wrong(inputs, outputs):
            outputs[-1].mul_(1.5)

        runner, _, args = self.runner("cudagraphs", {-1: wrong})
        with self.assertRaises(grove.verify.VerifyError) as raised:
            runner(*args)
        message = str(raised.exception)
        self.assertIn("segment %d" % runner.segments[-1]["segment"].index, message)
        self.assertIn("warm-up", message)
        self.assertRegex(message, r"fx node '\w+' \(aten\.\w+")
        self.assertIn("relative to the largest magnitude", message)

    def test_a_segment_that_writes_over_an_input_or_an_earlier_value_is_named(self):
        def overwrite_input(inputs, outputs):
            inputs[0].mul_(3.0)

        runner, _, args = self.runner("cudagraphs", {-1: overwrite_input})
        with self.assertRaisesRegex(grove.verify.VerifyError, r"segment \d+ wrote over its input"):
            runner(*args)
        earlier = []

        def keep(inputs, outputs):
            earlier.extend(outputs)

        def overwrite_earlier(inputs, outputs):
            earlier[0].add_(5.0)

        runner, _, args = self.runner("cudagraphs", {0: keep, 1: overwrite_earlier})
        with self.assertRaisesRegex(grove.verify.VerifyError,
                                    "made by segment 0\\) changed after it was made, by the "
                                    "time segment 1 ran"):
            runner(*args)

    def test_an_output_that_cancels_to_rounding_noise_is_judged_by_the_values_around_it(self):
        # A gradient that cancels (HF RoBERTa's backward) is rounding noise
        # in both grove and PyTorch: an error at the dtype's rounding of the
        # segment's values passes; one above it still fails.
        def function(x, weight):
            product = x @ weight
            return product, product - product

        args = [torch.randn(8, 16), torch.randn(16, 16)]
        plan = importer.import_graph(trace(function, *args), args, static_inputs=[1])
        for noise, passes in ((1e-12, True), (1e-4, False)):
            runner = plan.compile(backend="cudagraphs", output_copies=lambda node: False,
                                  verify=True)
            grove_steps = [step for kind, step in runner.steps if kind == "grove"]
            self.assertEqual(len(grove_steps), 1)
            grove_steps[0]["model"] = _Tampered(
                grove_steps[0]["model"],
                lambda inputs, outputs, noise=noise: [output.add_(noise) for output in outputs])
            if passes:
                product, cancelled = runner(*args)
                self.assertLessEqual(cancelled.abs().max().item(), 2e-12)
            else:
                with self.assertRaisesRegex(grove.verify.VerifyError,
                                            "relative to the largest magnitude 0 "):
                    runner(*args)

    def test_grove_verify_compares_grove_compile_models_with_grove_eager(self):
        program = {"name": "tanh", "inputs": [{"name": "x", "shape": [64], "dtype": "f32"}],
                   "nodes": [{"name": "y", "op": "tanh", "inputs": ["x"]}], "outputs": ["y"]}
        os.environ["GROVE_VERIFY"] = "1"
        try:
            model = grove.compile(program, backend="cudagraphs")
        finally:
            del os.environ["GROVE_VERIFY"]
        x = torch.randn(64)
        for _ in range(4):
            torch.testing.assert_close(model(x)[0], torch.tanh(x), rtol=RTOL, atol=ATOL)
        self.assertIsNone(model._verify_twin, "verified: the eager twin is gone")
        model = grove.compile(program, backend="cudagraphs", verify=True)
        twin = model._verify_twin
        model._verify_twin = lambda *inputs, stream=None: [value + 1.0 for value in twin(
            *inputs, stream=stream)]
        with self.assertRaisesRegex(grove.verify.VerifyError,
                                    "model 'tanh' \\(cudagraphs, warm-up\\): output 0 differs "
                                    "from grove eager"):
            model(x)


class IssueModelsTest(unittest.TestCase):
    """The GPU test's models (tests/python/gpu_models.py) traced here on the
    CPU: each imports whole into one grove program and matches torch."""

    def test_issue_models_import_whole_and_match_torch(self):
        import gpu_models

        patched = not hasattr(F, "scaled_dot_product_attention")
        if patched:  # PyTorch 1.13 spells it with an underscore
            F.scaled_dot_product_attention = (
                lambda q, k, v, is_causal=False:
                F._scaled_dot_product_attention(q, k, v, None, 0.0, False, is_causal)[0])
        try:
            cases = [case for case in gpu_models.cases("cpu") if "b256" not in case[0]]
            encoder = gpu_models.nn.TransformerEncoder(
                gpu_models.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0,
                                                      activation="gelu", batch_first=True,
                                                      norm_first=True),
                2, enable_nested_tensor=False).eval()
            cases.append(("encoder_norm_first_gelu", encoder, (torch.randn(2, 8, 64),)))
            for name, module, inputs in cases:
                with self.subTest(model=name):
                    with torch.no_grad():
                        expected = module(*inputs)
                    plan = importer.import_graph(trace(module, *inputs), list(inputs))
                    self.assertEqual(plan.unsupported, [])
                    self.assertEqual([kind for kind, _ in plan.steps], ["grove"])
                    results = {}
                    for backend in ("eager", "cudagraphs"):
                        runner = plan.compile(backend=backend)
                        for _ in range(3):
                            results[backend] = _as_list(runner(*inputs))[0].clone()
                    torch.testing.assert_close(results["eager"], expected, rtol=RTOL, atol=ATOL)
                    self.assertTrue(torch.equal(results["eager"], results["cudagraphs"]))
        finally:
            if patched:
                del F.scaled_dot_product_attention


class _StubRunner:
    backend = "cudagraphs"
    written_positions = ()  # a graph that writes no input (GraphRunner's default)

    def __init__(self, host_positions):
        self.host_positions = host_positions

    def leave_checks_to_guards(self, positions):
        pass


class HostTensorsTest(unittest.TestCase):
    """Note [Host tensors passed to a device graph] (grove/dynamo_backend.py),
    the parts that run without a GPU."""

    def test_cpu_inputs_a_cuda_graph_neither_writes_nor_binds_are_moved(self):
        from grove import dynamo_backend

        def function(x, scale, counter, weight):
            counter.add_(1)
            return x * scale + weight.sum() + counter

        args = [torch.randn(3), torch.tensor(2.0), torch.tensor(0.0), torch.randn(2)]
        graph = make_fx(function)(*[value.clone() for value in args])
        positions = dynamo_backend._host_positions(graph.graph, args, [3], "cuda:0")
        self.assertEqual(positions, (0, 1))  # not the written counter, not the bound weight
        self.assertEqual(dynamo_backend._host_positions(graph.graph, args, [3], "sim"), ())

    def test_a_rebuild_keeps_the_first_builds_positions(self):
        # A rebuild is traced from arguments already moved to the device.
        from grove import dynamo_backend

        compiled = dynamo_backend.CompiledGraph(_StubRunner((1,)))
        compiled._use_runner(_StubRunner(()))
        self.assertEqual(compiled.runner.host_positions, (1,))


class TorchBackendTest(unittest.TestCase):
    def test_backend_function_compiles_an_fx_graph(self):
        module = Mlp().eval()
        gm = torch.fx.symbolic_trace(module)
        x = torch.randn(4, 32)
        for mode in ("eager", "cudagraphs"):
            compiled = grove.torch.grove_backend(gm, [x], options={"mode": mode})
            self.assertEqual(compiled.unsupported, [])
            for _ in range(3):
                result = compiled(x)
            with torch.no_grad():
                torch.testing.assert_close(result, module(x), rtol=RTOL, atol=ATOL)
        grove.torch.mark_step_begin()

    def test_parameter_inputs_are_bound_as_static_inputs(self):
        # Dynamo (PyTorch >= 2.5) lifts parameters to graph inputs; the backend
        # binds each nn.Parameter input instead of passing it per call.
        def function(x, weight, bias):
            return torch.relu(torch.nn.functional.linear(x, weight, bias))

        gm = torch.fx.symbolic_trace(function)
        weight = nn.Parameter(torch.randn(6, 4))
        bias = nn.Parameter(torch.randn(6))
        x = torch.randn(3, 4)
        with torch.no_grad():  # with gradients the graph is a training one (training_test.py)
            compiled = grove.torch.grove_backend(gm, [x, weight, bias], options={"mode": "eager"})
        (compiled_model,) = compiled.runner.models()
        program = importer.segment_program("check", compiled.runner.plan.steps[0][1])
        self.assertEqual(len(program["inputs"]), 1, "only x is passed per call")
        self.assertEqual(program["inputs"][0]["shape"], [3, 4])
        states = {compiled_model.state(entry["name"]).data_ptr() for entry in program["params"]}
        self.assertEqual(states, {weight.data_ptr(), bias.data_ptr()})
        with torch.no_grad():
            torch.testing.assert_close(compiled(x, weight, bias), function(x, weight, bias))

    def test_symbolic_sizes_compile_once_per_concrete_shape(self):
        # What dynamo hands a backend for dynamic shapes: sizes as extra
        # (non-tensor) inputs. Here plain ints stand in for its SymInts.
        function = _rows_viewed
        compiled = grove.torch.grove_backend(torch.fx.symbolic_trace(function),
                                             [torch.randn(4, 6), 4], options={"mode": "cudagraphs"})
        self.assertIsInstance(compiled, grove.torch.PerShapeGraph)
        for shape, rows in (((4, 6), 4), ((8, 3), 8), ((4, 6), 4), ((2, 5), 2)):
            x = torch.randn(*shape)
            for _ in range(3):
                result = compiled(x, rows)
            torch.testing.assert_close(result, function(x, rows))
        self.assertEqual(len(compiled.compiled), 3, "one compilation per concrete shape")
        # Note [Shape keys without Python per tensor]: the key holds strides
        # too: the same shape, transposed, is a compilation of its own.
        x = torch.randn(6, 4).t()
        torch.testing.assert_close(compiled(x.contiguous(), 4), function(x, 4))
        self.assertEqual(len(compiled.compiled), 3)
        for _ in range(3):
            torch.testing.assert_close(compiled(x, 4), function(x, 4))
        self.assertEqual(len(compiled.compiled), 4)

    def test_pytorchs_mark_step_begin_starts_groves_steps(self):
        # Note [PyTorch's mark_step_begin starts grove's steps too] (grove/torch.py).
        compiler = getattr(torch, "compiler", None)
        if getattr(compiler, "cudagraph_mark_step_begin", None) is None:
            self.skipTest("this PyTorch has no torch.compiler.cudagraph_mark_step_begin")
        from unittest import mock

        with mock.patch.object(grove.torch, "mark_step_begin") as groves:
            torch.compiler.cudagraph_mark_step_begin()
        groves.assert_called_once_with()
        self.assertTrue(torch.compiler.cudagraph_mark_step_begin.grove_follows)
        # Importing again wraps nothing twice.
        grove.torch._follow_pytorchs_mark_step_begin()
        with mock.patch.object(grove.torch, "mark_step_begin") as groves:
            torch.compiler.cudagraph_mark_step_begin()
        groves.assert_called_once_with()

    def test_many_shapes_warn_once(self):
        # Note [Many shapes compile many graphs] (grove/dynamo_backend.py).
        from grove import dynamo_backend

        function = _rows_viewed
        compiled = grove.torch.grove_backend(torch.fx.symbolic_trace(function),
                                             [torch.randn(2, 3), 2], options={"mode": "eager"})
        limit = dynamo_backend.SHAPES_WARNED_AT
        with self.assertLogs("grove", level="WARNING") as logged:
            for rows in range(1, limit + 4):
                x = torch.randn(rows, 3)
                torch.testing.assert_close(compiled(x, rows), function(x, rows))
        warnings = [line for line in logged.output if "input shapes" in line]
        self.assertEqual(len(warnings), 1, logged.output)
        self.assertIn("compiled for %d input shapes" % limit, warnings[0])
        self.assertIn("buckets", warnings[0])
        self.assertEqual(len(compiled.compiled), limit + 3)  # the answers stay grove's

    def test_unknown_options_are_named(self):
        gm = torch.fx.symbolic_trace(Mlp())
        with self.assertRaisesRegex(ValueError, "unknown option.*fast"):
            grove.torch.grove_backend(gm, [torch.randn(1, 32)], options={"fast": True})
        with self.assertRaisesRegex(ValueError, "mode='fastest'"):
            grove.torch.grove_backend(gm, [torch.randn(1, 32)], options={"mode": "fastest"})

    def test_dynamo_registration_follows_the_torch_build(self):
        has_dynamo = True
        try:
            import torch._dynamo  # noqa: F401
        except ImportError:
            has_dynamo = False
        self.assertEqual(grove.torch.registered, has_dynamo)


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


if __name__ == "__main__":
    junit_main.main()
