"""Gradients through the door (grove.training.compile_module, sim, torch 1.13
CPU) against torch autograd for a small model with dropout (issue 32 part 6).

- p = 0: every gradient within rtol 1e-4, atol 1e-5 of torch autograd's.
- p > 0: the masks are random, so the oracle is Euler's identity, which needs
  no mask: the model is positively homogeneous in its weights (no biases,
  relu), so sum(grad * w) over all weights = degree * loss for whatever mask
  the step drew, as long as the backward uses the forward's. Where PyTorch
  draws the mask (dropout in training mode runs in PyTorch between grove
  segments today), the same torch seed gives torch's mask, and the gradients
  are also compared with torch autograd's.
"""
import copy
import os
import sys
import unittest

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grove  # noqa: E402,F401
import grove.training  # noqa: E402
import junit_main  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
SEED = 20261125


class DropoutNet(nn.Module):
    """relu(dropout(x W1^T)) W2^T: loss = mean(output^2) is homogeneous of
    degree 4 in (W1, W2) jointly."""

    def __init__(self, p, width=16, hidden=32, out=8):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden, bias=False)
        self.drop = nn.Dropout(p)
        self.fc2 = nn.Linear(hidden, out, bias=False)

    def forward(self, x):
        return self.fc2(torch.relu(self.drop(self.fc1(x))))


DEGREE = 4


def loss_of(output):
    return output.pow(2).mean()


class DropoutTrainingTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(SEED)

    def steps(self, p, mode, steps=4):
        """(loss, gradients, weights) per step for torch and grove `mode`,
        from the same parameters and inputs, each step under the same torch
        seed."""
        module = DropoutNet(p)
        inputs = [torch.randn(4, 16) for _ in range(steps)]
        results = {}
        for who in ("torch", mode):
            model = copy.deepcopy(module)
            trained = model if who == "torch" else grove.training.compile_module(model, mode)
            results[who] = []
            for step, x in enumerate(inputs):
                model.zero_grad(set_to_none=True)
                torch.manual_seed(SEED + step)
                loss = loss_of(trained(x))
                loss.backward()
                results[who].append((loss.item(), [w.grad.clone() for w in model.parameters()],
                                     [w.detach().clone() for w in model.parameters()]))
        return results

    def test_p0_gradients_match_torch_autograd(self):
        for mode in ("eager", "cudagraphs"):
            results = self.steps(0.0, mode)
            for step, ((loss, grads, _), (want_loss, want_grads, _)) in enumerate(
                    zip(results[mode], results["torch"])):
                self.assertAlmostEqual(loss, want_loss, delta=RTOL * abs(want_loss) + ATOL)
                for index, (got, want) in enumerate(zip(grads, want_grads)):
                    torch.testing.assert_close(
                        got, want, rtol=RTOL, atol=ATOL,
                        msg=lambda m: "%s step %d gradient %d (seed %d): %s"
                        % (mode, step, index, SEED, m))

    def test_dropout_gradients_satisfy_eulers_identity(self):
        for mode in ("eager", "cudagraphs"):
            results = self.steps(0.5, mode)
            for step, (loss, grads, weights) in enumerate(results[mode]):
                euler = sum((g.double() * w.double()).sum().item()
                            for g, w in zip(grads, weights))
                self.assertAlmostEqual(
                    euler, DEGREE * loss, delta=1e-4 * abs(DEGREE * loss),
                    msg="%s step %d: sum(grad * w) against %d loss (seed %d)"
                    % (mode, step, DEGREE, SEED))

    def test_dropout_gradients_match_torch_autograd_under_the_same_seed(self):
        for mode in ("eager", "cudagraphs"):
            results = self.steps(0.5, mode)
            for step, ((loss, grads, _), (want_loss, want_grads, _)) in enumerate(
                    zip(results[mode], results["torch"])):
                self.assertAlmostEqual(loss, want_loss, delta=RTOL * abs(want_loss) + ATOL,
                                       msg="%s step %d loss (seed %d)" % (mode, step, SEED))
                for index, (got, want) in enumerate(zip(grads, want_grads)):
                    torch.testing.assert_close(
                        got, want, rtol=RTOL, atol=ATOL,
                        msg=lambda m: "%s step %d gradient %d (seed %d): %s"
                        % (mode, step, index, SEED, m))


if __name__ == "__main__":
    junit_main.main()
