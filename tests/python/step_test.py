"""The whole training step in grove (grove.training.compile_step) and mixed
precision through the door, on sim over torch CPU tensors (PyTorch 1.13 in
CI; PyTorch 2.x where installed).

Tolerances: f32 losses within rtol 1e-4, atol 1e-5 of torch eager's over 8
steps (grove's own reduction order; PyTorch's SGD and AdamW computed in f32
as grove's fused updates); "cudagraphs" equals "eager" bitwise. bf16 autocast:
losses within rtol 2e-2, atol 2e-2 of eager autocast's (bf16 keeps 8
mantissa bits, about 4e-3 relative per rounding; grove's GEMMs round their
bf16 inputs the same way but accumulate in another order, and the error
grows over the steps' updates)."""
import copy
import os
import sys
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpu_models  # noqa: E402
import grove  # noqa: E402
import grove.optim  # noqa: E402
import grove.training  # noqa: E402
import junit_main  # noqa: E402

if not hasattr(F, "scaled_dot_product_attention"):
    # PyTorch 1.13: gpu_models.Gpt's attention as matmul and softmax (what
    # compile_step writes it out as on PyTorch 2.x).
    F.scaled_dot_product_attention = grove.training.math_attention

RTOL, ATOL = 1e-4, 1e-5
BF16_RTOL, BF16_ATOL = 2e-2, 2e-2
STEPS = 8
SEED = 20261126


class Mlp(nn.Module):
    def __init__(self, width=32, depth=3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = F.gelu(layer(x), approximate="tanh")
        return x


def mlp_case():
    target = torch.randn(8, 32)
    batches = [(torch.randn(8, 32), target) for _ in range(STEPS)]
    return Mlp(), batches, lambda model, x, y: F.mse_loss(model(x), y)


def gpt_case():
    model = gpu_models.Gpt(vocab=64, width=32, heads=4, layers=2, max_len=16)
    batches = []
    for _ in range(STEPS):
        tokens = torch.randint(0, 64, (2, 9))
        batches.append((tokens[:, :-1].contiguous(), tokens[:, 1:].reshape(-1).contiguous()))

    def loss(model, tokens, targets):
        return F.cross_entropy(model(tokens).reshape(-1, 64), targets)

    return model, batches, loss


def make_optimizer(kind, params):
    if kind == "torch_sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)
    if kind == "torch_adamw":
        return torch.optim.AdamW(params, lr=1e-2, weight_decay=1e-2)
    if kind == "grove_sgd":
        return grove.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)
    return grove.optim.AdamW(params, lr=1e-2, weight_decay=1e-2)


def eager_losses(module, batches, loss_fn, kind, autocast=None):
    """torch eager with PyTorch's optimizer of the same kind."""
    model = copy.deepcopy(module)
    torch_kind = kind.replace("grove_", "torch_")
    optimizer = make_optimizer(torch_kind, list(model.parameters()))
    losses = []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        if autocast is not None:
            with torch.autocast("cpu", dtype=autocast):
                loss = loss_fn(model, *batch)
        else:
            loss = loss_fn(model, *batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().float())
    return losses, model


def grove_losses(module, batches, loss_fn, kind, mode, autocast=None, **options):
    model = copy.deepcopy(module)
    optimizer = make_optimizer(kind, list(model.parameters()))
    step = grove.training.compile_step(model, loss_fn, optimizer, mode=mode, device="sim",
                                       **options)
    losses = []
    for batch in batches:
        if autocast is not None:
            with torch.autocast("cpu", dtype=autocast):
                loss = step(*batch)
        else:
            loss = step(*batch)
        losses.append(loss.detach().float())
    return losses, model, step


class CompileStepTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(SEED)

    def check_case(self, case, kind):
        module, batches, loss_fn = case()
        expected, trained = eager_losses(module, batches, loss_fn, kind)
        results = {}
        for mode in ("eager", "cudagraphs"):
            results[mode], model, step = grove_losses(module, batches, loss_fn, kind, mode)
            for parameter in model.parameters():
                self.assertIsNone(parameter.grad, "gradients stay in grove")
        for index, (got, want) in enumerate(zip(results["eager"], expected)):
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, msg=lambda m: (
                "%s %s step %d (seed %d): %s" % (case.__name__, kind, index, SEED, m)))
        for index, (a, b) in enumerate(zip(results["cudagraphs"], results["eager"])):
            self.assertTrue(torch.equal(a, b), "%s %s step %d: cudagraphs differs from eager"
                            % (case.__name__, kind, index))
        if kind.endswith("sgd"):
            # (AdamW's update divides by the root of its second moment, so a
            # gradient near zero whose rounding differs moves a parameter by up
            # to lr: its parameters are compared through the losses only.)
            for got, want in zip(model.parameters(), trained.parameters()):
                torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
        self.assertLess(expected[-1].item(), expected[0].item(), "the steps train")
        return step

    def test_mlp_with_torch_sgd(self):
        self.check_case(mlp_case, "torch_sgd")

    def test_mlp_with_grove_adamw(self):
        self.check_case(mlp_case, "grove_adamw")

    def test_gpt_with_torch_adamw_replays_each_stage_once_per_step(self):
        step = self.check_case(gpt_case, "torch_adamw")
        runner = step.runners()[0]
        stats = runner.models()[0].stats()["tree"]
        self.assertGreater(stats["replays"], 0)
        self.assertEqual(stats["fallback_calls"], {})
        self.assertEqual(runner.plan.unsupported, [])

    def test_gpt_with_sibling_gemms_fused_tracks_eager(self):
        # Note [Sibling GEMMs of the whole step] (grove/step.py): with
        # GROVE_STEP_SIBLING_GEMMS=1 (the compile option sibling_gemms) each
        # block's q/k/v projections, their weight gradients and their input
        # gradient are one GEMM each; the losses and SGD's parameters still
        # track eager PyTorch, and cudagraphs equals eager bitwise (check_case).
        def gemms(step):
            lowered = step.runners()[0].models()[0].stats()["programs"][0]["lowered"]
            return lowered.count(" gemm "), lowered.count(".siblings.linear")

        previous = os.environ.get("GROVE_STEP_SIBLING_GEMMS")
        every_program = os.environ.pop("GROVE_FUSE_SIBLING_GEMMS", None)  # would fuse "0" too
        try:
            os.environ["GROVE_STEP_SIBLING_GEMMS"] = "0"
            torch.manual_seed(SEED)
            plain_step = self.check_case(gpt_case, "torch_sgd")
            unfused, unfused_siblings = gemms(plain_step)
            self.assertNotIn("sibling_gemms", plain_step.runners()[0].options)
            os.environ["GROVE_STEP_SIBLING_GEMMS"] = "1"
            torch.manual_seed(SEED)
            fused_step = self.check_case(gpt_case, "torch_sgd")
            fused, siblings = gemms(fused_step)
            self.assertIs(fused_step.runners()[0].options.get("sibling_gemms"), True)
            del os.environ["GROVE_STEP_SIBLING_GEMMS"]  # the default fuses
            module, batches, loss_fn = gpt_case()
            _, _, default_step = grove_losses(module, batches[:1], loss_fn, "torch_sgd",
                                              "cudagraphs")
            self.assertEqual(gemms(default_step), (fused, siblings))
            os.environ["GROVE_STEP_SIBLING_GEMMS"] = "sideways"
            module, batches, loss_fn = gpt_case()
            with self.assertRaisesRegex(ValueError, "GROVE_STEP_SIBLING_GEMMS"):
                grove_losses(module, batches[:1], loss_fn, "torch_sgd", "eager")
        finally:
            if previous is None:
                os.environ.pop("GROVE_STEP_SIBLING_GEMMS", None)
            else:
                os.environ["GROVE_STEP_SIBLING_GEMMS"] = previous
            if every_program is not None:
                os.environ["GROVE_FUSE_SIBLING_GEMMS"] = every_program
        self.assertEqual(unfused_siblings, 0)
        # Two blocks: per block q/k/v's forward and input gradient are one
        # linear each (".siblings.linear"), and 6 of 9 GEMMs go.
        self.assertEqual(siblings, 4)
        self.assertEqual(unfused - fused, 2 * 6)

    def test_gemm_search_option_reaches_the_program(self):
        # Note [GEMMs of the whole step by measurement] (grove/step.py): the
        # step's program compiles with the option, by default (sim has no
        # algorithms to search, so its losses stay those of the step without
        # it, bitwise); GROVE_STEP_GEMM_SEARCH=0 leaves it out.
        module, batches, loss_fn = mlp_case()
        previous = os.environ.get("GROVE_STEP_GEMM_SEARCH")
        try:
            os.environ["GROVE_STEP_GEMM_SEARCH"] = "0"
            plain, _, plain_step = grove_losses(module, batches[:3], loss_fn, "torch_sgd",
                                                "cudagraphs")
            self.assertNotIn("gemm_search", plain_step.runners()[0].options)
            os.environ["GROVE_STEP_GEMM_SEARCH"] = "1"
            searched, _, step = grove_losses(module, batches[:3], loss_fn, "torch_sgd",
                                             "cudagraphs")
            self.assertIs(step.runners()[0].options.get("gemm_search"), True)
            for a, b in zip(searched, plain):
                self.assertTrue(torch.equal(a, b))
            del os.environ["GROVE_STEP_GEMM_SEARCH"]
            _, _, default_step = grove_losses(module, batches[:1], loss_fn, "torch_sgd",
                                              "cudagraphs")
            self.assertIs(default_step.runners()[0].options.get("gemm_search"), True)
            os.environ["GROVE_STEP_GEMM_SEARCH"] = "sideways"
            with self.assertRaisesRegex(ValueError, "GROVE_STEP_GEMM_SEARCH"):
                grove_losses(module, batches[:1], loss_fn, "torch_sgd", "cudagraphs")
        finally:
            if previous is None:
                os.environ.pop("GROVE_STEP_GEMM_SEARCH", None)
            else:
                os.environ["GROVE_STEP_GEMM_SEARCH"] = previous

    def test_gpt_with_grove_sgd(self):
        self.check_case(gpt_case, "grove_sgd")

    def test_the_trace_runs_as_compiling(self):
        # Note [Tracing the step as a compiler does] (grove/step.py): a model
        # that reads a tensor's value unless torch.compiler.is_compiling() (as
        # Hugging Face's padding warning does) traces whole.
        compiler = getattr(torch, "compiler", None)
        if getattr(compiler, "_is_compiling_flag", None) is None:
            self.skipTest("this PyTorch (%s) has no torch.compiler._is_compiling_flag"
                          % torch.__version__)

        class Checked(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(8, 4)

            def forward(self, x):
                if not torch.compiler.is_compiling() and bool((x == 12345.0).any()):
                    raise ValueError("a padding value")
                return self.linear(x)

        module = Checked()
        batches = [(torch.randn(6, 8), torch.randn(6, 4)) for _ in range(3)]

        def loss_fn(forward, x, y):
            return torch.nn.functional.mse_loss(forward(x), y)

        expected, _ = eager_losses(module, batches, loss_fn, "torch_sgd")
        got, _, _ = grove_losses(module, batches, loss_fn, "torch_sgd", "cudagraphs")
        for index, (a, b) in enumerate(zip(got, expected)):
            torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL, msg="step %d" % index)
        self.assertFalse(torch.compiler.is_compiling(), "the flag is restored")

    def test_a_learning_rate_schedule_reaches_the_update(self):
        module, batches, loss_fn = mlp_case()
        runs = []
        for compiled in (False, True):
            model = copy.deepcopy(module)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
            step = grove.training.compile_step(model, loss_fn, optimizer, device="sim") \
                if compiled else None
            losses = []
            for batch in batches:
                if compiled:
                    loss = step(*batch)
                else:
                    optimizer.zero_grad()
                    loss = loss_fn(model, *batch)
                    loss.backward()
                    optimizer.step()
                schedule.step()
                losses.append(loss.detach())
            runs.append(losses)
        for got, want in zip(runs[1], runs[0]):
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)

    def test_gradients_are_read_only_when_asked(self):
        module, batches, loss_fn = mlp_case()
        model = copy.deepcopy(module)
        reference = copy.deepcopy(module)
        step = grove.training.compile_step(model, loss_fn,
                                           torch.optim.SGD(model.parameters(), lr=0.0),
                                           device="sim", keep_gradients=True)
        for batch in batches[:3]:
            step(*batch)
        gradients = step.gradients()
        loss_fn(reference, *batches[2]).backward()
        for name, parameter in reference.named_parameters():
            torch.testing.assert_close(gradients[name], parameter.grad, rtol=RTOL, atol=ATOL)
        other = copy.deepcopy(module)
        without = grove.training.compile_step(other, loss_fn,
                                              torch.optim.SGD(other.parameters(), lr=0.0),
                                              device="sim")
        without(*batches[0])
        with self.assertRaisesRegex(RuntimeError, "keep_gradients=True"):
            without.gradients()

    def test_layer_norm_input_gradient_is_one_kernel_in_a_whole_step(self):
        # Note [Layer-norm input gradient in one kernel] (grove/aten_backward_ops.py):
        # eps 0.5 on rows of small variance, so a backward that used another
        # eps than its forward's would give other gradients.
        class Normed(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = nn.Linear(16, 16)
                self.first = nn.LayerNorm(16, eps=0.5)
                self.linear = nn.Linear(16, 16)
                self.second = nn.LayerNorm(16, eps=0.5, elementwise_affine=False)

            def forward(self, x):
                return self.second(self.linear(self.first(self.inner(x))))

        module = Normed()
        with torch.no_grad():
            module.first.weight.uniform_(0.5, 1.5)
            module.first.bias.uniform_(-0.5, 0.5)
        batch = (0.3 * torch.randn(6, 16), torch.randn(6, 16))

        def loss_fn(model, x, y):
            return F.mse_loss(model(x), y)

        reference = copy.deepcopy(module)
        loss_fn(reference, *batch).backward()
        for mode in ("eager", "cudagraphs"):
            model = copy.deepcopy(module)
            step = grove.training.compile_step(model, loss_fn,
                                               torch.optim.SGD(model.parameters(), lr=0.0),
                                               mode=mode, device="sim", keep_gradients=True)
            step(*batch)
            gradients = step.gradients()
            for name, parameter in reference.named_parameters():
                torch.testing.assert_close(gradients[name], parameter.grad, rtol=RTOL, atol=ATOL,
                                           msg=lambda m: "%s %s: %s" % (mode, name, m))
            if mode == "cudagraphs":  # the backend's stats list the lowered kernels
                lowered = step.runners()[0].models()[0].stats()["programs"][0]["lowered"]
                kernels = [line.split("[")[0] for line in lowered.splitlines()
                           if line.strip().startswith("kernel")]
                self.assertEqual(sum("layer_norm_backward" in name for name in kernels), 2,
                                 lowered)

    def test_an_optimizer_grove_cannot_run_is_refused_naming_the_option(self):
        module, _, loss_fn = mlp_case()
        with self.assertRaisesRegex(ValueError, "nesterov"):
            grove.training.compile_step(module, loss_fn, torch.optim.SGD(
                module.parameters(), lr=0.1, momentum=0.9, nesterov=True))
        with self.assertRaisesRegex(TypeError, "Adagrad"):
            grove.training.compile_step(module, loss_fn,
                                        torch.optim.Adagrad(module.parameters()))
        with self.assertRaisesRegex(ValueError, "exactly the model's trainable"):
            grove.training.compile_step(module, loss_fn, torch.optim.SGD(
                list(module.parameters())[:2], lr=0.1))


class AutocastTest(unittest.TestCase):
    """Mixed precision: torch.autocast(dtype=torch.bfloat16) around the step."""

    def setUp(self):
        torch.manual_seed(SEED)

    def test_compile_step_under_bf16_autocast_tracks_eager_autocast(self):
        module, batches, loss_fn = mlp_case()
        expected, _ = eager_losses(module, batches, loss_fn, "torch_adamw",
                                   autocast=torch.bfloat16)
        results = {}
        for mode in ("eager", "cudagraphs"):
            results[mode], _, step = grove_losses(module, batches, loss_fn, "torch_adamw", mode,
                                                  autocast=torch.bfloat16)
        graph = step.runners()[0].plan.module.graph
        casts = [node for node in graph.nodes if node.op == "call_function"
                 and "bfloat16" in str(node.kwargs.get("dtype", ""))]
        self.assertGreater(len(casts), 0, "the step was traced with autocast's casts")
        for index, (got, want) in enumerate(zip(results["eager"], expected)):
            torch.testing.assert_close(got, want, rtol=BF16_RTOL, atol=BF16_ATOL, msg=lambda m: (
                "bf16 step %d (seed %d): %s" % (index, SEED, m)))
        for a, b in zip(results["cudagraphs"], results["eager"]):
            self.assertTrue(torch.equal(a, b), "bf16: cudagraphs differs from eager")

    def test_the_door_under_bf16_autocast_tracks_eager_autocast(self):
        """compile_module (AOTAutograd) with PyTorch's optimizer, under autocast."""
        module, batches, loss_fn = mlp_case()
        expected, _ = eager_losses(module, batches, loss_fn, "torch_sgd", autocast=torch.bfloat16)
        results = {}
        for mode in ("eager", "cudagraphs"):
            model = copy.deepcopy(module)
            trained = grove.training.compile_module(model, mode)
            optimizer = make_optimizer("torch_sgd", list(model.parameters()))
            results[mode] = []
            for batch in batches:
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = loss_fn(trained, *batch)
                loss.backward()
                optimizer.step()
                results[mode].append(loss.detach().float())
            for runner in trained.compiler.runners():
                self.assertEqual(runner.plan.unsupported, [], "ops left to PyTorch")
        for index, (got, want) in enumerate(zip(results["eager"], expected)):
            torch.testing.assert_close(got, want, rtol=BF16_RTOL, atol=BF16_ATOL, msg=lambda m: (
                "bf16 door step %d (seed %d): %s" % (index, SEED, m)))
        for a, b in zip(results["cudagraphs"], results["eager"]):
            self.assertTrue(torch.equal(a, b), "bf16 door: cudagraphs differs from eager")


if __name__ == "__main__":
    junit_main.main()
