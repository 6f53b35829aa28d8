"""Training through grove on sim over torch CPU tensors (PyTorch 1.13 here:
functorch's aot_module partitions forward and backward; grove.training
compiles each). Tolerances: gradients and losses within rtol 1e-4, atol 1e-5
of torch's (grove computes in f32 with its own reduction order; the backward
ops are written out in grove ops, e.g. layer norm's from the saved mean and
rstd); "cudagraphs" equals "eager" bitwise."""
import copy
import math
import os
import sys
import threading
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpu_models  # noqa: E402
import grove  # noqa: E402
import grove.torch  # noqa: E402
import grove.training  # noqa: E402
from grove import importer  # noqa: E402
import junit_main  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
SEED = 20261124


class Mlp(nn.Module):
    def __init__(self, width=32, depth=3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for index, layer in enumerate(self.layers):
            x = layer(x)
            x = F.gelu(x, approximate="tanh") if index % 2 == 0 else torch.relu(x)
        return x


class GptBlock(nn.Module):
    """Embedding, pre-LN causal self-attention (written out), exact-GELU MLP,
    head and log_softmax."""

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
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(width // self.heads))
        mask = torch.tril(torch.ones(time, time)).bool()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).contiguous().view(batch, time, width)
        x = x + self.proj(y)
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return F.log_softmax(self.head(x), dim=-1)


class LlamaBlock(nn.Module):
    """RMSNorm, rotary embedding, causal attention (written out: PyTorch 1.13
    has no scaled_dot_product_attention), SiLU-gated MLP."""

    def __init__(self, width=32, heads=4, hidden=48, max_len=16):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.Parameter(torch.ones(width) + 0.1 * torch.randn(width))
        self.norm2 = nn.Parameter(torch.ones(width) + 0.1 * torch.randn(width))
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(width, width, bias=False)
                                              for _ in range(4))
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)
        head = width // heads
        inverse = 1.0 / (10000 ** (torch.arange(0, head, 2).float() / head))
        angles = torch.outer(torch.arange(max_len).float(), inverse)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    @staticmethod
    def rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    @staticmethod
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat([-x[..., half:], x[..., :half]], dim=-1)

    def forward(self, x):
        batch, time, width = x.shape
        h = self.rms(x, self.norm1)

        def split(t):
            return t.view(batch, time, self.heads, width // self.heads).transpose(1, 2)

        q, k, v = split(self.wq(h)), split(self.wk(h)), split(self.wv(h))
        cos, sin = self.cos[:time], self.sin[:time]
        q = q * cos + self.rotate_half(q) * sin
        k = k * cos + self.rotate_half(k) * sin
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(width // self.heads)
        causal = torch.ones(time, time).tril().bool()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, time, width)
        x = x + self.wo(y)
        h = self.rms(x, self.norm2)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def encoder_case():
    """PyTorch's own nn.TransformerEncoder (a model nobody here wrote)."""
    return gpu_models.transformer_encoder(width=32, heads=4, layers=2), \
        lambda: (torch.randn(2, 8, 32),)


def mlp_case():
    return Mlp(), lambda: (torch.randn(4, 32),)


def audio_case():
    """A Whisper-like front end: 1-d convolutions (stride 2), GELU, then a linear."""
    module = nn.Sequential(nn.Conv1d(4, 8, 3, padding=1), nn.GELU(),
                           nn.Conv1d(8, 8, 3, stride=2, padding=1), nn.GELU(), nn.Flatten(),
                           nn.Linear(8 * 6, 5))
    return module, lambda: (torch.randn(2, 4, 12),)


def group_norm_case():
    """Convolutions with group norm and the activations of session 25's
    converters (a GroupNorm ResNet's or a UNet's block, MobileNetV3's
    Hardswish, YOLO's LeakyReLU)."""
    module = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.SiLU(),
                           nn.Conv2d(8, 8, 3), nn.GroupNorm(2, 8), nn.Hardswish(),
                           nn.LeakyReLU(0.1), nn.Flatten(), nn.Linear(8 * 4 * 4, 5), nn.Mish())
    return module, lambda: (torch.randn(2, 3, 6, 6),)


def gpt_case():
    return GptBlock(), lambda: (torch.randint(0, 50, (2, 8)),)


def llama_case():
    return LlamaBlock(), lambda: (torch.randn(2, 8, 32),)


def loss_of(output):
    """A loss that weighs every output element differently (so a gradient
    routed to the wrong element shows)."""
    weights = torch.linspace(-1.0, 1.0, output.numel()).view(output.shape)
    return (output * weights).sum() + output.pow(2).mean()


def grads(module):
    return [p.grad.clone() for p in module.parameters()]


def assert_close_all(test, actual, expected, what):
    test.assertEqual(len(actual), len(expected))
    for index, (a, b) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL,
                                   msg=lambda m: "%s %d (seed %d): %s" % (what, index, SEED, m))


def assert_equal_all(test, actual, expected, what):
    for index, (a, b) in enumerate(zip(actual, expected)):
        test.assertTrue(torch.equal(a, b), "%s %d differs between cudagraphs and eager (seed %d)"
                        % (what, index, SEED))


def whole_in_grove(test, trained):
    for runner in trained.compiler.runners():
        test.assertEqual(runner.plan.unsupported, [], "ops left to PyTorch")
        # One grove program fed by the graph's inputs: the runner's fast path,
        # with passed-through inputs, saved constants and None gradients.
        test.assertIsNotNone(runner._fast, "%s takes the fast path" % runner.plan.name)


