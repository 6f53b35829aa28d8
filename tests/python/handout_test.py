"""The door's per-stage host path (issue 34): OutputPicker (grove/output_picker.py)
gathers a graph's outputs with no Python per output, and a backward's gradients
are noted as one set (grove.hand_out_gradients) and given memory of their own
before the next forward only where a parameter still holds them (Note
[Gradients handed out of the pool], grove/gradients.py)."""

import unittest
import weakref

import torch

import grove
from grove import gradients
from grove.output_picker import OutputPicker
import junit_main
from lockstep_training import step_in_lockstep


class OutputPickerTest(unittest.TestCase):
    def test_results_in_order_come_back_as_the_graphs_container(self):
        results = [torch.randn(2), torch.randn(3)]
        as_list = OutputPicker([("result", 0), ("result", 1)], 2, list)
        self.assertIs(as_list(results, ()), results)
        as_tuple = OutputPicker([("result", 0), ("result", 1)], 2, tuple)
        picked = as_tuple(results, ())
        self.assertIsInstance(picked, tuple)
        self.assertIs(picked[0], results[0])
        self.assertIs(picked[1], results[1])

    def test_mixes_results_arguments_and_constants_in_the_graphs_order(self):
        results = ["r0", "r1", "r2"]
        args = ("a0", "a1")
        sources = [("result", 2), ("value", None), ("argument", 1), ("result", 0),
                   ("value", 7), ("argument", 0)]
        picker = OutputPicker(sources, 3, tuple)
        self.assertEqual(picker(results, args), ("r2", None, "a1", "r0", 7, "a0"))
        # The same plan on the next call's pieces.
        self.assertEqual(picker(["s0", "s1", "s2"], ("b0", "b1")),
                         ("s2", None, "b1", "s0", 7, "b0"))

    def test_one_output_and_a_graph_returning_one_value(self):
        self.assertEqual(OutputPicker([("result", 1)], 2, list)(["x", "y"], ()), ["y"])
        self.assertEqual(OutputPicker([("argument", 0)], 1, tuple)(["x"], ("a",)), ("a",))
        self.assertEqual(OutputPicker([("result", 1)], 2, None)(["x", "y"], ()), "y")

    def test_a_call_with_another_number_of_results_is_refused(self):
        picker = OutputPicker([("result", 0), ("result", 1)], 2, tuple)
        with self.assertRaisesRegex(RuntimeError, "produced 3 results where its plan has 2"):
            picker(["x", "y", "z"], ())


class GradientSetTest(unittest.TestCase):
    def setUp(self):
        del gradients._handed_gradients[:]

    def tearDown(self):
        del gradients._handed_gradients[:]

    def test_only_gradients_still_held_as_grad_are_copied(self):
        torch.manual_seed(3)
        parameters = [torch.nn.Parameter(torch.randn(4)) for _ in range(4)]
        handed = [torch.randn(4) for _ in parameters]
        for parameter, gradient in zip(parameters, handed):
            parameter.grad = gradient
        parameters[1].grad = None  # zero_grad(set_to_none=True)
        parameters[2].grad = torch.randn(4)  # replaced by the user
        replaced = parameters[2].grad
        grove.hand_out_gradients(tuple(weakref.ref(p) for p in parameters),
                                 [g.data_ptr() for g in handed])
        del parameters[3]  # a parameter that died: its entry is skipped
        grove.keep_handed_gradients()
        self.assertEqual(gradients._handed_gradients, [])
        self.assertIsNot(parameters[0].grad, handed[0])
        self.assertNotEqual(parameters[0].grad.data_ptr(), handed[0].data_ptr())
        self.assertTrue(torch.equal(parameters[0].grad, handed[0]))
        self.assertIsNone(parameters[1].grad)
        self.assertIs(parameters[2].grad, replaced)

    def test_a_set_whose_grads_are_all_none_copies_nothing(self):
        parameters = [torch.nn.Parameter(torch.randn(3)) for _ in range(3)]
        grove.hand_out_gradients(tuple(weakref.ref(p) for p in parameters), [1, 2, 3])
        grove.keep_handed_gradients()
        self.assertTrue(all(p.grad is None for p in parameters))
        self.assertEqual(gradients._handed_gradients, [])

    def test_held_gradients_are_never_compared_with_none(self):
        # Note [Tensors are never counted against None] (grove/gradients.py):
        # a set whose .grad are tensors is copied without Tensor.__eq__.
        from unittest import mock

        from grove import door_function

        parameters = [torch.nn.Parameter(torch.randn(3)) for _ in range(3)]
        handed = [torch.randn(3) for _ in parameters]
        for parameter, gradient in zip(parameters, handed):
            parameter.grad = gradient
        grove.hand_out_gradients(tuple(weakref.ref(p) for p in parameters),
                                 [g.data_ptr() for g in handed])
        compared = []
        with mock.patch.object(torch.Tensor, "__eq__",
                               lambda self, other: compared.append(other) or False):
            grove.keep_handed_gradients()
            # The direct gradients' accumulation asks the same question.
            door_function._set_gradients(parameters, [torch.ones(3)] * 3)
        self.assertEqual(compared, [])
        for parameter, gradient in zip(parameters, handed):
            self.assertNotEqual(parameter.grad.data_ptr(), gradient.data_ptr())
            torch.testing.assert_close(parameter.grad, gradient + 1)

    def test_a_trained_module_notes_one_set_per_backward(self):
        import grove.training

        torch.manual_seed(5)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 2))
        reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                        torch.nn.Linear(16, 2))
        reference.load_state_dict(model.state_dict())
        trained = grove.training.compile_module(model, "cudagraphs", device="sim")
        for step in range(3):
            x = torch.randn(4, 8)
            model.zero_grad(set_to_none=True)
            reference.zero_grad(set_to_none=True)
            trained(x).square().sum().backward()
            reference(x).square().sum().backward()
            self.assertEqual(len(gradients._handed_gradients), 1, "step %d" % step)
            references, pointers = gradients._handed_gradients[0]
            self.assertEqual(len(references), 4)
            self.assertEqual(list(pointers), [p.grad.data_ptr() for p in model.parameters()])
            for ours, theirs in zip(model.parameters(), reference.parameters()):
                torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-5)


