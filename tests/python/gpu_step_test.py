"""The whole training step (grove.training.compile_step) and bf16 autocast
through the door, on a GPU host (PyTorch 2.x). Skips without CUDA (CI:
step_test.py covers the same on sim with PyTorch 1.13).

- compile_step, 30 steps of the mlp and the gpt (gpu_models.py, smaller
  sizes) with torch.optim.AdamW and grove.optim.SGD: losses within rtol 2e-3,
  atol 2e-4 of torch eager (f32, TF32 off); "cudagraphs" equals "eager"
  bitwise; nothing lands in .grad; the gpt also with GROVE_FUSE_SIBLING_GEMMS=1.
- torch.autocast("cuda", dtype=torch.bfloat16) around torch.compile(backend=
  "grove") training and around compile_step: losses within rtol 3e-2,
  atol 3e-2 of eager autocast over 20 steps (bf16 rounding, a different
  accumulation order), cudagraphs equal to grove eager bitwise."""
import copy
import os
import sys
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_models  # noqa: E402

import junit_main  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
RTOL, ATOL = 2e-3, 2e-4
BF16_RTOL, BF16_ATOL = 3e-2, 3e-2
SEED = 20261126


def mlp_case():
    model = gpu_models.Mlp(width=256, depth=4)
    target = torch.randn(32, 256, device="cuda")

    def batch(step):
        generator = torch.Generator(device="cuda").manual_seed(SEED + step)
        return (torch.randn(32, 256, device="cuda", generator=generator), target)

    return model, batch, lambda model, x, y: F.mse_loss(model(x), y)


def gpt_case():
    model = gpu_models.Gpt(vocab=512, width=128, heads=4, layers=2, max_len=64)

    def batch(step):
        generator = torch.Generator(device="cuda").manual_seed(SEED + step)
        tokens = torch.randint(0, 512, (8, 33), device="cuda", generator=generator)
        return (tokens[:, :-1].contiguous(), tokens[:, 1:].reshape(-1).contiguous())

    def loss(model, tokens, targets):
        return F.cross_entropy(model(tokens).reshape(-1, 512), targets)

    return model, batch, loss


def optimizer_of(kind, params):
    import grove.optim

    if kind == "torch_adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    if kind == "grove_sgd":
        return grove.optim.SGD(params, lr=0.01, momentum=0.9)
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


def eager(module, batch, loss_fn, kind, steps, autocast=False):
    model = copy.deepcopy(module)
    optimizer = optimizer_of(kind.replace("grove_", "torch_"), list(model.parameters()))
    losses = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(model, *batch(step))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().float())
    return torch.stack(losses)


def whole_step(module, batch, loss_fn, kind, steps, mode, autocast=False):
    import grove.training

    model = copy.deepcopy(module)
    step_fn = grove.training.compile_step(model, loss_fn,
                                          optimizer_of(kind, list(model.parameters())),
                                          mode=mode)
    losses = []
    for step in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            losses.append(step_fn(*batch(step)).detach().float())
    for parameter in model.parameters():
        assert parameter.grad is None, "compile_step keeps the gradients in grove"
    return torch.stack(losses)


def door(module, batch, loss_fn, steps, mode, autocast=False):
    import grove.torch  # noqa: F401 (registers the backend)

    torch._dynamo.reset()
    model = copy.deepcopy(module)
    run = torch.compile(model, backend="grove", options={"mode": mode}, dynamic=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(run, *batch(step))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().float())
    return torch.stack(losses)


@unittest.skipUnless(HAS_CUDA, "no CUDA device")
class GpuStepTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def setUp(self):
        torch.manual_seed(SEED)

    def check_whole_step(self, case, kind, steps=30):
        module, batch, loss_fn = case()
        module = module.cuda()
        expected = eager(module, batch, loss_fn, kind, steps)
        grove_eager = whole_step(module, batch, loss_fn, kind, steps, "eager")
        graphs = whole_step(module, batch, loss_fn, kind, steps, "cudagraphs")
        torch.testing.assert_close(grove_eager, expected, rtol=RTOL, atol=ATOL)
        self.assertTrue(torch.equal(graphs, grove_eager), "cudagraphs differs from grove eager")

    def test_mlp_whole_step_torch_adamw(self):
        self.check_whole_step(mlp_case, "torch_adamw")

    def test_gpt_whole_step_torch_adamw(self):
        self.check_whole_step(gpt_case, "torch_adamw")

    def test_gpt_whole_step_with_sibling_gemms_fused(self):
        # Note [Sibling GEMMs as one] (compiler/lowering/sibling_gemms.h): q/k/v
        # and their gradients as one cuBLAS GEMM each, read while the step compiles.
        previous = os.environ.get("GROVE_FUSE_SIBLING_GEMMS")
        os.environ["GROVE_FUSE_SIBLING_GEMMS"] = "1"
        try:
            self.check_whole_step(gpt_case, "torch_adamw")
        finally:
            if previous is None:
                os.environ.pop("GROVE_FUSE_SIBLING_GEMMS", None)
            else:
                os.environ["GROVE_FUSE_SIBLING_GEMMS"] = previous

    def test_gpt_whole_step_grove_sgd(self):
        self.check_whole_step(gpt_case, "grove_sgd")

    def test_bf16_autocast_through_the_door(self):
        try:
            import torch._dynamo  # noqa: F401
        except ImportError:
            self.skipTest("this PyTorch has no torch._dynamo")
        for case in (mlp_case, gpt_case):
            module, batch, loss_fn = case()
            module = module.cuda()
            expected = eager(module, batch, loss_fn, "torch_sgd", 20, autocast=True)
            grove_eager = door(module, batch, loss_fn, 20, "eager", autocast=True)
            graphs = door(module, batch, loss_fn, 20, "cudagraphs", autocast=True)
            torch.testing.assert_close(grove_eager, expected, rtol=BF16_RTOL, atol=BF16_ATOL)
            self.assertTrue(torch.equal(graphs, grove_eager), case.__name__)

    def test_bf16_autocast_whole_step(self):
        module, batch, loss_fn = mlp_case()
        module = module.cuda()
        expected = eager(module, batch, loss_fn, "torch_adamw", 20, autocast=True)
        grove_eager = whole_step(module, batch, loss_fn, "torch_adamw", 20, "eager",
                                 autocast=True)
        graphs = whole_step(module, batch, loss_fn, "torch_adamw", 20, "cudagraphs",
                            autocast=True)
        torch.testing.assert_close(grove_eager, expected, rtol=BF16_RTOL, atol=BF16_ATOL)
        self.assertTrue(torch.equal(graphs, grove_eager))


if __name__ == "__main__":
    junit_main.main()