def record_backward_outputs(trained):
    """The data pointers of every output the compiled module's backward
    returns from now on (a list that fills as it runs)."""
    returned = []
    if trained.compiler.kept_backwards:  # Note [Saved values kept in grove]
        backward = trained.compiler.kept_backwards[0]
        call_model = backward.call_model

        def recording_kept(args, token):
            results = call_model(args, token)
            returned.extend(result.data_ptr() for result in results)
            return results

        backward.call_model = recording_kept
        return returned
    model = trained.compiler.backwards[0]._fast["model"]
    call = model.call_torch

    def recording(inputs, stream=None):
        results = call(inputs, stream)
        returned.extend(result.data_ptr() for result in results)
        return results

    model.call_torch = recording
    return returned


def backward_input_kinds(compiler):
    """How the tree binds each input of the compiler's backward graph, one
    letter each (s: static, m: an output of the forward, c: copied in), from
    the tree's DOT."""
    model = compiler.backwards[0].models()[0]
    program = model.stats()["programs"][0]["model"]
    for line in model.dot().splitlines():
        if 'label="%s:backward' % program in line:
            return line.split("\\ninputs ")[1].split('"')[0]
    raise AssertionError("no recorded backward graph named %s in the tree" % program)


class TrainingTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(SEED)

    def gradients_over_steps(self, case, steps=4, inputs_need_grad=False):
        """Gradients of `steps` steps (fresh inputs each) under torch, grove
        eager and grove cudagraphs, from the same initial parameters;
        inputs_need_grad: each step's inputs are new leaves that need a
        gradient, compared too."""
        module, make_inputs = case()
        inputs = [make_inputs() for _ in range(steps)]
        results = {}
        for mode in ("torch", "eager", "cudagraphs"):
            model = copy.deepcopy(module)
            trained = model if mode == "torch" else grove.training.compile_module(model, mode)
            results[mode] = []
            for x in inputs:
                model.zero_grad(set_to_none=True)
                if inputs_need_grad:
                    x = [value.clone().requires_grad_(True) for value in x]
                loss_of(trained(*x)).backward()
                results[mode].append(
                    grads(model) + ([value.grad.clone() for value in x] if inputs_need_grad
                                    else []))
            if mode != "torch":
                whole_in_grove(self, trained)
                results[mode + "_compiler"] = trained.compiler
        for step in range(steps):
            assert_close_all(self, results["eager"][step], results["torch"][step],
                             "step %d gradient" % step)
            assert_equal_all(self, results["cudagraphs"][step], results["eager"][step],
                             "step %d gradient" % step)
        stats = results["cudagraphs_compiler"].forwards[0].models()[0].stats()["tree"]
        self.assertGreater(stats["replays"], 0, "the step's graphs were replayed")
        self.assertEqual(stats["fallback_calls"], {})
        return results

    def test_mlp_gradients_match_torch_and_graphs_equal_eager_bitwise(self):
        self.gradients_over_steps(mlp_case)

    def test_transformer_block_gradients_match_torch(self):
        self.gradients_over_steps(gpt_case)

    def test_llama_style_block_gradients_match_torch(self):
        self.gradients_over_steps(llama_case)

    def test_transformer_encoder_gradients_match_torch(self):
        self.gradients_over_steps(encoder_case)

    def test_group_norm_convolution_gradients_match_torch(self):
        self.gradients_over_steps(group_norm_case)

    def test_one_dimensional_convolution_gradients_match_torch(self):
        self.gradients_over_steps(audio_case)

    def test_a_batch_that_needs_a_gradient_may_be_new_at_every_step(self):
        # Note [Saved parameters] (grove/training_steps.py): the batch is a
        # leaf that needs a gradient (an input-gradient or adversarial step),
        # new at every step. Its address was taken for a parameter's, the
        # backward bound the saved batch, and the second step raised
        # StaticInputMovedError.
        self.gradients_over_steps(mlp_case, inputs_need_grad=True)

    def test_the_backward_copies_only_the_loss_gradient_and_the_batch(self):
        """Note [Saved parameters] (grove/training_steps.py): the weights'
        transposes the forward saves (kept in grove as tokens) and the masks
        it folded are bound in the backward, never copied in. Before, the
        backward copied every transposed weight and mask at each replay (on
        CUDA, where a graph with cuBLAS nodes cannot read inputs in place:
        the 17 and 33 input copies per door step on an H100; the Mlp here
        had 4 copied inputs). The tree's own classification (its DOT) is
        checked, which zero-copy on sim hides from input_copies."""
        for case, name in ((mlp_case, "Mlp"), (gpt_case, "GptBlock")):
            results = self.gradients_over_steps(case, steps=3)
            compiler = results["cudagraphs_compiler"]
            kinds = backward_input_kinds(compiler)
            # The loss's gradient (from PyTorch) and the batch (tokens or x),
            # both the caller's tensors; everything else static or the
            # forward's outputs.
            self.assertEqual(kinds.count("c"), 2, "%s backward inputs %s" % (name, kinds))
            weights = sum(1 for p in compiler.forwards[0].plan.placeholders
                          if p.name.startswith("primals"))
            self.assertGreaterEqual(kinds.count("s"), 1, kinds)
            self.assertLess(kinds.count("s"), weights + 2, kinds)

    def test_forward_and_backward_are_the_trees_stages(self):
        results = self.gradients_over_steps(mlp_case, steps=3)
        tree = results["cudagraphs_compiler"].forwards[0].models()[0].stats()["tree"]
        modes = {}
        for function in tree["functions"]:  # the device's tree holds every test's functions
            for stage in ("forward", "backward"):
                if function["name"].startswith("Mlp_%s" % stage):
                    modes.setdefault(stage, set()).add(function["mode"])
        self.assertEqual(modes, {"forward": {"forward"}, "backward": {"backward"}})
        # The backward reads the forward's saved activations where they lie.
        self.assertGreater(tree["zero_copy_inputs"], 0)
        self.assertEqual(tree["input_copies"], 0)

    def test_backward_on_another_thread_replays_in_the_forwards_tree(self):
        """On CUDA, autograd runs the backward on its device thread, not the
        forward's (CPU tensors, as here, run it on the calling thread, so each
        backward below is called from a thread of its own). The backward must
        land in the forward's tree (Note [Trees of another thread],
        cudagraph_trees/tree_manager.h): then the forward ends its pending
        backward, leaves warm-up and replays. Without it the forward warmed up
        on every step and the backward recorded into a new tree each time."""
        module, make_inputs = mlp_case()
        batches = [make_inputs() for _ in range(6)]
        results = {}
        for mode in ("eager", "cudagraphs"):
            model = copy.deepcopy(module)
            trained = grove.training.compile_module(model, mode)
            results[mode] = []
            for step, x in enumerate(batches):
                if mode == "cudagraphs" and step == 3:
                    before = trained.compiler.forwards[0].models()[0].stats()["tree"]
                model.zero_grad(set_to_none=True)
                loss = loss_of(trained(*x))
                worker = threading.Thread(target=loss.backward)
                worker.start()
                worker.join()
                results[mode].append(grads(model))
        after = trained.compiler.forwards[0].models()[0].stats()["tree"]
        for step in range(len(batches)):
            assert_equal_all(self, results["cudagraphs"][step], results["eager"][step],
                             "gradient with the backward on another thread, step %d" % step)
        # Steps 4 to 6: forward and backward both replayed, nothing warmed up.
        self.assertEqual(after["replays"] - before["replays"], 6)
        self.assertEqual(after["warmups"] - before["warmups"], 0)
        self.assertEqual(after["recordings"] - before["recordings"], 0)

    def test_gradients_land_in_grad_without_a_copy_in_eager_mode(self):
        """Eager outputs are fresh grove memory: autograd keeps the backward's
        outputs as .grad itself."""
        module, make_inputs = mlp_case()
        trained = grove.training.compile_module(module, "eager")
        x = make_inputs()
        loss_of(trained(*x)).backward()
        returned = record_backward_outputs(trained)
        module.zero_grad(set_to_none=True)
        loss_of(trained(*x)).backward()
        self.assertEqual(sorted(p.grad.data_ptr() for p in module.parameters()), sorted(returned))

    def test_gradients_land_in_grad_without_a_copy_in_cudagraphs_mode(self):
        """Note [Gradients handed out of the pool]: replayed gradients become
        .grad uncopied; a .grad still held when the next step's forward
        replays over the pool gets its own copy first, with its values."""
        module, make_inputs = mlp_case()
        trained = grove.training.compile_module(module, "cudagraphs")
        batches = [make_inputs() for _ in range(5)]
        for x in batches[:3]:  # warm-up, recording, replay
            module.zero_grad(set_to_none=True)
            loss_of(trained(*x)).backward()
        returned = record_backward_outputs(trained)
        module.zero_grad(set_to_none=True)
        loss_of(trained(*batches[3])).backward()
        self.assertEqual(sorted(p.grad.data_ptr() for p in module.parameters()), sorted(returned))
        kept = [p.grad.clone() for p in module.parameters()]
        trained(*batches[4])  # the next step's forward, with the gradients still held
        for parameter, value in zip(module.parameters(), kept):
            self.assertNotIn(parameter.grad.data_ptr(), returned)
            self.assertTrue(torch.equal(parameter.grad, value))

    def test_gradient_accumulation_two_forwards_one_backward_each(self):
        module, make_inputs = mlp_case()
        batches = [make_inputs() for _ in range(8)]
        results = {}
        for mode in ("torch", "eager", "cudagraphs"):
            model = copy.deepcopy(module)
            trained = model if mode == "torch" else grove.training.compile_module(model, mode)
            results[mode] = []
            for first, second in zip(batches[::2], batches[1::2]):
                model.zero_grad(set_to_none=True)
                loss_of(trained(*first)).backward()
                loss_of(trained(*second)).backward()
                results[mode].append(grads(model))
        for step in range(4):
            assert_close_all(self, results["eager"][step], results["torch"][step],
                             "accumulated gradient, step %d" % step)
            assert_equal_all(self, results["cudagraphs"][step], results["eager"][step],
                             "accumulated gradient, step %d" % step)

    def test_micro_batches_keep_saved_activations(self):
        """Two forwards, then their two backwards: the second forward must not
        overwrite the first's saved activations (Note [Saved activations stay
        in the pool])."""
        module, make_inputs = gpt_case()
        batches = [make_inputs() for _ in range(8)]
        results = {}
        for mode in ("torch", "eager", "cudagraphs"):
            model = copy.deepcopy(module)
            trained = model if mode == "torch" else grove.training.compile_module(model, mode)
            results[mode] = []
            for first, second in zip(batches[::2], batches[1::2]):
                model.zero_grad(set_to_none=True)
                losses = [loss_of(trained(*first)), loss_of(trained(*second))]
                losses[1].backward()
                losses[0].backward()
                results[mode].append(grads(model))
        for step in range(4):
            assert_close_all(self, results["eager"][step], results["torch"][step],
                             "micro-batch gradient, step %d" % step)
            assert_equal_all(self, results["cudagraphs"][step], results["eager"][step],
                             "micro-batch gradient, step %d" % step)

    def test_no_grad_evaluation_between_steps(self):
        module, make_inputs = llama_case()
        evaluation = make_inputs()
        results = {}
        for mode in ("torch", "eager", "cudagraphs"):
            model = copy.deepcopy(module)
            trained = model if mode == "torch" else grove.training.compile_module(model, mode)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)  # larger diverges
            torch.manual_seed(SEED + 1)
            results[mode] = []
            for _ in range(4):
                loss = loss_of(trained(*make_inputs()))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                with torch.no_grad():
                    results[mode].append((loss.detach(), trained(*evaluation).clone()))
        for step in range(4):
            assert_close_all(self, results["eager"][step], results["torch"][step],
                             "loss and evaluation, step %d" % step)
            assert_equal_all(self, results["cudagraphs"][step], results["eager"][step],
                             "loss and evaluation, step %d" % step)

    def test_sgd_steps_reach_torch_losses(self):
        """Six steps of torch.optim.SGD (momentum) with the loss (cross
        entropy: log_softmax + nll_loss) inside the compiled module."""

        class WithLoss(nn.Module):
            def __init__(self):
                super().__init__()
                self.mlp = Mlp(width=16, depth=2)
                self.head = nn.Linear(16, 5)

            def forward(self, x, target):
                return F.cross_entropy(self.head(self.mlp(x)), target)

        module = WithLoss()
        batches = [(torch.randn(6, 16), torch.randint(0, 5, (6,)))] * 6  # one batch, fitted
        losses = {}
        for mode in ("torch", "eager", "cudagraphs"):
            model = copy.deepcopy(module)
            trained = model if mode == "torch" else grove.training.compile_module(model, mode)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            losses[mode] = []
            for x, target in batches:
                optimizer.zero_grad()
                loss = trained(x, target)
                loss.backward()
                optimizer.step()
                losses[mode].append(loss.detach())
            if mode != "torch":
                whole_in_grove(self, trained)
        assert_close_all(self, losses["eager"], losses["torch"], "loss")
        assert_equal_all(self, losses["cudagraphs"], losses["eager"], "loss")
        self.assertLess(losses["torch"][-1].item(), losses["torch"][0].item(), "SGD trains")

    def test_backward_after_a_replay_overwrote_its_activations_raises(self):
        module, make_inputs = mlp_case()
        trained = grove.training.compile_module(module, "cudagraphs")
        for _ in range(3):  # warm-up, recording, replay
            loss_of(trained(*make_inputs())).backward()
        stale = loss_of(trained(*make_inputs()))
        trained.mark_step_begin()
        loss_of(trained(*make_inputs()))  # replays the forward into the same memory
        with self.assertRaises(grove.StaleOutputError) as raised:
            stale.backward()
        message = str(raised.exception)
        self.assertIn("saved activation", message)
        self.assertIn("overwrote", message)
        self.assertIn("Mlp_backward", message)

    def test_gradients_outlive_the_compiled_module(self):
        """A .grad handed out of the pool stays readable after the compiled
        module is gone (its tree released the pool: the gradient was read from
        freed memory, a crash on sim)."""
        import gc

        module, make_inputs = mlp_case()
        batches = [make_inputs() for _ in range(4)]
        held = {}

        def train():  # a thread of its own: its own tree, released with the module
            trained = grove.training.compile_module(module, "cudagraphs")
            for x in batches:  # warm-up, recording, replays
                module.zero_grad(set_to_none=True)
                loss_of(trained(*x)).backward()
            held["expected"] = grads(module)

        worker = threading.Thread(target=train)
        worker.start()
        worker.join()
        gc.collect()
        expected = held["expected"]
        for parameter, value in zip(module.parameters(), expected):
            self.assertTrue(torch.equal(parameter.grad, value))

    def test_saved_activations_cross_as_one_token(self):
        """Note [Saved values kept in grove] (capi/kept_values.cc): the
        forward hands autograd one token instead of its saved activations and
        the backward reads them inside grove; the only tensors made from
        DLPack per step are the loss and the gradients. Gradients equal the
        per-tensor path's (GROVE_KEEP_SAVED=0) bitwise, in both modes."""
        from grove import outputs

        module, make_inputs = gpt_case()
        batches = [make_inputs() for _ in range(5)]
        made = []
        original = outputs._capsule_new  # every DLPack tensor grove hands out is one capsule

        def counting(pointer, name, destructor):
            made.append(pointer)
            return original(pointer, name, destructor)

        results = {}
        for keep in ("1", "0"):
            for mode in ("eager", "cudagraphs"):
                os.environ["GROVE_KEEP_SAVED"] = keep
                try:
                    model = copy.deepcopy(module)
                    trained = grove.training.compile_module(model, mode)
                    results[keep, mode] = []
                    for step, x in enumerate(batches):
                        model.zero_grad(set_to_none=True)
                        outputs._capsule_new = counting
                        del made[:]
                        try:
                            loss_of(trained(*x)).backward()
                        finally:
                            outputs._capsule_new = original
                        results[keep, mode].append(grads(model))
                        if keep == "1" and step == 4:
                            forward = trained.compiler.kept_forwards[0]
                            self.assertGreater(len(forward.kept_names), 5)
                            parameters = len(list(model.parameters()))
                            # the output, the token, one gradient per parameter
                            self.assertEqual(len(made), 2 + parameters)
                    self.assertEqual(bool(trained.compiler.kept_forwards), keep == "1")
                finally:
                    del os.environ["GROVE_KEEP_SAVED"]
        for step in range(len(batches)):
            assert_equal_all(self, results["1", "eager"][step], results["0", "eager"][step],
                             "eager gradient with kept activations, step %d" % step)
            # In cudagraphs mode the per-tensor backward binds the weights'
            # transposes it receives as their bases read through a permute
            # (Note [Saved parameters], training_steps.py), another GEMM
            # operand layout than the kept path's view: equal up to rounding.
            assert_close_all(self, results["1", "cudagraphs"][step],
                             results["0", "cudagraphs"][step],
                             "cudagraphs gradient with kept activations, step %d" % step)

    def test_a_token_that_is_not_a_live_kept_set_is_refused(self):
        import ctypes

        from grove import _capi

        first = ctypes.c_int64()
        not_a_token = torch.tensor([7], dtype=torch.int64)  # memory grove never kept
        status = _capi.library().grove_kept_check(ctypes.c_void_p(not_a_token.data_ptr()),
                                                  ctypes.byref(first))
        self.assertEqual(status, 1)
        self.assertIn("not a live kept set", _capi.library().grove_last_error().decode())

    def test_a_parameter_replaced_outside_the_step_is_named(self):
        module, make_inputs = mlp_case()
        trained = grove.training.compile_module(module, "eager")
        loss_of(trained(*make_inputs())).backward()
        x = make_inputs()
        with torch.no_grad():
            trained(*x)
        module.layers[1].bias.data = module.layers[1].bias.data + 1.0
        with self.assertRaises(RuntimeError) as raised:
            trained(*x)
        self.assertIn("parameter 'layers.1.bias' was replaced", str(raised.exception))
        # Evaluation compiles again for the moved parameter and sees its new values.
        with torch.no_grad():
            torch.testing.assert_close(trained(*x), module(*x), rtol=RTOL, atol=ATOL)


