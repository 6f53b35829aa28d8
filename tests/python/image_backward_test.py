"""The backwards of the image ops (convolution, batch norm, pooling) through
make_fx of torch.autograd.grad, imported whole into grove on sim (strict) and
compared with torch, as training_test.BackwardOpsTest does for the others; and
a small convolutional network trained through grove.training against torch."""
import copy
import os
import sys
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grove.training  # noqa: E402
import junit_main  # noqa: E402
from training_test import (SEED, assert_close_all, check_forward_and_backward,  # noqa: E402
                           grads)


class ImageBackwardsTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(SEED)

    def check(self, function, *inputs, expected_ops=(), atol=1e-4):
        return check_forward_and_backward(self, function, *inputs, expected_ops=expected_ops,
                                          atol=atol)

    def test_convolution_backward(self):
        x = torch.randn(2, 4, 7, 8)
        weights = torch.randn(2, 6, 8, 8)
        for stride, padding, dilation, groups in ((1, 1, 1, 1), (2, 1, 1, 1), (2, 0, 1, 2),
                                                  (1, 2, 2, 2), (3, 0, 1, 1)):
            weight = torch.randn(6, 4 // groups, 3, 3) * 0.3
            bias = torch.randn(6)

            def function(x, w, b):
                y = F.conv2d(x, w, b, stride, padding, dilation, groups)
                return (y * weights[..., :y.shape[2], :y.shape[3]]).sum()

            with self.subTest(stride=stride, padding=padding, dilation=dilation, groups=groups):
                self.check(function, x, weight, bias, expected_ops=["aten.convolution_backward"])

    def test_pooling_backwards(self):
        x = torch.randn(2, 3, 7, 8)
        self.check(lambda x: F.max_pool2d(x, 3, 2, 1).pow(2).sum(), x,
                   expected_ops=["aten.max_pool2d_with_indices_backward"])
        self.check(lambda x: F.max_pool2d(x, 2, 1, 1, dilation=2).pow(2).sum(), x)
        self.check(lambda x: F.avg_pool2d(x, 3, 2, 1).pow(2).sum()
                   + F.avg_pool2d(x, 2, count_include_pad=False, ceil_mode=True).pow(2).sum(), x,
                   expected_ops=["aten.avg_pool2d_backward"])
        self.check(lambda x: F.adaptive_avg_pool2d(x, (3, 5)).pow(2).sum()
                   + F.adaptive_avg_pool2d(x, 1).pow(2).sum(), x)

    def test_upsampling_cumsum_and_padding_backwards(self):
        x = torch.randn(2, 3, 5, 6)
        self.check(lambda x: F.interpolate(x, scale_factor=2).pow(2).sum()
                   + F.interpolate(x, size=(7, 4)).pow(2).sum(), x,
                   expected_ops=["aten.upsample_nearest2d_backward"])
        self.check(lambda x: torch.cumsum(x, -1).pow(2).sum() + F.pad(x, (1, 2, 0, 1)).pow(2).sum(),
                   x, expected_ops=["aten.flip"])

    def test_batch_norm_backwards(self):
        x, w, b = torch.randn(3, 4, 5, 6), torch.randn(4), torch.randn(4)
        mean, var = torch.randn(4), torch.rand(4) + 0.5
        weights = torch.randn(3, 4, 5, 6)
        self.check(lambda x, w, b: (F.batch_norm(x, None, None, w, b, True) * weights).sum(),
                   x, w, b, expected_ops=["aten.native_batch_norm_backward"])
        self.check(lambda x, w, b: (F.batch_norm(x, mean, var, w, b, False) * weights).sum(),
                   x, w, b, expected_ops=["aten.native_batch_norm_backward"])


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1)
        self.conv2 = nn.Conv2d(8, 8, 3, 2, 1, groups=2, bias=False)
        self.norm = nn.BatchNorm2d(8, track_running_stats=False)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.norm(self.conv2(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ConvTrainingTest(unittest.TestCase):
    def test_conv_net_gradients_match_torch(self):
        torch.manual_seed(SEED)
        module = SmallConvNet()
        inputs = [torch.randn(2, 3, 12, 12) for _ in range(3)]
        results = {}
        for mode in ("torch", "eager", "cudagraphs"):
            model = copy.deepcopy(module)
            trained = model if mode == "torch" else grove.training.compile_module(model, mode)
            results[mode] = []
            for x in inputs:
                model.zero_grad(set_to_none=True)
                trained(x).pow(2).mean().backward()
                results[mode].append(grads(model))
            if mode != "torch":
                for runner in trained.compiler.runners():
                    self.assertEqual(runner.plan.unsupported, [], runner.plan.name)
        for step in range(len(inputs)):
            assert_close_all(self, results["eager"][step], results["torch"][step],
                             "step %d gradient" % step)
            for a, b in zip(results["cudagraphs"][step], results["eager"][step]):
                self.assertTrue(torch.equal(a, b))


if __name__ == "__main__":
    junit_main.main()
