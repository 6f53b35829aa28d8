"""torch.compile(backend="grove") on a GPU host (PyTorch 2.x with dynamo):
the mlp and gpt models in plain PyTorch, a LLaMA-style block and PyTorch's own
nn.TransformerEncoder. Each: outputs match torch eager (f32: rtol 2e-3,
atol 2e-4; TF32 is off on both sides); grove's cudagraphs mode equals its
eager mode bitwise; parameters are bound, never copied (the address grove
reads is the parameter's). A model with an unsupported op runs split, and
the report names the op. Skips without CUDA or without torch._dynamo."""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_models  # noqa: E402

import junit_main  # noqa: E402

from torch_features import HAS_CUDA, HAS_DYNAMO  # noqa: E402

RTOL, ATOL = 2e-3, 2e-4


def run_compiled(module, inputs, options, calls=4):
    import grove.torch

    torch._dynamo.reset()
    compiled = torch.compile(module, backend="grove", options=options, dynamic=False)
    with torch.no_grad():
        for _ in range(calls):
            result = compiled(*inputs)
            result = result.clone()
    torch.cuda.synchronize()
    runners = [r for r in grove.torch._live_runners]
    return result, runners


@unittest.skipUnless(HAS_CUDA, "no CUDA device")
@unittest.skipUnless(HAS_DYNAMO, "this PyTorch has no torch._dynamo")
class GpuTorchBackendTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    def check_model(self, name, module, inputs, expect_unsupported=(), require_bound=True):
        with torch.no_grad():
            expected = module(*inputs).clone()
        graphs, runners = run_compiled(module, inputs, {"mode": "cudagraphs"})
        eager, _ = run_compiled(module, inputs, {"mode": "eager"})
        torch.testing.assert_close(eager, expected, rtol=RTOL, atol=ATOL,
                                   msg=lambda m: "%s, grove eager vs torch: %s" % (name, m))
        self.assertTrue(torch.equal(graphs, eager),
                        "%s: grove cudagraphs differs from grove eager" % name)
        addresses = {p.data_ptr() for p in module.parameters()}
        addresses |= {b.data_ptr() for b in module.buffers()}
        bound = 0
        unsupported = set()
        for runner in runners:
            unsupported |= {op for _, op, _ in runner.unsupported}
            for compiled in runner.segments:
                for grove_name, (tensor, node) in compiled["segment"].params.items():
                    if node is None:
                        continue  # a constant folded at import time
                    state = compiled["model"].state(grove_name).data_ptr()
                    self.assertEqual(state, tensor.data_ptr(), "%s: %s" % (name, grove_name))
                    if tensor.data_ptr() in addresses:
                        bound += 1
        if require_bound:
            self.assertGreater(bound, 0, "%s: no parameter was bound" % name)
        for op in expect_unsupported:
            self.assertIn(op, unsupported)
        return unsupported

    def test_each_model(self):
        for name, module, inputs in gpu_models.cases("cuda"):
            with self.subTest(model=name):
                unsupported = self.check_model(name, module, inputs)
                self.assertEqual(unsupported, set(), "%s: every op runs in grove" % name)
                print("%s: ops run in PyTorch: %s" % (name, sorted(unsupported) or "none"))

    def test_unsupported_op_runs_split_and_is_reported(self):
        module = gpu_models.WithCumprod().cuda().eval()
        self.check_model("with_cumprod", module, (torch.randn(8, 128, device="cuda"),),
                         expect_unsupported=["aten.cumprod"])

    def test_integer_histc_counts_in_grove(self):
        """transformers' MoE routers count int32 expert ids with histc (CUDA
        divides in integers; the CPU has no integer histc, so this is checked
        here): counted in grove, equal to PyTorch's counts, in their dtype."""
        import grove.torch

        def counts(ids):
            wide = ids.long() * 3 - 5
            return (torch.histc(ids, bins=8, min=0, max=7),
                    torch.histc(wide, bins=5, min=-5, max=20),
                    torch.histc(ids, bins=3, min=2, max=5))

        torch._dynamo.reset()
        before = {id(r) for r in grove.torch._live_runners}
        compiled = torch.compile(counts, backend="grove", dynamic=False)
        for _ in range(3):
            ids = torch.randint(0, 8, (64,), device="cuda", dtype=torch.int32)
            for got, expected in zip(compiled(ids), counts(ids)):
                self.assertEqual(got.dtype, expected.dtype)
                self.assertTrue(torch.equal(got, expected), (got, expected))
        left = {op for r in grove.torch._live_runners if id(r) not in before
                for _, op, _ in r.unsupported}
        self.assertEqual(left, set())

    def test_a_cpu_scalar_tensor_beside_cuda_inputs(self):
        # Note [Host tensors passed to a device graph] (grove/dynamo_backend.py).
        import grove.torch  # noqa: F401

        def scaled(x, scale, bias):
            return torch.tanh(x @ x.t()) * scale + bias

        for mode in ("cudagraphs", "eager"):
            torch._dynamo.reset()
            compiled = torch.compile(scaled, backend="grove", options={"mode": mode},
                                     dynamic=False)
            with torch.no_grad():
                for call in range(4):
                    x = torch.randn(8, 16, device="cuda")
                    scale, bias = torch.tensor(0.5 + call), torch.tensor(-1.0 * call)
                    torch.testing.assert_close(compiled(x, scale, bias), scaled(x, scale, bias),
                                               rtol=RTOL, atol=ATOL,
                                               msg=lambda m: "%s call %d: %s" % (mode, call, m))

    def test_a_channels_last_resnet_under_autocast(self):
        # Note [Static inputs in a permuted layout] (grove/parameter_views.py):
        # every 4-d weight of a channels_last model is a permuted parameter.
        import grove.torch  # noqa: F401

        torch.manual_seed(0)
        module = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 8, 3, stride=2), torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(), torch.nn.Linear(8, 4))
        module = module.cuda().eval().to(memory_format=torch.channels_last)
        torch._dynamo.reset()
        compiled = torch.compile(module, backend="grove", dynamic=False)
        with torch.no_grad():
            for call in range(4):
                x = torch.randn(2, 3, 32, 32, device="cuda").to(memory_format=torch.channels_last)
                torch.testing.assert_close(compiled(x), module(x), rtol=RTOL, atol=ATOL,
                                           msg=lambda m: "f32 call %d: %s" % (call, m))
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    got, want = compiled(x), module(x)
                torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-2,
                                           msg=lambda m: "bf16 call %d: %s" % (call, m))

    def test_strict_raises_naming_the_op(self):
        import grove.torch

        module = gpu_models.WithCumprod().cuda().eval()
        torch._dynamo.reset()
        compiled = torch.compile(module, backend="grove", options={"strict": True},
                                 dynamic=False)
        with self.assertRaisesRegex(Exception, "cumprod"):
            with torch.no_grad():
                compiled(torch.randn(8, 128, device="cuda"))

    def test_model_runs_on_the_callers_stream(self):
        import grove

        program = {"name": "scale", "inputs": [{"name": "x", "shape": [1024], "dtype": "f32"}],
                   "nodes": [{"name": "y", "op": "tanh", "inputs": ["x"]}], "outputs": ["y"]}
        model = grove.compile(program, backend="cudagraphs", device="cuda")
        stream = torch.cuda.Stream()
        x = torch.randn(1024, device="cuda")
        with torch.cuda.stream(stream):
            for _ in range(4):
                y = model(x, stream=stream.cuda_stream)[0]
            y = y.clone()
        stream.synchronize()
        torch.testing.assert_close(y, torch.tanh(x), rtol=1e-5, atol=1e-6)

    def test_calls_from_the_legacy_stream_are_ordered_both_ways(self):
        """Note [Calls from the legacy default stream] (capi/grove.cc): in each
        ordering mode, a call from PyTorch's default stream reads the input
        that stream wrote just before (behind a long sleep, so a call not
        ordered after it would read the previous input), and that stream's
        next op reads the call's finished output (a copy not ordered after
        the replay would overlap it). Both orders, 16 MiB tensors, eight
        calls, the first of which records. An unknown mode is refused by name
        and leaves the model usable."""
        import grove

        size = 1 << 22
        program = {"name": "tanh", "inputs": [{"name": "x", "shape": [size], "dtype": "f32"}],
                   "nodes": [{"name": "y", "op": "tanh", "inputs": ["x"]}], "outputs": ["y"]}
        generator = torch.Generator(device="cuda").manual_seed(7)
        sources = [torch.randn(size, device="cuda", generator=generator) for _ in range(8)]
        for mode in ("blocking", "events"):
            with self.subTest(mode=mode):
                os.environ["GROVE_LEGACY_STREAM_ORDER"] = mode
                try:
                    model = grove.compile(program, backend="cudagraphs", device="cuda")
                    x = torch.zeros(size, device="cuda")
                    torch.cuda.synchronize()
                    copies = []
                    for source in sources:
                        torch.cuda._sleep(20_000_000)  # the legacy stream busy for ~10 ms
                        x.copy_(source)
                        (y,) = model(x)
                        copies.append(y.clone())  # on the legacy stream, right after the call
                    torch.cuda.synchronize()
                    for index, (copy, source) in enumerate(zip(copies, sources)):
                        torch.testing.assert_close(
                            copy, torch.tanh(source), rtol=1e-5, atol=1e-6,
                            msg=lambda m: "%s, call %d: %s" % (mode, index, m))
                    model.close()
                finally:
                    os.environ.pop("GROVE_LEGACY_STREAM_ORDER", None)
        # A mode grove does not know is refused by name before anything runs,
        # and the model keeps working once it is unset.
        model = grove.compile(program, backend="cudagraphs", device="cuda")
        x = sources[0]
        os.environ["GROVE_LEGACY_STREAM_ORDER"] = "sideways"
        try:
            with self.assertRaisesRegex(Exception, "GROVE_LEGACY_STREAM_ORDER='sideways'"):
                model(x)
        finally:
            os.environ.pop("GROVE_LEGACY_STREAM_ORDER", None)
        for _ in range(3):
            (y,) = model(x)
        torch.testing.assert_close(y, torch.tanh(x), rtol=1e-5, atol=1e-6)
        model.close()

    def test_overwritten_replay_output_raises_on_access(self):
        import grove

        if not hasattr(torch._C, "_set_storage_access_error_msg"):
            self.skipTest("this PyTorch has no storage access hook")
        program = {"name": "double", "inputs": [{"name": "x", "shape": [16], "dtype": "f32"}],
                   "nodes": [{"name": "y", "op": "add", "inputs": ["x", "x"]}],
                   "outputs": ["y"]}
        model = grove.compile(program, backend="cudagraphs", device="cuda")
        x = torch.randn(16, device="cuda")
        kept = None
        for _ in range(3):
            kept = None
            (kept,) = model(x)
        (later,) = model(x + 1)
        with self.assertRaisesRegex(Exception, "overwrote"):
            kept.sum().item()
        torch.testing.assert_close(later, 2 * (x + 1))

    def test_a_process_using_grove_exits_without_errors(self):
        """Note [Managers destroyed at process exit]: a process that trained and
        ran graphs on cuda exits 0 and prints no grove error (the tree managers
        a thread owns are destroyed after the CUDA runtime began unloading)."""
        import subprocess

        script = (
            "import torch, grove.torch\n"
            "model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()).cuda()\n"
            "run = torch.compile(model, backend='grove')\n"
            "x = torch.randn(8, 64, device='cuda')\n"
            "for _ in range(4):\n"
            "    run(x).sum().backward()\n"
            "with torch.no_grad():\n"
            "    for _ in range(4):\n"
            "        run(x)\n"
            "torch.cuda.synchronize()\n")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=300, env=dict(os.environ))
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        self.assertNotIn("[grove error]", done.stderr, done.stderr[-2000:])


if __name__ == "__main__":
    junit_main.main()