def stand_in_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                       scale=None):
    """What F.scaled_dot_product_attention computes (PyTorch 1.13 has none):
    the call write_out_attention replaces in a dynamo graph."""
    scores = query @ key.transpose(-2, -1) * (scale or query.shape[-1] ** -0.5)
    if is_causal:
        scores = scores + torch.full(scores.shape[-2:], float("-inf")).triu(1)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool \
            else scores + attn_mask
    return scores.softmax(-1) @ value


torch.fx.wrap("stand_in_attention")


def multi_head_call(*args, **kwargs):
    """A leaf for symbolic tracing; the test points its node at
    F.multi_head_attention_forward, as dynamo's graph holds it."""
    return F.multi_head_attention_forward(*args, **kwargs)


torch.fx.wrap("multi_head_call")


class AttentionTest(unittest.TestCase):
    def test_attention_is_written_out_and_trains_whole_in_grove(self):
        """Dynamo graphs call scaled_dot_product_attention, whose fused
        backward grove cannot take: write_out_attention rewrites the call
        (causal, with a bool mask, with a float mask and a scale), and the
        graph then trains whole in grove with torch's gradients."""
        from functorch.compile import aot_function

        mask = torch.rand(8, 8) > 0.3
        mask.fill_diagonal_(True)
        bias = torch.randn(8, 8)

        # The masks are graph inputs, as dynamo lifts the tensors a graph reads
        # (PyTorch 2.x's AOTAutograd traces with fake tensors, which a
        # closure's real tensor would meet).
        def attend(q, k, v, mask, bias):
            return (stand_in_attention(q, k, v, is_causal=True)
                    + stand_in_attention(q, k, v, mask)
                    + stand_in_attention(q, k, v, attn_mask=bias, scale=0.3))

        graph = torch.fx.symbolic_trace(attend)
        self.assertEqual(grove.training.write_out_attention(graph, {stand_in_attention}), 3)
        # PyTorch 2.x hands the compilers fake tensors: import on the first call.
        compiler = grove.training.StepCompiler("cudagraphs", name="attention",
                                               lazy=not torch.__version__.startswith("1."))
        trained = aot_function(graph, fw_compiler=compiler.forward,
                               bw_compiler=compiler.backward, partition_fn=compiler.partition)
        for _ in range(3):
            inputs = [torch.randn(2, 4, 8, 16, requires_grad=True) for _ in range(3)]
            expected_inputs = [t.detach().clone().requires_grad_() for t in inputs]
            weights = torch.randn(2, 4, 8, 16)
            (trained(*inputs, mask, bias) * weights).sum().backward()
            (attend(*expected_inputs, mask, bias) * weights).sum().backward()
            assert_close_all(self, [t.grad for t in inputs], [t.grad for t in expected_inputs],
                             "attention gradient")
        for runner in compiler.runners():
            self.assertEqual(runner.plan.unsupported, [])


    def test_multi_head_attention_kept_whole_by_dynamo_is_written_out_too(self):
        """Dynamo keeps nn.MultiheadAttention's call of
        multi_head_attention_forward whole (torchvision's ViT), which traces
        to the fused kernel inside it: write_out_attention runs it with its
        attention written out, and it trains whole in grove."""
        from functorch.compile import aot_function

        torch.manual_seed(SEED)
        attention = torch.nn.MultiheadAttention(16, 4)
        weights = [attention.in_proj_weight, attention.in_proj_bias,
                   attention.out_proj.weight, attention.out_proj.bias]

        def attend(x, in_weight, in_bias, out_weight, out_bias):
            return multi_head_call(x, x, x, 16, 4, in_weight, in_bias, None, None, False, 0.0,
                                   out_weight, out_bias, training=True, need_weights=False)[0]

        graph = torch.fx.symbolic_trace(attend)
        for node in graph.graph.nodes:
            if node.target is multi_head_call:
                node.target = F.multi_head_attention_forward
                node.meta.pop("is_wrapped", None)
        graph.recompile()
        self.assertEqual(grove.training.write_out_attention(graph), 1)
        compiler = grove.training.StepCompiler("cudagraphs", name="multi_head",
                                               lazy=not torch.__version__.startswith("1."))
        trained = aot_function(graph, fw_compiler=compiler.forward,
                               bw_compiler=compiler.backward, partition_fn=compiler.partition)
        for _ in range(3):
            x = torch.randn(6, 2, 16, requires_grad=True)
            expected_x = x.detach().clone().requires_grad_()
            grove_weights = [w.detach().clone().requires_grad_() for w in weights]
            expected_weights = [w.detach().clone().requires_grad_() for w in weights]
            scale = torch.randn(6, 2, 16)
            (trained(x, *grove_weights) * scale).sum().backward()
            (attend(expected_x, *expected_weights) * scale).sum().backward()
            assert_close_all(self, [x.grad] + [w.grad for w in grove_weights],
                             [expected_x.grad] + [w.grad for w in expected_weights],
                             "multi-head attention gradient")
        for runner in compiler.runners():
            self.assertEqual(runner.plan.unsupported, [])


