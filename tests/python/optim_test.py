"""grove.optim runs the optimizer program C++ builds (grove_optimizer_program,
training/optimizer.cc): its inputs are the hyper-parameters and then
one gradient per parameter; every step of grove's SGD (momentum, weight
decay) and AdamW equals torch.optim's on the same parameters and gradients,
with a changing learning rate, in both modes; a bad request raises grove's
message."""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grove  # noqa: E402
from grove import optim  # noqa: E402
import junit_main  # noqa: E402

SEED = 20261126


class OptimizerProgramTest(unittest.TestCase):
    def test_inputs_are_the_hyperparameters_then_the_gradients(self):
        params = [{"name": "param0", "shape": [3, 2], "dtype": "f32"},
                  {"name": "param1", "shape": [2], "dtype": "bf16"}]
        for kind, hyper in (("sgd_momentum", ["lr", "momentum", "weight_decay"]),
                            ("adamw", ["lr", "beta1", "beta2", "eps", "weight_decay", "step"])):
            model = grove.Model(optim.optimizer_program(kind, params), stage="optimizer")
            self.assertEqual(model.input_names, hyper + ["grad.param0", "grad.param1"])
            self.assertEqual(model.output_count, 0)

    def test_a_bad_request_raises_groves_message(self):
        with self.assertRaisesRegex(grove.GroveError, "unknown optimizer 'lamb'"):
            optim.optimizer_program("lamb", [{"name": "w", "shape": [2], "dtype": "f32"}])
        with self.assertRaisesRegex(grove.GroveError, "only floating params"):
            optim.optimizer_program("adamw", [{"name": "n", "shape": [2], "dtype": "i64"}])
        with self.assertRaisesRegex(TypeError, "parameter 0 has dtype torch.int64"):
            optimizer = optim.SGD([torch.zeros(2, dtype=torch.int64)], lr=0.1)
            optimizer.param_groups[0]["params"][0].grad = torch.ones(2, dtype=torch.int64)
            optimizer.step()
        weights = [torch.nn.Parameter(torch.randn(3)) for _ in range(5)]
        for weight in weights:
            weight.grad = torch.randn(3)
        weights[3].grad = None
        with self.assertRaisesRegex(RuntimeError, r"parameter 3 \(shape \(3,\)\) has no "
                                    "gradient"):
            optim.AdamW(weights, lr=0.1).step()


class ZeroGradTest(unittest.TestCase):
    def test_zero_grad_sets_none_or_zeros_as_torch(self):
        params = [torch.nn.Parameter(torch.randn(3)) for _ in range(4)]
        optimizer = optim.AdamW(params, lr=0.1)
        for param in params:
            param.grad = torch.randn(3)
        kept = params[1].grad
        optimizer.zero_grad(set_to_none=False)  # PyTorch's: zeros in place
        self.assertIs(params[1].grad, kept)
        self.assertTrue(all(torch.equal(p.grad, torch.zeros(3)) for p in params))
        optimizer.zero_grad(set_to_none=True)  # None, in one pass
        self.assertEqual([p.grad for p in params], [None] * 4)
        optimizer.zero_grad(set_to_none=True)  # and again on parameters without one
        self.assertEqual([p.grad for p in params], [None] * 4)
        # No argument: this PyTorch's default (zeros on 1.x, None from 2.0).
        reference = torch.optim.AdamW([torch.nn.Parameter(torch.randn(3))], lr=0.1)
        reference.param_groups[0]["params"][0].grad = torch.randn(3)
        reference.zero_grad()
        for param in params:
            param.grad = torch.randn(3)
        optimizer.zero_grad()
        want = reference.param_groups[0]["params"][0].grad
        for param in params:
            self.assertEqual(param.grad is None, want is None)


class StepsMatchTorchTest(unittest.TestCase):
    def steps(self, make_optimizer, mode):
        """Parameters after each of four steps on fixed gradients, the
        learning rate halved after the second."""
        torch.manual_seed(SEED)
        params = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
        gradients = [[torch.randn_like(p) for p in params] for _ in range(4)]
        optimizer = make_optimizer(params, mode)
        history = []
        for step, grads in enumerate(gradients):
            for param, grad in zip(params, grads):
                param.grad = grad.clone()
            if step == 2:
                optimizer.param_groups[0]["lr"] *= 0.5
            optimizer.step()
            history.append([p.detach().clone() for p in params])
        return history

    def check(self, torch_optimizer, grove_optimizer):
        expected = self.steps(lambda params, mode: torch_optimizer(params), None)
        for mode in ("eager", "cudagraphs"):
            actual = self.steps(grove_optimizer, mode)
            for step, (got, want) in enumerate(zip(actual, expected)):
                for index, (g, w) in enumerate(zip(got, want)):
                    torch.testing.assert_close(
                        g, w, rtol=1e-5, atol=1e-6,
                        msg="%s: parameter %d after step %d (seed %d)" % (mode, index, step + 1,
                                                                          SEED))

    def test_sgd_with_momentum_and_weight_decay(self):
        self.check(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
                   lambda p, mode: optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01,
                                             mode=mode))

    def test_adamw(self):
        self.check(lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6,
                                               weight_decay=0.1),
                   lambda p, mode: optim.AdamW(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6,
                                               weight_decay=0.1, mode=mode))


if __name__ == "__main__":
    junit_main.main()
