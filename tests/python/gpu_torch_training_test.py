"""Training with torch.compile(backend="grove") on a GPU host (PyTorch 2.x:
dynamo hands the graph to AOTAutograd, grove compiles the forward and the
backward as its tree's stages). 50 steps of the mlp, the gpt and the
LLaMA-style block (gpu_models.py, smaller sizes): the losses track torch
eager at every step (f32 with TF32 off: rtol 2e-3, atol 2e-4), and grove's
cudagraphs mode equals its eager mode bitwise; gradient accumulation,
no_grad evaluation between steps, torch.optim.AdamW (fused=True) and
grove.torch.optim.AdamW too.
Skips without CUDA or without torch._dynamo (CI: training_test.py covers the
same on sim with PyTorch 1.13)."""
import copy
import os
import sys
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_models  # noqa: E402

import junit_main  # noqa: E402

from torch_features import HAS_CUDA, HAS_DYNAMO  # noqa: E402

RTOL, ATOL = 2e-3, 2e-4
STEPS = 50
SEED = 20261124


def mlp_case():
    model = gpu_models.Mlp(width=256, depth=4)
    target = torch.randn(32, 256, device="cuda")

    def batch(step):
        generator = torch.Generator(device="cuda").manual_seed(SEED + step)
        return (torch.randn(32, 256, device="cuda", generator=generator),)

    return model, batch, lambda output, step: F.mse_loss(output, target)


def train_instances_in_turn(modules, steps, active):
    """Instances of one model class, each compiled (no dynamo reset between,
    so they reach one dynamo graph) and trained by SGD on mlp_case's batches,
    the instances `active(step)` names in turn at each step; each step's loss
    and the final parameters match a deep copy trained in eager."""
    torch._dynamo.reset()
    _, batch, loss_of = mlp_case()
    references = [copy.deepcopy(module) for module in modules]
    runs = [torch.compile(module, backend="grove", dynamic=False) for module in modules]
    optimizers = [torch.optim.SGD(module.parameters(), lr=0.01) for module in modules]
    reference_optimizers = [torch.optim.SGD(module.parameters(), lr=0.01)
                            for module in references]
    for step in range(steps):
        for which in active(step):
            optimizers[which].zero_grad(set_to_none=True)
            loss = loss_of(runs[which](*batch(step)), step)
            loss.backward()
            optimizers[which].step()
            reference_optimizers[which].zero_grad(set_to_none=True)
            expected = loss_of(references[which](*batch(step)), step)
            expected.backward()
            reference_optimizers[which].step()
            torch.testing.assert_close(loss.detach(), expected.detach(), rtol=RTOL, atol=ATOL,
                                       msg=lambda m: "step %d instance %d: %s" % (step, which, m))
    for module, reference in zip(modules, references):
        for parameter, expected in zip(module.parameters(), reference.parameters()):
            torch.testing.assert_close(parameter, expected, rtol=RTOL, atol=ATOL)


def gpt_case():
    model = gpu_models.Gpt(vocab=512, width=128, heads=4, layers=2, max_len=64)

    def tokens(step):
        generator = torch.Generator(device="cuda").manual_seed(SEED + step)
        return torch.randint(0, 512, (8, 33), device="cuda", generator=generator)

    def batch(step):
        return (tokens(step)[:, :-1],)

    def loss(logits, step):
        return F.cross_entropy(logits.reshape(-1, 512), tokens(step)[:, 1:].reshape(-1))

    return model, batch, loss


def llama_case():
    model = gpu_models.LlamaBlock(width=128, heads=4, hidden=344, max_len=64)
    target = torch.randn(4, 32, 128, device="cuda")

    def batch(step):
        generator = torch.Generator(device="cuda").manual_seed(SEED + step)
        return (torch.randn(4, 32, 128, device="cuda", generator=generator),)

    return model, batch, lambda output, step: F.mse_loss(output, target)


CASES = {"mlp": mlp_case, "gpt": gpt_case, "llama": llama_case}