class OptimizerTest(unittest.TestCase):
    """grove.torch.optim: grove's captured optimizer step over the same
    parameters reaches torch.optim's losses (rtol 1e-4, atol 1e-5), and its
    cudagraphs mode equals its eager mode bitwise."""

    def losses(self, make_optimizer, mode, steps=6, schedule=False, training="eager",
               named=False):
        """training: the module's grove mode; named: each forward runs under
        a named invocation of its own (as dynamo's graphs do)."""
        # An MLP fitting a target: a block with attention has gradients that
        # are zero up to rounding (a key bias), which AdamW's normalization
        # turns into full-size steps of either sign.
        torch.manual_seed(SEED)
        module, make_inputs = mlp_case()
        batches = [make_inputs() for _ in range(steps)]
        target = torch.randn(4, 32)
        model = copy.deepcopy(module)
        trained = grove.training.compile_module(model, training)
        optimizer = make_optimizer(model.parameters(), mode)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2, 0.5) if schedule else None
        losses = []
        for step, x in enumerate(batches):
            optimizer.zero_grad(set_to_none=True)
            if named:
                with grove.invocation(7000 + step):
                    out = trained(*x)
            else:
                out = trained(*x)
            loss = F.mse_loss(out, target)
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            losses.append(loss.detach())
        return torch.stack(losses), [p.detach().clone() for p in model.parameters()]

    def check(self, torch_optimizer, grove_optimizer, schedule=False):
        expected, expected_params = self.losses(lambda p, mode: torch_optimizer(p), "torch",
                                                schedule=schedule)
        eager, eager_params = self.losses(grove_optimizer, "eager", schedule=schedule)
        graphs, graphs_params = self.losses(grove_optimizer, "cudagraphs", schedule=schedule)
        torch.testing.assert_close(eager, expected, rtol=RTOL, atol=ATOL)
        assert_close_all(self, eager_params, expected_params, "parameter")
        self.assertTrue(torch.equal(graphs, eager), "cudagraphs losses differ from eager")
        assert_equal_all(self, graphs_params, eager_params, "parameter")

    def test_sgd_with_momentum_and_a_schedule_matches_torch(self):
        self.check(lambda p: torch.optim.SGD(p, lr=0.02, momentum=0.9, weight_decay=1e-3),
                   lambda p, mode: grove.torch.optim.SGD(p, lr=0.02, momentum=0.9,
                                                         weight_decay=1e-3, mode=mode),
                   schedule=True)

    def test_adamw_matches_torch(self):
        self.check(lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
                   lambda p, mode: grove.torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1,
                                                           mode=mode))

    def test_the_update_continues_a_step_whose_forward_ran_in_a_named_invocation(self):
        """Note [An optimizer step continues its training step]
        (cudagraph_trees/generations.h): the forward of a graph-captured
        module runs under a named invocation (the torch door's dynamo key),
        so it begins no step of its own and the generation follows
        invocations; grove's update, a call of its own after the backward,
        must still read the backward's gradients in the pool (before the fix:
        StaleOutputError, their memory reclaimed) and match torch.optim."""
        def adamw(p, mode):
            return grove.torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, mode=mode)

        expected, expected_params = self.losses(
            lambda p, mode: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1), "torch")
        got, got_params = self.losses(adamw, "cudagraphs", training="cudagraphs", named=True)
        torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)
        assert_close_all(self, got_params, expected_params, "parameter")

    def test_a_parameter_without_a_gradient_is_named(self):
        weight = nn.Parameter(torch.randn(3, 2))
        optimizer = grove.torch.optim.SGD([weight], lr=0.1)
        with self.assertRaises(RuntimeError) as raised:
            optimizer.step()
        self.assertIn("parameter 0 (shape (3, 2)) has no gradient", str(raised.exception))