class Scaled(torch.nn.Module):
    """A linear layer times a weight: the backward needs the weight itself
    (the gradient of h * scale by h is grad * scale), saved as it is."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.scale = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        return self.linear(x) * self.scale


class SavedParameterTest(unittest.TestCase):
    def test_saved_parameters_are_bound_in_the_backward(self):
        # Note [Saved parameters] (grove/training_steps.py): the weight the
        # backward reads is bound at the parameter's address, not copied in,
        # and the in-place updates of an optimizer between steps are read.
        import copy

        import grove.training

        torch.manual_seed(21)
        model = Scaled()
        reference = copy.deepcopy(model)
        trained = grove.training.compile_module(model, "cudagraphs", device="sim")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.01)
        for step in range(5):
            x = torch.randn(4, 8)
            for module, run, opt in ((model, trained, optimizer),
                                     (reference, reference, reference_optimizer)):
                opt.zero_grad(set_to_none=True)
                run(x).square().mean().backward()
            for ours, theirs in zip(model.parameters(), reference.parameters()):
                torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-5,
                                           msg="step %d" % step)
            optimizer.step()
            reference_optimizer.step()
        backward = trained.compiler.backwards[0]
        bound = {address for segment in backward.segments for _, address in segment["bound"]}
        self.assertIn(model.scale.data_ptr(), bound)

    def test_views_at_a_parameters_address_are_aliases(self):
        # PyTorch 2.x hands the backward a saved weight as a plain tensor
        # (not the Parameter): found by its address.
        from grove.training_steps import StepContext

        weight = torch.nn.Parameter(torch.randn(4, 3))
        bias = torch.nn.Parameter(torch.randn(4))
        step = StepContext()
        step.forward_called([torch.randn(2, 3), weight, bias])
        args = [weight.detach(), weight.detach().t(), torch.randn(4, 3), bias.detach(),
                bias.detach()[1:], torch.empty(0), "not a tensor"]
        self.assertEqual(step.parameter_aliases(args), [0, 1, 3])

    def test_a_transposed_weight_is_bound_as_its_base(self):
        # parameter_views.bound_as_bases: the view becomes its contiguous base
        # (bound) and a permute in the graph; a view no permutation makes
        # contiguous is left an input.
        from torch.fx.experimental.proxy_tensor import make_fx

        from grove import importer, parameter_views

        torch.manual_seed(8)
        weight = torch.randn(5, 3)
        gradient = torch.randn(4, 5)

        def backward(weight_t, grad):
            return (torch.mm(grad, weight_t.t()),)  # the grad of x @ weight.t()

        graph = make_fx(backward)(weight.t(), gradient)
        module, examples, bound = parameter_views.bound_as_bases(graph, [weight.t(), gradient],
                                                                 {0})
        self.assertEqual(bound, [0])
        self.assertTrue(examples[0].is_contiguous())
        self.assertEqual(examples[0].data_ptr(), weight.data_ptr())
        plan = importer.import_graph(module, examples, static_inputs=bound, strict=True)
        runner = plan.compile(backend="cudagraphs", device="sim")
        self.assertEqual([address for _, address in runner.segments[0]["bound"]],
                         [weight.data_ptr()])
        for call in range(4):
            gradient = torch.randn(4, 5)
            (got,) = runner(weight.t(), gradient)
            torch.testing.assert_close(got, gradient @ weight, rtol=1e-5, atol=1e-5,
                                       msg="call %d" % call)
            weight.mul_(0.5)  # read in place: an optimizer's update is seen
        strided = torch.randn(6, 4)[::2]
        _, _, left = parameter_views.bound_as_bases(graph, [strided, gradient], {0})
        self.assertEqual(left, [])

    def test_verify_mode_reads_a_bound_base_as_the_base(self):
        # Note [Bound bases read as bases] (grove/parameter_views.py): the
        # backward is called with the saved transpose, its placeholder now
        # takes the base; verify mode's reference run (and any PyTorch step
        # reading the placeholder) read the argument as given and raised
        # "mat1 and mat2 shapes cannot be multiplied" on every trained Linear.
        from torch.fx.experimental.proxy_tensor import make_fx

        from grove import importer, parameter_views

        torch.manual_seed(9)
        weight = torch.randn(5, 3)

        def backward(weight_t, grad):
            return (torch.mm(grad, weight_t.t()), torch.cumprod(weight_t, 1))

        gradient = torch.randn(4, 5)
        graph = make_fx(backward)(weight.t(), gradient)
        module, examples, bound = parameter_views.bound_as_bases(graph, [weight.t(), gradient],
                                                                 {0})
        plan = importer.import_graph(module, examples, static_inputs=bound)
        self.assertIn("aten.cumprod", [op for _, op, _ in plan.unsupported])
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend, device="sim", verify=True)
            for call in range(3):
                gradient = torch.randn(4, 5)
                got = runner(weight.t(), gradient)
                expected = backward(weight.t(), gradient)
                for a, e in zip(got, expected):
                    torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5,
                                               msg="%s call %d" % (backend, call))


EXIT_SCRIPT = """
import torch
import grove.training