def train(module, batch, loss_of, backend, steps=STEPS, optimizer="sgd", accumulate=1,
          evaluate=False):
    """Losses (and evaluations) of `steps` optimizer steps; backend None is torch eager."""
    torch._dynamo.reset()
    model = copy.deepcopy(module)
    import grove.torch  # registers the backend; grove.torch.optim

    if backend is None:
        run = model
    else:
        run = torch.compile(model, backend="grove", options={"mode": backend}, dynamic=False)
    if optimizer == "sgd":
        step_fn = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    elif optimizer == "grove_adamw" and backend is not None:
        step_fn = grove.torch.optim.AdamW(model.parameters(), lr=1e-3, mode=backend)
    elif optimizer == "grove_adamw":  # the reference: PyTorch's own AdamW
        step_fn = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        step_fn = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    losses, evaluations = [], []
    for step in range(steps):
        step_fn.zero_grad(set_to_none=True)
        for micro in range(accumulate):
            index = step * accumulate + micro
            loss = loss_of(run(*batch(index)), index)
            loss.backward()
            losses.append(loss.detach().clone())
        step_fn.step()
        if evaluate:
            with torch.no_grad():
                evaluations.append(run(*batch(10_000)).clone())
    torch.cuda.synchronize()
    return torch.stack(losses), evaluations


def six_sgd_steps_match_eager(module, seed_each_call=False):
    """Trains `module` through backend="grove" and a copy of it in eager
    PyTorch with SGD for six steps (warm-up, recording, replays) on new
    [16, 64] batches: each step's loss and the final parameters must match.
    seed_each_call: the same torch seed before each side's call of a step
    (random draws PyTorch makes are then the same)."""
    torch._dynamo.reset()
    reference = copy.deepcopy(module)
    run = torch.compile(module, backend="grove", dynamic=False)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.05)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    for step in range(6):
        x = torch.randn(16, 64, device="cuda")
        losses = []
        for call, sgd in ((run, optimizer), (reference, reference_optimizer)):
            sgd.zero_grad(set_to_none=True)
            if seed_each_call:
                torch.manual_seed(1000 + step)
            loss = call(x).square().mean()
            loss.backward()
            sgd.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[0], losses[1], rtol=RTOL, atol=ATOL,
                                   msg=lambda m: "step %d: %s" % (step, m))
    for parameter, expected in zip(module.parameters(), reference.parameters()):
        torch.testing.assert_close(parameter, expected, rtol=RTOL, atol=ATOL)