class BackendTest(unittest.TestCase):
    def test_lazy_compilers_import_from_the_first_calls_arguments(self):
        """PyTorch 2.x hands the stage compilers fake tensors; the lazy
        StepCompiler (what the dynamo backend uses) imports each graph from
        its first real call, so here the compilers are given meta tensors."""
        from functorch.compile import aot_module

        torch.manual_seed(SEED)
        module, make_inputs = gpt_case()
        reference = copy.deepcopy(module)
        compiler = grove.training.StepCompiler("cudagraphs", lazy=True, name="lazy")

        def meta(compile_stage):
            return lambda gm, inputs: compile_stage(gm, [t.to("meta") for t in inputs])

        trained = aot_module(module, fw_compiler=meta(compiler.forward),
                             bw_compiler=meta(compiler.backward),
                             partition_fn=compiler.partition)
        for _ in range(3):
            x = make_inputs()
            module.zero_grad(set_to_none=True)
            reference.zero_grad(set_to_none=True)
            loss_of(trained(*x)).backward()
            loss_of(reference(*x)).backward()
            assert_close_all(self, grads(module), grads(reference), "gradient")
        self.assertEqual([len(compiler.forwards), len(compiler.backwards)], [1, 1])
        for runner in compiler.runners():
            self.assertEqual(runner.plan.unsupported, [])


    def test_a_graph_that_needs_gradients_takes_the_training_path(self):
        def function(x, weight):
            return torch.relu(F.linear(x, weight))

        gm = torch.fx.symbolic_trace(function)
        weight = nn.Parameter(torch.randn(6, 4))
        x = torch.randn(3, 4)
        if grove.torch.registered:  # PyTorch 2.x: AOTAutograd with grove's stage compilers
            compiled = grove.torch.grove_backend(gm, [x, weight], options={"mode": "eager"})
            out = compiled(x, weight)
            out.sum().backward()
            torch.testing.assert_close(weight.grad, (function(x, weight) > 0).float().t() @ x)
            return
        # PyTorch 1.13 has no AOTAutograd for dynamo: the graph runs in PyTorch
        # (its gradients intact), and strict names the way that trains.
        compiled = grove.torch.grove_backend(gm, [x, weight], options={"mode": "eager"})
        compiled(x, weight).sum().backward()
        self.assertIsNotNone(weight.grad)
        with self.assertRaises(importer.StrictModeError) as raised:
            grove.torch.grove_backend(gm, [x, weight], options={"strict": True})
        self.assertIn("grove.training.compile_module", str(raised.exception))


