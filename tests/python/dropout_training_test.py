"""Gradients through the door (grove.training.compile_module, sim, torch 1.13
CPU) against torch autograd for a small model with dropout (issue 32 part 6).

- p = 0: every gradient within rtol 1e-4, atol 1e-5 of torch autograd's.
- p > 0: the masks are random, so the oracle is Euler's identity, which needs
  no mask: the model is positively homogeneous in its weights (no biases,
  relu), so sum(grad * w) over all weights = degree * loss for whatever mask
  the step drew, as long as the backward uses the forward's.
- Where PyTorch draws the mask (a random op among the compiled forward's
  ops left to PyTorch, as with PyTorch 1.13's bernoulli_ between grove
  segments), the same torch seed gives torch's mask, and the losses and
  gradients are also compared with torch autograd's. Where grove draws it
  (its own generator), that comparison means nothing; the test says which.
- Whoever draws it, a probe y = dropout(x * s) shows the mask itself: every
  element is 0 or x * s / (1 - p), about p of them are 0, each step draws a
  new mask, and s's gradient is the one of exactly that mask (the backward
  uses the forward's mask).
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
from grove.fx_common import op_name  # noqa: E402
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
# Ops that draw random numbers, as the importer may leave them to PyTorch.
RANDOM_OPS = {"aten.bernoulli", "aten.bernoulli_", "aten.native_dropout", "aten.dropout",
              "aten.rand", "aten.rand_like", "aten.uniform_", "aten.randn", "aten.randn_like",
              "aten.normal_", "aten.feature_dropout", "aten.alpha_dropout"}


def random_ops_in_pytorch(trained):
    """The random ops the compiled forwards of `trained` (a
    grove.training.TrainingModule) leave to PyTorch: where there is one,
    PyTorch draws the dropout mask from its own generator."""
    found = set()
    for runner in trained.compiler.forwards:
        for kind, node in runner.steps:
            if kind == "torch" and node.op == "call_function":
                name = op_name(node.target)
                if name in RANDOM_OPS:
                    found.add(name)
    return found


class MaskProbe(nn.Module):
    """y = dropout(x * s): the mask shows in y (x has no zeros)."""

    def __init__(self, p, width=64):
        super().__init__()
        self.s = nn.Parameter(torch.rand(width) + 0.5)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(x * self.s)


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
            if who != "torch":
                self.trained = trained
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
            drawn_by_pytorch = random_ops_in_pytorch(self.trained)
            if not drawn_by_pytorch:
                # grove draws the mask (no random op left to PyTorch): torch's
                # seed does not decide it; test_dropout_masks_... checks it.
                print("%s: grove draws the dropout mask; no comparison with torch's" % mode)
                continue
            print("%s: PyTorch draws the dropout mask (%s)" % (mode, ", ".join(
                sorted(drawn_by_pytorch))))
            for step, ((loss, grads, _), (want_loss, want_grads, _)) in enumerate(
                    zip(results[mode], results["torch"])):
                self.assertAlmostEqual(loss, want_loss, delta=RTOL * abs(want_loss) + ATOL,
                                       msg="%s step %d loss (seed %d)" % (mode, step, SEED))
                for index, (got, want) in enumerate(zip(grads, want_grads)):
                    torch.testing.assert_close(
                        got, want, rtol=RTOL, atol=ATOL,
                        msg=lambda m: "%s step %d gradient %d (seed %d): %s"
                        % (mode, step, index, SEED, m))

    def test_dropout_masks_are_fresh_per_step_and_the_backward_uses_the_forwards(self):
        p, steps = 0.5, 4
        for mode in ("eager", "cudagraphs"):
            torch.manual_seed(SEED)
            model = MaskProbe(p)
            trained = grove.training.compile_module(model, mode)
            weights = torch.randn(32, 64)
            masks = []
            for step in range(steps):
                x = torch.randn(32, 64)
                model.zero_grad(set_to_none=True)
                y = trained(x)
                (y * weights).sum().backward()
                kept = x * model.s.detach() / (1 - p)
                mask = y != 0
                what = "%s step %d (seed %d)" % (mode, step, SEED)
                # Every element dropped or kept and scaled.
                torch.testing.assert_close(y.detach(), torch.where(mask, kept, torch.zeros(())),
                                           msg=lambda m: "%s: %s" % (what, m))
                # About p dropped: 2048 draws, 5 standard deviations (0.055).
                dropped = 1.0 - mask.double().mean().item()
                self.assertLess(abs(dropped - p), 5 * (p * (1 - p) / mask.numel()) ** 0.5,
                                "%s: %.3f of the elements dropped" % (what, dropped))
                # The backward's mask is the forward's.
                expected = (weights * mask * x / (1 - p)).sum(0)
                torch.testing.assert_close(model.s.grad, expected, rtol=RTOL, atol=ATOL,
                                           msg=lambda m: "%s gradient: %s" % (what, m))
                masks.append(mask)
            for step in range(1, steps):
                self.assertFalse(torch.equal(masks[step], masks[0]),
                                 "%s: step %d drew step 0's mask again" % (mode, step))


if __name__ == "__main__":
    junit_main.main()