@unittest.skipUnless(HAS_CUDA, "no CUDA device")
@unittest.skipUnless(HAS_DYNAMO, "this PyTorch has no torch._dynamo")
class GpuTorchTrainingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def setUp(self):
        torch.manual_seed(SEED)

    def check(self, name, **options):
        module, batch, loss_of = CASES[name]()
        module = module.cuda()
        expected, expected_eval = train(module, batch, loss_of, None, **options)
        eager, eager_eval = train(module, batch, loss_of, "eager", **options)
        graphs, graphs_eval = train(module, batch, loss_of, "cudagraphs", **options)
        torch.testing.assert_close(eager, expected, rtol=RTOL, atol=ATOL,
                                   msg=lambda m: "%s %s: grove eager vs torch: %s"
                                   % (name, options, m))
        self.assertTrue(torch.equal(graphs, eager),
                        "%s %s: grove cudagraphs losses differ from grove eager" % (name, options))
        for step, (a, b) in enumerate(zip(graphs_eval, eager_eval)):
            self.assertTrue(torch.equal(a, b), "%s: evaluation after step %d" % (name, step))
        for step, (a, b) in enumerate(zip(eager_eval, expected_eval)):
            torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)

    def test_mlp_50_sgd_steps(self):
        self.check("mlp")

    def test_gpt_50_sgd_steps(self):
        self.check("gpt")

    def test_llama_block_50_sgd_steps(self):
        self.check("llama")

    def test_gradient_accumulation(self):
        self.check("mlp", steps=10, accumulate=2)

    def test_no_grad_evaluation_between_steps(self):
        self.check("gpt", steps=10, evaluate=True)

    def test_fused_adamw(self):
        self.check("llama", steps=20, optimizer="adamw")

    def test_the_door_runs_its_own_autograd_function(self):
        """Note [The door's own autograd function] (grove/door_function.py):
        the mlp's and the gpt's training graphs run as grove's own
        autograd.Function (the default), and their losses over 10 steps
        track torch eager and those of the same graphs under AOTAutograd's
        runtime (GROVE_DOOR_FUNCTION=0), which takes no graph."""
        import logging

        from grove import door_function

        logger = logging.getLogger("grove")
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logger.addHandler(handler)
        level = logger.level
        logger.setLevel(logging.INFO)
        try:
            self.check_door_function(door_function, records)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)

    def check_door_function(self, door_function, records):
        for name in ("mlp", "gpt"):
            module, batch, loss_of = CASES[name]()
            module = module.cuda()
            expected, _ = train(module, batch, loss_of, None, steps=10)
            before = door_function.taken
            own, _ = train(module, batch, loss_of, "cudagraphs", steps=10)  # the default
            self.assertGreater(door_function.taken, before, "%s: no graph took the function: %s" % (
                name, [record.getMessage() for record in records if "AOTAutograd" in
                       record.getMessage()]))
            before = door_function.taken
            previous = os.environ.get("GROVE_DOOR_FUNCTION")
            os.environ["GROVE_DOOR_FUNCTION"] = "0"  # AOTAutograd's runtime
            try:
                aot, _ = train(module, batch, loss_of, "cudagraphs", steps=10)
            finally:
                if previous is None:
                    del os.environ["GROVE_DOOR_FUNCTION"]
                else:
                    os.environ["GROVE_DOOR_FUNCTION"] = previous
            self.assertEqual(door_function.taken, before)
            torch.testing.assert_close(own, expected, rtol=RTOL, atol=ATOL)
            torch.testing.assert_close(own, aot, rtol=RTOL, atol=ATOL)

    def test_direct_gradients_equal_autograds_bitwise(self):
        """Note [Gradients set directly by the door's function]
        (grove/door_function.py): with GROVE_DOOR_GRADIENTS=direct the
        backward sets the parameters' .grad itself; the same gradients as
        autograd's AccumulateGrad set, so the losses equal the default's
        bitwise (gradient accumulation too) and track torch eager."""
        for name, options in (("mlp", {"steps": 10}), ("gpt", {"steps": 10}),
                              ("mlp", {"steps": 5, "accumulate": 2})):
            module, batch, loss_of = CASES[name]()
            module = module.cuda()
            expected, _ = train(module, batch, loss_of, None, **options)
            default, _ = train(module, batch, loss_of, "cudagraphs", **options)
            os.environ["GROVE_DOOR_GRADIENTS"] = "direct"
            try:
                direct, _ = train(module, batch, loss_of, "cudagraphs", **options)
            finally:
                del os.environ["GROVE_DOOR_GRADIENTS"]
            self.assertTrue(torch.equal(direct, default), "%s %s: %s vs %s" % (
                name, options, direct.tolist(), default.tolist()))
            torch.testing.assert_close(direct, expected, rtol=RTOL, atol=ATOL)

    def test_two_instances_of_one_model_train_apart(self):
        """Note [Training graphs per parameter set] (grove/dynamo_backend.py):
        two instances of one model class, compiled one after the other with
        no dynamo reset between and trained in turn, reach one dynamo graph
        with their own parameters; each trains as in torch eager (before:
        the second instance's first call raised StaticInputMovedError)."""
        import grove.torch  # noqa: F401  (registers the backend)

        train_instances_in_turn([gpu_models.Mlp(width=256, depth=4).cuda() for _ in range(2)],
                                steps=6, active=lambda step: (0, 1))

    def test_a_later_parameter_set_compiles_from_its_own_call(self):
        """Note [Training graphs per parameter set]: two instances of a model
        whose first graph (a stem, no parameters) feeds, past a graph break,
        a trained graph the instances share; the second instance is first
        called at step 3. The graph compiled again for its parameters traced
        the first call's arguments, the stem's output of step 0, whose memory
        the tree had reclaimed: StaleTensorError inside AOTAutograd (HF
        DeepSeek-V3 training, whose experts share one graph and are first
        routed tokens at later steps). Both instances train as in eager."""
        import grove.torch  # noqa: F401  (registers the backend)

        class Stemmed(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.mlp = gpu_models.Mlp(width=256, depth=4)

            def forward(self, x):
                h = torch.tanh(x) * 2
                torch._dynamo.graph_break()
                return self.mlp(h)

        train_instances_in_turn([Stemmed().cuda() for _ in range(2)], steps=7,
                                active=lambda step: (0,) if step < 3 else (0, 1))

    def test_a_graph_without_gradients_feeds_a_training_graph(self):
        """Note [A training step begins with its named invocation]
        (cudagraph_trees/generations.h): a graph break leaves a first graph
        that needs no gradient (it reads only the batch) and hands its output
        to the training graph; six SGD steps (warm-up, recording, replays)
        must match torch eager. Before the fix the training forward began a
        step of its own and reclaimed that output: StaleTensorError at the
        first step, on cuda and on sim (HF OPT, whose layer-drop test breaks
        the graph, failed to train the same way)."""
        import grove.torch  # noqa: F401  (registers the backend)

        class Scaled(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(64, 64)

            def forward(self, x):
                scale = (x.abs() + 1.0).rsqrt()
                torch._dynamo.graph_break()
                return torch.tanh(self.linear(x * scale))

        six_sgd_steps_match_eager(Scaled().cuda())

    def test_dropout_training_matches_eager_under_one_seed(self):
        """Dropout p > 0 through the door (HF models train with it on by
        default): the forward's native_dropout runs in PyTorch, so under the
        same seed its masks are eager's (Note [Random draws are never
        constants]), and its backward, native_dropout_backward, runs in
        grove; six SGD steps (warm-up, recording, replays) match eager."""
        import grove.torch  # noqa: F401  (registers the backend)
        from grove import dynamo_backend

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.first = torch.nn.Linear(64, 128)
                self.second = torch.nn.Linear(128, 64)

            def forward(self, x):
                hidden = F.dropout(F.gelu(self.first(x)), 0.2, self.training)
                return F.dropout(self.second(hidden), 0.1, self.training)

        before = {id(runner) for runner in dynamo_backend._live_runners}
        six_sgd_steps_match_eager(Net().cuda(), seed_each_call=True)
        made = [runner for runner in dynamo_backend._live_runners if id(runner) not in before]
        left = {op for runner in made for _, op, _ in runner.unsupported}
        self.assertNotIn("aten.native_dropout_backward", left)
        # The draws, then one grove program (Note [Random draws run first]).
        for runner in made:
            kinds = [kind for kind, _ in runner.plan.steps]
            self.assertEqual(kinds.count("grove"), 1, (runner.plan.name, kinds))

    def test_update_in_backward_equals_step_bitwise(self):
        """Note [The optimizer's update inside the door's backward]
        (grove/optim.py): grove.torch.optim.AdamW made under
        GROVE_OPTIM_IN_BACKWARD=1 updates at the end of the door's backward
        (every .grad set directly, step() a no-op); the same gradients and
        the same update program as step() after the plain backward, so the
        losses equal that path's bitwise and track torch eager's AdamW."""
        from grove import door_function

        for name in ("mlp", "gpt"):
            module, batch, loss_of = CASES[name]()
            module = module.cuda()
            expected, _ = train(module, batch, loss_of, None, steps=10, optimizer="grove_adamw")
            plain, _ = train(module, batch, loss_of, "cudagraphs", steps=10,
                             optimizer="grove_adamw")
            taken = door_function.in_backward_taken
            os.environ["GROVE_OPTIM_IN_BACKWARD"] = "1"
            try:
                in_backward, _ = train(module, batch, loss_of, "cudagraphs", steps=10,
                                       optimizer="grove_adamw")
            finally:
                del os.environ["GROVE_OPTIM_IN_BACKWARD"]
            self.assertGreater(door_function.in_backward_taken, taken,
                               "%s: no door function took the optimizer's update" % name)
            self.assertTrue(torch.equal(in_backward, plain), "%s: %s vs %s" % (
                name, in_backward.tolist(), plain.tolist()))
            torch.testing.assert_close(in_backward, expected, rtol=RTOL, atol=ATOL)

    def test_grove_optim_adamw(self):
        """grove.torch.optim.AdamW against torch eager with torch.optim.AdamW."""
        self.check("mlp", steps=20, optimizer="grove_adamw")


if __name__ == "__main__":
    junit_main.main()