class AutocastStateTest(unittest.TestCase):
    """Note [One autocast state per training trace] (grove/training.py)."""

    def setUp(self):
        torch.manual_seed(SEED)
        self.module = Mlp()
        self.x = torch.randn(4, 32)

    def test_a_call_under_another_autocast_state_is_refused_and_the_module_stays_usable(self):
        trained = grove.training.compile_module(copy.deepcopy(self.module), "eager")
        expected = trained(self.x)  # traced outside autocast
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with self.assertRaisesRegex(RuntimeError, r"traced this module's training step "
                                        r"outside torch.autocast and is now called under "
                                        r"torch.autocast\(cpu: torch.bfloat16\)"):
                trained(self.x)
        again = trained(self.x)  # the old state still trains
        torch.testing.assert_close(again, expected)
        again.sum().backward()
        self.assertIsNotNone(trained.module.layers[0].weight.grad)

    def test_a_module_traced_under_autocast_is_refused_outside_it(self):
        trained = grove.training.compile_module(copy.deepcopy(self.module), "eager")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            self.assertEqual(trained(self.x).dtype, torch.bfloat16)
        with self.assertRaisesRegex(RuntimeError, "is now called outside torch.autocast"):
            trained(self.x)

    def test_evaluation_compiles_once_per_autocast_state(self):
        trained = grove.training.compile_module(copy.deepcopy(self.module), "eager")
        with torch.no_grad():
            plain = trained(self.x)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                cast = trained(self.x)
        self.assertEqual(plain.dtype, torch.float32)
        self.assertEqual(cast.dtype, torch.bfloat16)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            # bf16 rounding, another summation order: step_test.py's tolerance.
            torch.testing.assert_close(cast, self.module(self.x), rtol=2e-2, atol=2e-2)
        self.assertEqual(len(trained._inference), 2)


