"""Note [The door's own autograd function] (grove/door_function.py) on sim:
the forward and backward graphs of AOTAutograd's partition (here PyTorch
1.13's; on the GPU host PyTorch 2.x's, noted as it compiles) run as grove's
own autograd.Function; gradients equal PyTorch's
over several steps and grove's AOTAutograd path bitwise, the saved values
(a kept set's token) reach the backward, and a backward graph that returns
gradients only for the inputs that need one is widened to one per input."""
import copy
import gc
import os
import sys
import unittest
from unittest import mock

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_models  # noqa: E402
import grove.training  # noqa: E402
import junit_main  # noqa: E402
from grove import door_function, training_steps  # noqa: E402
from grove.runner import StaticInputMovedError  # noqa: E402
from grove.training_steps import StepCompiler  # noqa: E402

SEED = 20261126
RTOL, ATOL = 1e-4, 1e-5


def partition_of(module, example):
    """(forward, backward) fx modules of `module` over its parameters and
    `example` (PyTorch 1.13's AOTAutograd, default partition), and the
    function of (parameters..., x) they were traced from. Attention is
    written out as the door's training graphs write it (PyTorch 2.x traces
    scaled_dot_product_attention to a fused kernel and its backward, which
    are not grove ops: training_steps.write_out_attention)."""
    from functorch.compile import aot_function, default_partition
    from torch.nn.utils import stateless

    names = [name for name, _ in module.named_parameters()]
    captured = {}

    def function(*args):
        return (stateless.functional_call(module, dict(zip(names, args[:-1])), (args[-1],)),)

    def keep(name):
        def compiler(graph_module, example_inputs):
            captured[name] = graph_module
            return graph_module
        return compiler

    compiled = aot_function(function, fw_compiler=keep("forward"), bw_compiler=keep("backward"),
                            partition_fn=default_partition)
    params = [p.detach().clone().requires_grad_(True) for p in module.parameters()]
    with mock.patch.object(F, "scaled_dot_product_attention", training_steps.math_attention,
                           create=True):
        compiled(*params, example)[0].sum().backward()
    return captured["forward"], captured["backward"]


class DoorFunctionTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(SEED)

    def test_fake_calls_go_to_aotautograds_function(self):
        # Note [Fake calls of the door's function]: dynamo's DDP optimizer
        # calls the compiled pieces on fake tensors; those calls reach
        # AOTAutograd's function, real ones the door's (which would fail to
        # read a fake tensor's memory).
        from torch._subclasses.fake_tensor import FakeTensorMode

        module = gpu_models.Mlp(width=16, depth=2)
        forward, backward = partition_of(module, torch.randn(4, 16))
        compiler = StepCompiler("cudagraphs", device="sim", name="door", lazy=True)
        compiler.user_outputs = 1
        params = list(module.parameters())
        own = door_function.door_function(forward, backward, 1, [True] * len(params) + [False],
                                          compiler, single=True)
        fallback_calls = []

        def fallback(*args):  # stands for AOTAutograd's function: an output of the right shape
            fallback_calls.append(args)
            return torch.empty_like(args[-1])

        call = door_function.real_calls_only(own, fallback)
        x = torch.randn(4, 16)
        torch.testing.assert_close(call(*params, x), module(x), rtol=RTOL, atol=ATOL)
        self.assertEqual(fallback_calls, [])
        with FakeTensorMode() as mode:
            fake_params = [mode.from_tensor(p) for p in params]
            fake_x = mode.from_tensor(x)
            out = call(*fake_params, fake_x)
        self.assertEqual(len(fallback_calls), 1)
        self.assertEqual(tuple(out.shape), (4, 16))
        # A real call after the fake one still runs the door's function.
        torch.testing.assert_close(call(*params, x), module(x), rtol=RTOL, atol=ATOL)
        self.assertEqual(len(fallback_calls), 1)

    def steps(self, module, make_input, strip_none=False, steps=4, direct=False):
        """Gradients and outputs over `steps` steps of the door function
        (cudagraphs on sim) against PyTorch eager, from one set of weights."""
        reference = copy.deepcopy(module)
        example = make_input()
        forward, backward = partition_of(module, example)
        if strip_none:  # a partition that leaves out the None gradients
            output = [node for node in backward.graph.nodes if node.op == "output"][0]
            output.args = ([value for value in output.args[0] if value is not None],)
            backward.recompile()
        params = list(module.parameters())
        compiler = StepCompiler("cudagraphs", device="sim", name="door", lazy=True)
        compiler.user_outputs = 1  # as compiler.partition notes it
        requires_grad = [True] * len(params) + [False]
        positions = door_function.direct_positions(params + [example]) if direct else ()
        call = door_function.door_function(forward, backward, 1, requires_grad, compiler,
                                           single=True, direct=positions)
        for step in range(steps):
            x = make_input()
            for p in params:
                p.grad = None
            reference.zero_grad(set_to_none=True)
            got = call(*params, x)
            want = reference(x)
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, msg="output, step %d" % step)
            weights = torch.linspace(-1, 1, got.numel()).view(got.shape)
            (got * weights).sum().backward()
            (want * weights).sum().backward()
            for index, (ours, theirs) in enumerate(zip(params, reference.parameters())):
                self.assertIsNotNone(ours.grad, "parameter %d has no gradient" % index)
                torch.testing.assert_close(ours.grad, theirs.grad, rtol=RTOL, atol=ATOL,
                                           msg="gradient %d, step %d" % (index, step))
        return compiler

    def stage_run(self, module, batches, layers, threaded=False):
        """Outputs and gradients of the door's function over `batches`, with
        GROVE_DOOR_STAGE=layers or not, each backward from a thread of its own
        where `threaded`; and how often KeptForward/KeptBackward.__call__ ran.
        The saved values kept in grove, no verified calls (the stages' own
        closures apply only there), whatever the environment."""
        with mock.patch.dict(os.environ, {"GROVE_KEEP_SAVED": "1", "GROVE_VERIFY": "0"}):
            return self._stage_run(module, batches, layers, threaded)

    def _stage_run(self, module, batches, layers, threaded):
        from grove import handoff

        module = copy.deepcopy(module)
        forward, backward = partition_of(module, batches[0])
        params = list(module.parameters())
        compiler = StepCompiler("cudagraphs", device="sim", name="door", lazy=True)
        compiler.user_outputs = 1
        environment = {"GROVE_DOOR_STAGE": "layers" if layers else "one_frame"}
        with mock.patch.dict(os.environ, environment):
            call = door_function.door_function(forward, backward, 1,
                                               [True] * len(params) + [False], compiler,
                                               single=True)
        layered = {"forward": 0, "backward": 0}
        kept_forward, kept_backward = handoff.KeptForward.__call__, handoff.KeptBackward.__call__

        def counted(name, method):
            def run(self, *args):
                layered[name] += 1
                return method(self, *args)
            return run

        results = []
        with mock.patch.object(handoff.KeptForward, "__call__", counted("forward", kept_forward)), \
                mock.patch.object(handoff.KeptBackward, "__call__",
                                  counted("backward", kept_backward)):
            for step, x in enumerate(batches):
                if step == 3:
                    before = compiler.forwards[0].models()[0].stats()["tree"]
                for p in params:
                    p.grad = None
                out = call(*params, x)
                loss = (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum()
                if threaded:
                    import threading

                    worker = threading.Thread(target=loss.backward)
                    worker.start()
                    worker.join()
                else:
                    loss.backward()
                results.append([out.detach().clone()] + [p.grad.clone() for p in params])
        after = compiler.forwards[0].models()[0].stats()["tree"]
        changes = {key: after[key] - before[key] for key in ("replays", "warmups", "recordings")}
        return results, layered, changes, (call, params)

    def test_stages_in_one_frame_match_the_layered_calls(self):
        # Note [The door's stages in one frame] (grove/handoff.py).
        cases = [(gpu_models.Mlp(width=16, depth=3), lambda: torch.randn(4, 16))]
        if hasattr(F, "scaled_dot_product_attention"):
            cases.append((gpu_models.GptBlock(16, 2), lambda: torch.randn(2, 4, 16)))
        for module, make_input in cases:
            batches = [make_input() for _ in range(6)]
            one_frame, calls, changes, (call, params) = self.stage_run(module, batches, False)
            layered, layered_calls, _, _ = self.stage_run(module, batches, True)
            for step, (mine, theirs) in enumerate(zip(one_frame, layered)):
                for index, (a, b) in enumerate(zip(mine, theirs)):
                    self.assertTrue(torch.equal(a, b), "step %d, value %d" % (step, index))
            # The layered calls ran once per stage (the first), then the closures alone.
            self.assertEqual(calls, {"forward": 1, "backward": 1})
            self.assertEqual(layered_calls, {"forward": 6, "backward": 6})
            # Forward and backward replay in one tree, nothing recorded again.
            self.assertEqual(changes, {"replays": 6, "warmups": 0, "recordings": 0})
            # A parameter that moves is refused by the closure's check, before anything runs.
            params[0].data = params[0].data.clone()
            with self.assertRaises(StaticInputMovedError):
                call(*params, batches[0])

    def test_a_one_frame_backward_on_another_thread_replays_in_the_forwards_tree(self):
        # On CUDA autograd runs the backward on its device thread: the
        # backward's closure enters the forward's trees (Note [Trees of
        # another thread]); here each backward runs on a thread of its own.
        module = gpu_models.Mlp(width=16, depth=3)
        batches = [torch.randn(4, 16) for _ in range(6)]
        threaded, calls, changes, _ = self.stage_run(module, batches, False, threaded=True)
        plain, _, _, _ = self.stage_run(module, batches, False)
        for step, (mine, theirs) in enumerate(zip(threaded, plain)):
            for index, (a, b) in enumerate(zip(mine, theirs)):
                self.assertTrue(torch.equal(a, b), "step %d, value %d" % (step, index))
        self.assertEqual(calls, {"forward": 1, "backward": 1})
        self.assertEqual(changes, {"replays": 6, "warmups": 0, "recordings": 0})

    def test_mlp_gradients_match_torch_over_steps(self):
        compiler = self.steps(gpu_models.Mlp(width=16, depth=3), lambda: torch.randn(4, 16))
        # One grove segment each, the saved activations kept in grove.
        self.assertEqual(len(compiler.kept_forwards), 1)
        self.assertEqual(len(compiler.kept_backwards), 1)
        tree = compiler.forwards[0].models()[0].stats()["tree"]
        self.assertGreater(tree["replays"], 0)

    def test_direct_gradients_match_torch_over_steps(self):
        # Note [Gradients set directly by the door's function]: every
        # parameter but the first gets its .grad from the backward itself.
        self.steps(gpu_models.Mlp(width=16, depth=3), lambda: torch.randn(4, 16), direct=True)
        block = gpu_models.GptBlock(16, 2)
        if hasattr(F, "scaled_dot_product_attention"):
            self.steps(block, lambda: torch.randn(2, 4, 16), direct=True)

    def test_direct_gradients_accumulate_into_existing_grad(self):
        module = gpu_models.Mlp(width=8, depth=2)
        reference = copy.deepcopy(module)
        forward, backward = partition_of(module, torch.randn(3, 8))
        compiler = StepCompiler("cudagraphs", device="sim", name="door", lazy=True)
        compiler.user_outputs = 1
        params = list(module.parameters())
        positions = door_function.direct_positions(params + [torch.randn(3, 8)])
        self.assertEqual(positions, tuple(range(1, len(params))))
        call = door_function.door_function(forward, backward, 1, [True] * len(params) + [False],
                                           compiler, single=True, direct=positions)
        # Two forwards and backwards without zero_grad in between: sums,
        # whether .grad was None or held a tensor before the first.
        params[1].grad = torch.randn_like(params[1])
        list(reference.parameters())[1].grad = params[1].grad.clone()
        for _ in range(2):
            x = torch.randn(3, 8)
            out = call(*params, x)
            # Autograd's graph holds one AccumulateGrad (the first parameter's), not one each.
            accumulators = [function for function, _ in out.grad_fn.next_functions
                            if function is not None]
            self.assertEqual([type(function).__name__ for function in accumulators],
                             ["AccumulateGrad"])
            self.assertIs(accumulators[0].variable, params[0])
            F.mse_loss(out, x).backward()
            F.mse_loss(reference(x), x).backward()
        for index, (ours, theirs) in enumerate(zip(params, reference.parameters())):
            torch.testing.assert_close(ours.grad, theirs.grad, rtol=RTOL, atol=ATOL,
                                       msg="gradient %d" % index)

    def test_direct_positions_keep_one_parameter_and_hooked_ones(self):
        params = [torch.randn(2, requires_grad=True) for _ in range(4)]
        x = torch.randn(2)
        # No other input needs a gradient: the first parameter stays in autograd's graph.
        self.assertEqual(door_function.direct_positions(params + [x]), (1, 2, 3))
        # A non-leaf input that needs one keeps the outputs in the graph.
        hidden = torch.randn(2, requires_grad=True) * 2
        self.assertEqual(door_function.direct_positions(params + [hidden]), (0, 1, 2, 3))
        # A parameter passed twice (tied weights) stays in autograd's graph,
        # whose one AccumulateGrad node for it sums its two gradients.
        self.assertEqual(door_function.direct_positions([params[0], params[1], params[0], x]),
                         (1,))
        # A hooked parameter stays in autograd's graph (its hook runs), and
        # so keeps the outputs in it: every other parameter is set directly.
        params[2].register_hook(lambda grad: grad)
        self.assertEqual(door_function.direct_positions(params + [x]), (0, 1, 3))
        # Under torch.distributed (DDP's reducer hooks AccumulateGrad nodes):
        # none, unless grove's own all-reduce averages the gradients.
        import tempfile

        import torch.distributed as dist

        with tempfile.TemporaryDirectory() as folder:
            dist.init_process_group("gloo", init_method="file://%s/store" % folder, rank=0,
                                    world_size=1)
            try:
                self.assertEqual(door_function.direct_positions(params + [x]), ())
                self.assertEqual(door_function.direct_positions(params + [x],
                                                                grove_reduces=True), (0, 1, 3))
                # Across ranks too: the hang sessions 18 and 19 saw on two GPUs
                # was a second grove DDP's communicator (Note [Communicators
                # captured by graphs are never destroyed]), not these gradients.
                with mock.patch.object(dist, "get_world_size", return_value=2):
                    self.assertEqual(door_function.direct_positions(params + [x],
                                                                    grove_reduces=True), (0, 1, 3))
            finally:
                dist.destroy_process_group()
        os.environ["GROVE_DOOR_GRADIENTS"] = "sideways"
        try:
            with self.assertRaisesRegex(ValueError, "GROVE_DOOR_GRADIENTS"):
                door_function.direct_gradients()
            os.environ["GROVE_DOOR_GRADIENTS"] = "direct"
            self.assertTrue(door_function.direct_gradients())
        finally:
            del os.environ["GROVE_DOOR_GRADIENTS"]
        self.assertFalse(door_function.direct_gradients())

    def in_backward_pair(self, module, example, lr=1e-2):
        """Two copies of `module`, each through a door function of its own on
        sim: one whose grove AdamW updates inside the backward (Note [The
        optimizer's update inside the door's backward]), one whose AdamW
        updates at step() after the plain backward. (call, params, optimizer)
        of each."""
        pairs = []
        for in_backward in (True, False):
            copied = copy.deepcopy(module)
            forward, backward = partition_of(copied, example)
            compiler = StepCompiler("cudagraphs", device="sim", name="door", lazy=True)
            compiler.user_outputs = 1
            params = list(copied.parameters())
            optimizer = grove.optim.AdamW(params, lr=lr, device="sim",
                                          update_in_backward=in_backward)
            found, direct = door_function.update_in_backward(params + [example])
            if in_backward:
                self.assertIs(found, optimizer)
                self.assertEqual(direct, tuple(range(len(params))))
            taken = door_function.in_backward_taken
            call = door_function.door_function(forward, backward, 1,
                                               [True] * len(params) + [False], compiler,
                                               single=True, direct=direct, optimizer=found)
            self.assertEqual(door_function.in_backward_taken - taken, int(in_backward))
            pairs.append((call, params, optimizer))
        return pairs

    def test_update_in_backward_equals_step_after_backward(self):
        module = gpu_models.Mlp(width=16, depth=3)
        (call, params, optimizer), (plain, plain_params, plain_optimizer) = (
            self.in_backward_pair(module, torch.randn(4, 16)))
        for step in range(4):
            x = torch.randn(4, 16)
            optimizer.zero_grad()
            plain_optimizer.zero_grad()
            out = call(*params, x)
            # One autograd input: the anchor; no AccumulateGrad of a parameter.
            variables = [function.variable for function, _ in out.grad_fn.next_functions
                         if function is not None]
            self.assertEqual(len(variables), 1)
            self.assertFalse(any(variable is param for variable in variables
                                 for param in params))
            before = [param.detach().clone() for param in params]
            F.mse_loss(out, x).backward()
            # Updated by the backward, before step().
            self.assertFalse(all(torch.equal(a, b) for a, b in zip(before, params)),
                             "step %d: backward() left every parameter as it was" % step)
            after_backward = [param.detach().clone() for param in params]
            optimizer.step()
            for index, (a, b) in enumerate(zip(after_backward, params)):
                self.assertTrue(torch.equal(a, b), "step %d: step() changed parameter %d after "
                                "the update in backward" % (step, index))
            F.mse_loss(plain(*plain_params, x), x).backward()
            plain_optimizer.step()
            for index, (ours, theirs) in enumerate(zip(params, plain_params)):
                self.assertTrue(torch.equal(ours.grad, theirs.grad),
                                "step %d: gradient %d" % (step, index))
                self.assertTrue(torch.equal(ours, theirs), "step %d: parameter %d" % (step, index))

    def test_update_in_backward_refuses_a_second_backward_before_step(self):
        module = gpu_models.Mlp(width=8, depth=2)
        (call, params, optimizer), _ = self.in_backward_pair(module, torch.randn(3, 8))
        x = torch.randn(3, 8)
        F.mse_loss(call(*params, x), x).backward()
        with self.assertRaisesRegex(RuntimeError, "second backward"):
            F.mse_loss(call(*params, x), x).backward()
        with self.assertRaisesRegex(RuntimeError, "closure"):
            optimizer.step(lambda: None)
        # Usable after the refusal: step() clears the mark, the next step updates.
        optimizer.zero_grad()
        before = [param.detach().clone() for param in params]
        F.mse_loss(call(*params, x), x).backward()
        optimizer.step()
        self.assertFalse(all(torch.equal(a, b) for a, b in zip(before, params)))

    def test_update_in_backward_needs_the_optimizers_exact_parameters(self):
        params = [torch.randn(2, requires_grad=True) for _ in range(3)]
        x = torch.randn(2)
        some = grove.optim.SGD(params[:2], lr=0.1, device="sim", update_in_backward=True)
        self.assertEqual(door_function.update_in_backward(params + [x]), (None, ()))
        everything = grove.optim.SGD(list(reversed(params)), lr=0.1, device="sim",
                                     update_in_backward=True)
        self.assertEqual(door_function.update_in_backward(params + [x]),
                         (everything, (0, 1, 2)))
        plain = grove.optim.SGD(params, lr=0.1, device="sim")
        self.assertFalse(plain.update_in_backward)
        del some, everything, plain
        os.environ["GROVE_OPTIM_IN_BACKWARD"] = "yes"
        try:
            with self.assertRaisesRegex(ValueError, "GROVE_OPTIM_IN_BACKWARD"):
                grove.optim.SGD(params, lr=0.1, device="sim")
            os.environ["GROVE_OPTIM_IN_BACKWARD"] = "1"
            self.assertTrue(grove.optim.SGD(params, lr=0.1, device="sim").update_in_backward)
        finally:
            del os.environ["GROVE_OPTIM_IN_BACKWARD"]

    def test_a_backward_without_none_gradients_is_widened_to_every_input(self):
        self.steps(gpu_models.Mlp(width=8, depth=2), lambda: torch.randn(3, 8), strip_none=True)

    def test_transformer_block_gradients_match_torch(self):
        from grove.training import math_attention

        if not hasattr(F, "scaled_dot_product_attention"):  # PyTorch 1.13
            F.scaled_dot_product_attention = math_attention
        block = gpu_models.GptBlock(16, 2)
        self.steps(block, lambda: torch.randn(2, 4, 16))

    def test_equals_the_aotautograd_path_bitwise(self):
        module = gpu_models.Mlp(width=16, depth=3)
        aot_model = copy.deepcopy(module)
        trained = grove.training.compile_module(aot_model, "cudagraphs", device="sim")
        x = torch.randn(4, 16)
        forward, backward = partition_of(module, x)
        compiler = StepCompiler("cudagraphs", device="sim", name="door", lazy=True)
        compiler.user_outputs = 1
        params = list(module.parameters())
        call = door_function.door_function(forward, backward, 1, [True] * len(params) + [False],
                                           compiler, single=True)
        for step in range(3):
            x = torch.randn(4, 16)
            for p in params:
                p.grad = None
            aot_model.zero_grad(set_to_none=True)
            F.mse_loss(call(*params, x), x).backward()
            F.mse_loss(trained(x), x).backward()
            for ours, theirs in zip(params, aot_model.parameters()):
                self.assertTrue(torch.equal(ours.grad, theirs.grad), "step %d" % step)

    def door_call(self, module, example):
        forward, backward = partition_of(module, example)
        compiler = StepCompiler("cudagraphs", device="sim", name="door", lazy=True)
        compiler.user_outputs = 1
        params = list(module.parameters())
        call = door_function.door_function(forward, backward, 1, [True] * len(params) + [False],
                                           compiler, single=True)
        return call, params, compiler

    def test_outputs_held_across_steps_hold_no_activations(self):
        # The saved values are the context's saved tensors, released after
        # the backward: a step's output (and its graph) held through the next
        # steps keeps no kept set alive, so the tree replays, never records
        # again or warms up, and has no held activation to mark overwritten
        # at the next replay (9 here when the context held them).
        # The tree counters are the thread's, over every tree and test of the
        # process, and an earlier test of the same model (the same graphs) adds
        # to them: on PyTorch 2.11 this test, run after test_a_retained_graph_
        # runs_its_backward_twice, read 4 where it passes alone (GPU host,
        # session 22). So garbage is collected first and only the overwrites of
        # this test's own steps are counted, from its first (warm-up) call on.
        gc.collect()
        module = gpu_models.Mlp(width=8, depth=2)
        call, params, compiler = self.door_call(module, torch.randn(3, 8))
        held, counts = [], []
        for step in range(6):
            for p in params:
                p.grad = None
            out = call(*params, torch.randn(3, 8))
            out.square().sum().backward()
            held.append(out)
            tree = compiler.forwards[0].models()[0].stats()["tree"]
            counts.append((tree["recordings"], tree["warmups"], tree["replays"]))
            if step == 0:
                overwritten_before = tree["outputs_overwritten"]
        self.assertEqual(counts[2][:2], counts[-1][:2], counts)
        self.assertGreater(counts[-1][2], counts[2][2], counts)
        self.assertEqual(tree["outputs_overwritten"] - overwritten_before, 0)

    def test_a_retained_graph_runs_its_backward_twice(self):
        module = gpu_models.Mlp(width=8, depth=2)
        reference = copy.deepcopy(module)
        call, params, _ = self.door_call(module, torch.randn(3, 8))
        for step in range(3):
            x = torch.randn(3, 8)
            for p in params:
                p.grad = None
            reference.zero_grad(set_to_none=True)
            out = call(*params, x)
            out.sum().backward(retain_graph=True)
            out.sum().backward()
            want = reference(x)
            want.sum().backward(retain_graph=True)
            want.sum().backward()
            for ours, theirs in zip(params, reference.parameters()):
                torch.testing.assert_close(ours.grad, theirs.grad, rtol=RTOL, atol=ATOL,
                                           msg="step %d" % step)

    def aot_compiled(self, module, x):
        """A graph module of `module` compiled by AOTAutograd (aot_module:
        its parameters passed before the inputs) with grove's StepCompiler,
        as the door compiles dynamo's graphs; the compiler noted the
        partition and the forward."""
        from functorch.compile import aot_module

        gm = torch.fx.symbolic_trace(module)
        compiler = StepCompiler("cudagraphs", device="sim", name="aot", lazy=True)
        aot_module(gm, fw_compiler=compiler.forward, bw_compiler=compiler.backward,
                   partition_fn=compiler.partition)(x)
        return gm, compiler

    def test_the_graph_aotautograd_compiled_runs_as_the_function(self):
        from types import SimpleNamespace

        module = gpu_models.Mlp(width=8, depth=3)
        reference = copy.deepcopy(module)
        gm, compiler = self.aot_compiled(module, torch.randn(3, 8))
        # AOTAutograd's metadata of a simple graph (PyTorch 1.13 notes none);
        # PyTorch 2.11 lists a PlainTensorMeta per plain tensor input (the
        # first version took those for subclasses and no graph on an H100).
        plain = type("PlainTensorMeta", (), {})()
        simple = SimpleNamespace(
            input_info=[SimpleNamespace(mutates_data=False)] * 7,
            output_info=[SimpleNamespace(output_type=SimpleNamespace(name="non_alias"))],
            subclass_inp_meta=[plain] * 7)
        compiler.compiled_forward = (compiler.compiled_forward[0], simple)
        forward, backward, outputs, lifted = door_function.aot_partition(gm, [torch.randn(3, 8)],
                                                                         compiler)
        self.assertEqual(outputs, 1)
        self.assertEqual([id(t) for t in lifted], [id(p) for p in module.parameters()])
        call = door_function.door_function(
            forward, backward, outputs, [True] * len(lifted) + [False], compiler, lifted=lifted)
        for step in range(3):
            x = torch.randn(3, 8)
            module.zero_grad(set_to_none=True)
            reference.zero_grad(set_to_none=True)
            (got,) = call(x)
            want = reference(x)
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
            got.square().sum().backward()
            want.square().sum().backward()
            for ours, theirs in zip(module.parameters(), reference.parameters()):
                torch.testing.assert_close(ours.grad, theirs.grad, rtol=RTOL, atol=ATOL,
                                           msg="step %d" % step)

    def test_metadata_of_mutations_or_aliases_keeps_aotautograd(self):
        from types import SimpleNamespace

        module = gpu_models.Mlp(width=8, depth=1)
        gm, compiler = self.aot_compiled(module, torch.randn(3, 8))
        plain = SimpleNamespace(output_type=SimpleNamespace(name="non_alias"))
        cases = {
            "mutates_data": SimpleNamespace(input_info=[SimpleNamespace(mutates_data=True)],
                                            output_info=[plain]),
            "alias_of_input": SimpleNamespace(
                input_info=[], output_info=[SimpleNamespace(
                    output_type=SimpleNamespace(name="alias_of_input"))]),
            "no metadata": None,
            "a subclass input": SimpleNamespace(
                input_info=[], output_info=[plain],
                subclass_inp_meta=[type("SubclassCreationMeta", (), {})()]),
        }
        for name, metadata in cases.items():
            compiler.compiled_forward = (compiler.compiled_forward[0], metadata)
            with self.assertRaises(door_function.Unsupported, msg=name):
                door_function.aot_partition(gm, [torch.randn(3, 8)], compiler)

    def test_a_graph_the_function_cannot_take_is_refused(self):
        # Outputs of the joint graph that are not all differentiable, and a
        # backward whose gradients do not fit its inputs: AOTAutograd's path.
        module = gpu_models.Mlp(width=8, depth=1)
        forward, backward = partition_of(module, torch.randn(2, 8))
        compiler = StepCompiler("cudagraphs", device="sim", name="door", lazy=True)
        with self.assertRaises(door_function.Unsupported):
            door_function.door_function(forward, backward, 1, [True, False, False, False],
                                        compiler)

    def test_on_by_default_and_off_with_the_variable(self):
        previous = os.environ.pop("GROVE_DOOR_FUNCTION", None)
        try:
            self.assertTrue(door_function.enabled())
            for value, expected in (("0", False), ("1", True)):
                os.environ["GROVE_DOOR_FUNCTION"] = value
                self.assertEqual(door_function.enabled(), expected, value)
        finally:
            os.environ.pop("GROVE_DOOR_FUNCTION", None)
            if previous is not None:
                os.environ["GROVE_DOOR_FUNCTION"] = previous

    def test_c_apply_matches_the_python_apply(self):
        # Note [The door's Function applied in C]: outputs and gradients as
        # through Function.apply; GROVE_DOOR_APPLY=python keeps that apply;
        # under a functorch transform the Python apply runs (PyTorch 2.x).
        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, weight, x):
                ctx.save_for_backward(weight, x)
                return weight * x

            @staticmethod
            def backward(ctx, gradient):
                weight, x = ctx.saved_tensors
                return gradient * x, gradient * weight

        weight, x = torch.randn(5, requires_grad=True), torch.randn(5)
        results = []
        for apply in (Scale.apply, door_function.c_apply(Scale)):
            weight.grad = None
            out = apply(weight, x)
            out.sum().backward()
            results.append((out.detach(), weight.grad))
        torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)
        previous = os.environ.get("GROVE_DOOR_APPLY")
        os.environ["GROVE_DOOR_APPLY"] = "python"
        try:
            self.assertEqual(door_function.c_apply(Scale), Scale.apply)
        finally:
            os.environ.pop("GROVE_DOOR_APPLY")
            if previous is not None:
                os.environ["GROVE_DOOR_APPLY"] = previous
        func = getattr(torch, "func", None)
        if func is not None:
            # PyTorch 2.x, a transform active: the Python apply runs, which
            # refuses a Function without setup_context under a transform.
            apply = door_function.c_apply(Scale)
            with self.assertRaisesRegex(RuntimeError, "setup_context"):
                func.grad(lambda w: apply(w, x).sum())(weight.detach())


if __name__ == "__main__":
    junit_main.main()