torch.manual_seed(11)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
trained = grove.training.compile_module(model, "cudagraphs", device="sim")
for _ in range(5):
    model.zero_grad(set_to_none=True)
    trained(torch.randn(4, 8)).sum().backward()
print("trained")
"""


class TrainingExitTest(unittest.TestCase):
    def test_the_interpreter_exits_cleanly_with_gradients_in_the_pool(self):
        # Note [Releases during interpreter exit] (grove/_descs.py): the
        # parameters' .grad still view pool memory when Python exits; freeing
        # them releases bound descriptions through grove's ctypes callback,
        # which crashed (SIGSEGV) once the module holding it was torn down.
        import os
        import subprocess
        import sys

        result = subprocess.run([sys.executable, "-c", EXIT_SCRIPT], capture_output=True,
                                text=True, env=dict(os.environ), timeout=300)
        self.assertEqual(result.returncode, 0, "exit status %d; stderr:\n%s"
                         % (result.returncode, result.stderr[-2000:]))
        self.assertIn("trained", result.stdout)


class _ChannelsLastNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x))).mean((2, 3))


class ParameterViewsTest(unittest.TestCase):
    """Note [Static inputs in a permuted layout] (grove/parameter_views.py)."""

    def test_channels_last_weights_are_bound_in_inference(self):
        import torch.nn.functional as F

        import grove.torch  # noqa: F401

        torch.manual_seed(2)
        conv = torch.nn.Conv2d(3, 8, 3).to(memory_format=torch.channels_last)
        self.assertFalse(conv.weight.is_contiguous())

        def network(x, weight, bias):
            return F.conv2d(x, weight, bias).relu()

        for backend in ("eager", "cudagraphs"):
            x = torch.randn(2, 3, 8, 8)
            with torch.no_grad():  # an inference graph (with gradients: a training one)
                compiled = grove.torch.compile_graph(network, [x, conv.weight, conv.bias],
                                                     mode=backend)
            self.assertEqual(compiled.runner.static_positions, [1, 2])
            for call in range(4):
                x = torch.randn(2, 3, 8, 8)
                with torch.no_grad():
                    got = compiled(x, conv.weight, conv.bias)
                    torch.testing.assert_close(got, network(x, conv.weight, conv.bias),
                                               rtol=1e-4, atol=1e-5,
                                               msg="%s call %d" % (backend, call))
                    conv.weight.mul_(0.9)  # bound in place: the update is read

    def test_a_channels_last_module_trains_equal_to_eager(self):
        import copy

        from grove import training

        torch.manual_seed(3)
        model = _ChannelsLastNet().to(memory_format=torch.channels_last)
        reference = copy.deepcopy(model)
        compiled = training.compile_module(model, mode="cudagraphs")
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
        for step in range(4):
            x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
            losses = step_in_lockstep((compiled, reference), optimizers,
                                      lambda call: call(x).square().mean())
            if hasattr(compiled, "mark_step_begin"):
                compiled.mark_step_begin()
            torch.testing.assert_close(losses[0], losses[1], rtol=1e-4, atol=1e-6,
                                       msg="step %d" % step)
        for mine, theirs in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)


if __name__ == "__main__":
    junit_main.main()