def _autograd_graph(function, *inputs):
    """make_fx of `function` and torch.autograd.grad of its scalar result with
    respect to every floating input: one graph holding forward and backward."""

    def joint(*args):
        leaves = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
        with torch.enable_grad():
            value = function(*leaves)
            wanted = [leaf for leaf in leaves if leaf.requires_grad]
            return (value,) + torch.autograd.grad(value, wanted)

    try:
        from functorch import functionalize  # in-place ops of decompositions become functional
    except ImportError:
        from torch.func import functionalize
    traced = make_fx(joint)(*inputs)
    return make_fx(functionalize(traced))(*inputs), joint


def check_forward_and_backward(test, function, *inputs, expected_ops=(), atol=1e-4):
    """function's value and its gradients for every float input, through one
    imported forward-and-backward graph (_autograd_graph, as AOTAutograd
    traces them; imported strict: nothing left to PyTorch), against torch in
    both backends; asserts the traced graph holds `expected_ops`. Returns the
    plan."""
    graph, joint = _autograd_graph(function, *inputs)
    ops = {importer.op_name(n.target) for n in graph.graph.nodes if n.op == "call_function"}
    for op in expected_ops:
        test.assertIn(op, ops, "the traced graph holds %s" % op)
    plan = importer.import_graph(graph, inputs, strict=True)
    expected = [e.detach() for e in joint(*inputs)]
    for backend in ("eager", "cudagraphs"):
        runner = plan.compile(backend=backend)
        for _ in range(2):
            actual = [a.detach() for a in runner(*inputs)]
        for index, (a, e) in enumerate(zip(actual, expected)):
            torch.testing.assert_close(a, e, rtol=1e-4, atol=atol,
                                       msg=lambda m: "%s output %d: %s" % (backend, index, m))
    return plan


