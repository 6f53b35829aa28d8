"""Models on a GPU other than the caller's current one, on a host with two
or more GPUs (Note [The caller's current device stays as it was],
runtime/device_context.h): a module on cuda:1 compiled with backend="grove"
while cuda:0 is current, for inference and for a training step, gives eager's
results on cuda:1 and leaves cuda:0 current after compiling, calling and
freeing its outputs; two models on two GPUs called in turn each give their
own eager results; grove.Model on cuda:1 likewise. Skips without two CUDA
devices (CI has none) or without torch._dynamo for the door's cases."""
import gc
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import junit_main  # noqa: E402

from torch_features import HAS_DYNAMO  # noqa: E402

TWO_GPUS = torch.cuda.is_available() and torch.cuda.device_count() >= 2
RTOL, ATOL = 2e-3, 2e-4


def mlp(device, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                               torch.nn.LayerNorm(64), torch.nn.Linear(64, 8)).to(device)


@unittest.skipUnless(TWO_GPUS, "needs two CUDA devices (the multi-GPU host runs this test)")
class GpuMultiDeviceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.backends.cuda.matmul.allow_tf32 = False

    def setUp(self):
        import grove.torch  # noqa: F401 (registers backend="grove")

        torch.cuda.set_device(0)

    def assert_current(self, index, what):
        self.assertEqual(torch.cuda.current_device(), index,
                         "%s moved the caller's current device" % what)
        self.assertEqual(torch.empty(1, device="cuda").device, torch.device("cuda", index), what)

    @unittest.skipUnless(HAS_DYNAMO, "this PyTorch has no torch._dynamo")
    def test_inference_on_the_other_gpu_leaves_the_current_device(self):
        torch._dynamo.reset()
        model = mlp("cuda:1", 1).eval()
        x = torch.randn(4, 32, device="cuda:1")
        with torch.no_grad():
            expected = model(x)
            compiled = torch.compile(model, backend="grove", dynamic=False)
            for call in range(4):  # warm-up, recording, replays
                out = compiled(x)
                self.assert_current(0, "call %d" % call)
                self.assertEqual(out.device, torch.device("cuda", 1))
                torch.testing.assert_close(out, expected, rtol=RTOL, atol=ATOL)
        del out
        gc.collect()
        self.assert_current(0, "freeing the outputs")

    @unittest.skipUnless(HAS_DYNAMO, "this PyTorch has no torch._dynamo")
    def test_a_training_step_on_the_other_gpu(self):
        torch._dynamo.reset()
        reference = mlp("cuda:1", 2)
        model = mlp("cuda:1", 2)
        x = torch.randn(8, 32, device="cuda:1")
        y = torch.randn(8, 8, device="cuda:1")
        compiled = torch.compile(model, backend="grove", dynamic=False)
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (reference, model)]
        for step in range(4):
            losses = []
            for module, optimizer in zip((reference, compiled), optimizers):
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(module(x), y)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            self.assert_current(0, "training step %d" % step)
            self.assertAlmostEqual(losses[0], losses[1], delta=1e-5 * max(1.0, abs(losses[0])))
        for a, b in zip(reference.parameters(), model.parameters()):
            torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL)

    @unittest.skipUnless(HAS_DYNAMO, "this PyTorch has no torch._dynamo")
    def test_two_models_on_two_gpus_called_in_turn(self):
        torch._dynamo.reset()
        torch.cuda.set_device(1)  # the current device is the second GPU this time
        models = [mlp("cuda:%d" % i, 3 + i).eval() for i in range(2)]
        inputs = [torch.randn(4, 32, device="cuda:%d" % i) for i in range(2)]
        with torch.no_grad():
            expected = [m(x) for m, x in zip(models, inputs)]
            compiled = [torch.compile(m, backend="grove", dynamic=False) for m in models]
            for call in range(4):
                for i in (0, 1):
                    out = compiled[i](inputs[i])
                    self.assertEqual(out.device, torch.device("cuda", i))
                    torch.testing.assert_close(out, expected[i], rtol=RTOL, atol=ATOL)
                    self.assert_current(1, "model %d, call %d" % (i, call))

    def test_grove_model_on_the_other_gpu(self):
        import grove

        program = {"name": "scale", "inputs": [{"name": "x", "shape": [4], "dtype": "f32"}],
                   "params": [], "nodes": [{"name": "y", "op": "mul", "inputs": ["x", "x"]}],
                   "outputs": ["y"]}
        for backend in ("eager", "cudagraphs"):
            model = grove.Model(program, backend=backend, device="cuda:1")
            x = torch.arange(4.0, device="cuda:1")
            for _ in range(3):
                (out,) = model(x)
                self.assert_current(0, "grove.Model (%s)" % backend)
            torch.testing.assert_close(out, x * x)
            del out, model
            gc.collect()
            self.assert_current(0, "releasing grove.Model (%s)" % backend)


if __name__ == "__main__":
    junit_main.main()