class BackwardOpsTest(unittest.TestCase):
    """Each backward ATen op through make_fx of torch.autograd.grad, imported
    whole into grove and compared with torch."""

    def setUp(self):
        torch.manual_seed(SEED)

    def check(self, function, *inputs, expected_ops=()):
        graph, joint = _autograd_graph(function, *inputs)
        ops = {importer.op_name(n.target) for n in graph.graph.nodes if n.op == "call_function"}
        for op in expected_ops:
            self.assertIn(op, ops, "the traced graph holds %s" % op)
        plan = importer.import_graph(graph, inputs, strict=True)
        expected = joint(*inputs)
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend)
            for _ in range(3):
                actual = runner(*inputs)
            assert_close_all(self, [a.detach() for a in actual], [e.detach() for e in expected],
                             "%s output" % backend)

    def test_activation_backwards(self):
        x = torch.randn(5, 7)
        self.check(lambda x: (torch.relu(x) * x).sum(), x, expected_ops=["aten.threshold_backward"])
        self.check(lambda x: F.gelu(x).pow(2).sum(), x, expected_ops=["aten.gelu_backward"])
        self.check(lambda x: F.gelu(x, approximate="tanh").pow(2).sum(), x,
                   expected_ops=["aten.gelu_backward"])
        self.check(lambda x: (torch.sigmoid(x) * x).sum(), x,
                   expected_ops=["aten.sigmoid_backward"])
        self.check(lambda x: (torch.tanh(x) * x).sum(), x, expected_ops=["aten.tanh_backward"])
        # PyTorch 1.13 writes silu's backward out (sigmoid, fill, mul); 2.x keeps silu_backward.
        self.check(lambda x: (F.silu(x) * x).sum(), x)

    def test_softmax_and_layer_norm_backwards(self):
        x, w, b = torch.randn(3, 4, 6), torch.randn(6), torch.randn(6)
        weights = torch.randn(3, 4, 6)
        self.check(lambda x: (F.softmax(x, dim=1) * weights).sum(), x,
                   expected_ops=["aten._softmax_backward_data"])
        self.check(lambda x: (F.log_softmax(x, dim=-1) * weights).sum(), x,
                   expected_ops=["aten._log_softmax_backward_data"])
        self.check(lambda x, w, b: (F.layer_norm(x, (6,), w, b) * weights).sum(), x, w, b,
                   expected_ops=["aten.native_layer_norm_backward"])
        self.check(lambda x: (F.layer_norm(x, (6,)) * weights).sum(), x,
                   expected_ops=["aten.native_layer_norm_backward"])

    def test_embedding_slice_and_select_backwards(self):
        table = torch.randn(10, 4)
        ids = torch.tensor([[1, 3, 3], [0, 9, 3]])
        weights = torch.randn(2, 3, 4)
        self.check(lambda t, i: (F.embedding(i, t) * weights).sum(), table, ids,
                   expected_ops=["aten.embedding_dense_backward"])
        self.check(lambda t, i: (F.embedding(i, t, padding_idx=3) * weights).sum(), table, ids,
                   expected_ops=["aten.embedding_dense_backward"])
        x = torch.randn(4, 6)
        self.check(lambda x: (x[:, 2:5] * torch.arange(3.0)).sum() + x[1].pow(2).sum(), x,
                   expected_ops=["aten.slice_backward", "aten.select_backward"])

    def test_loss_backwards(self):
        prediction, target = torch.randn(6, 5), torch.randn(6, 5)
        labels = torch.tensor([0, 4, 2, 2, -100, 1])
        self.check(lambda p, t: F.mse_loss(p, t), prediction, target,
                   expected_ops=["aten.mse_loss_backward"])
        self.check(lambda p, t: F.cross_entropy(p, t), prediction, labels,
                   expected_ops=["aten.nll_loss_backward"])
        self.check(lambda p, t: F.cross_entropy(p, t, reduction="sum"), prediction, labels,
                   expected_ops=["aten.nll_loss_forward"])


if __name__ == "__main__":
    junit_main.main()
