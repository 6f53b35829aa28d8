"""cuda's tiled small-M GEMM (Note [Small-M tiled GEMM] in
runtime/cuda/small_m_tiled_gemm.h) on a GPU host, through grove.compile (and,
for PyTorch's exact gelu, torch.compile(backend="grove")): every tile, forced
with GROVE_SMALL_M_TILED=RxC[xW], on linear layers of 1 to 64 rows (row counts
that leave partial row tiles, column counts that leave partial column tiles)
with each epilogue it applies (none, bias, relu, the tanh gelu, the exact
gelu), in f32, bf16 and f16, and on GEMMs of more than 64 rows and at most 64
columns as their transpose; f32 GEMMs with a weight stored [K, N] (x @ W,
Note [Small-M tiled GEMM over a K x N weight]) through the kernel's [K, N]
form. Each result is compared with a float64 reference
of the same inputs (f32 within 1e-5 of the reference's largest magnitude, TF32
off; bf16 / f16 within 2e-2), grove's cudagraphs mode equals its eager mode
bitwise, and a profile shows the tiled kernel ran (so no case passes through
another kernel). Skips without CUDA (the exact gelu case also without dynamo).

The CI side (sim) is small_m_gemm_test's SmallMTiled* cases."""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import junit_main  # noqa: E402

from torch_features import HAS_CUDA, HAS_DYNAMO  # noqa: E402

TILES = ["4x1", "4x2", "8x1", "8x2", "16x1", "16x2", "8x1x8", "16x2x8"]
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-2}
GROVE_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
SEED = 1234


def layer(k, n, activation, bias=True):
    linear = torch.nn.Linear(k, n, bias=bias)
    if activation == "none":
        return linear
    act = {"relu": torch.nn.ReLU(), "gelu_tanh": torch.nn.GELU(approximate="tanh"),
           "gelu": torch.nn.GELU()}[activation]
    return torch.nn.Sequential(linear, act)


def program(m, k, n, activation, dtype, bias):
    """One linear layer (and its activation) as a grove program; the weight
    and bias are bound by the caller."""
    dt = GROVE_DTYPES[dtype]
    params = [{"name": "w", "shape": [n, k], "dtype": dt, "init": {"kind": "zeros"}}]
    operands = ["x", "w"]
    if bias:
        params.append({"name": "b", "shape": [n], "dtype": dt, "init": {"kind": "zeros"}})
        operands.append("b")
    nodes = [{"name": "fc", "op": "linear", "inputs": operands}]
    if activation != "none":
        nodes.append({"name": "act", "op": {"relu": "relu", "gelu_tanh": "gelu"}[activation],
                      "inputs": ["fc"]})
    return {"name": "tiled_case", "dims": {},
            "inputs": [{"name": "x", "shape": [m, k], "dtype": dt}],
            "params": params, "buffers": [], "nodes": nodes, "outputs": [nodes[-1]["name"]]}


def reference(module, x):
    with torch.no_grad():
        return module.double()(x.double())


class Env:
    """Environment variables set for the block, restored after."""

    def __init__(self, **values):
        self.values = values

    def __enter__(self):
        self.old = {name: os.environ.get(name) for name in self.values}
        os.environ.update(self.values)

    def __exit__(self, *exc):
        for name, value in self.old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def kernels_of(call):
    """Runs `call` under torch.profiler; returns (its result, the kernel names)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = call()
        torch.cuda.synchronize()
    return out, {event.key for event in prof.key_averages()}


@unittest.skipUnless(HAS_CUDA, "no CUDA device")
class GpuSmallMTiledGemmTest(unittest.TestCase):
    def setUp(self):
        torch.backends.cuda.matmul.allow_tf32 = False

    def check(self, where, out, eager_out, expected, kernels, dtype):
        self.assertTrue(any("grove_small_m_tiled_gemm" in name for name in kernels),
                        "%s: the tiled kernel did not run; kernels: %s" % (where, sorted(kernels)))
        scale = max(expected.abs().max().item(), 1e-6)
        error = (out.double() - expected).abs().max().item() / scale
        self.assertLessEqual(error, TOLERANCE[dtype], where)
        self.assertTrue(torch.equal(out, eager_out),
                        "%s: cudagraphs differs from eager by %g" % (
                            where, (out.double() - eager_out.double()).abs().max().item()))

    def run_case(self, tile, m, k, n, activation, dtype, bias=True, **env):
        """One layer through grove.compile (cudagraphs and eager) under tile
        `tile` (forced), against torch in float64."""
        import grove

        torch.manual_seed(SEED + m * 7 + n)
        module = layer(k, n, activation, bias).cuda().to(dtype).eval()
        linear = module if activation == "none" else module[0]
        params = {"w": linear.weight.detach()}
        if bias:
            params["b"] = linear.bias.detach()
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        text = program(m, k, n, activation, dtype, bias)
        with Env(GROVE_SMALL_M_TILED=tile, **env):
            graphs = grove.compile(text, backend="cudagraphs", device="cuda:0", params=params)
            eager = grove.compile(text, backend="eager", device="cuda:0", params=params)
        graphs(x)  # warm-up; the profiled call replays the recorded graph
        (out,), kernels = kernels_of(lambda: [o.clone() for o in graphs(x)])
        (eager_out,) = [o.clone() for o in eager(x)]
        graphs.close()
        eager.close()
        self.check("tile %s m=%d k=%d n=%d %s %s" % (tile, m, k, n, activation, dtype), out,
                   eager_out, reference(module, x), kernels, dtype)

    def test_every_tile_matches_the_reference_with_partial_tiles(self):
        # 5 and 48 rows leave partial row tiles for 4, 8 and 16; 36 columns
        # partial column tiles for 4 x 2 = 8 columns a block; K = 1536 takes
        # 8 warps where the tile leaves them to K.
        for tile in TILES:
            for m, k, n in [(5, 256, 36), (48, 128, 300), (16, 1536, 100)]:
                self.run_case(tile, m, k, n, "none", torch.float32)

    def test_every_epilogue_in_every_dtype(self):
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            self.run_case("8x2", 16, 512, 512, "gelu_tanh", dtype)
            self.run_case("4x1", 64, 256, 128, "relu", dtype)
        self.run_case("16x1", 1, 512, 512, "none", torch.float32)
        self.run_case("16x2", 16, 512, 512, "none", torch.float32, bias=False)

    def test_small_n_gemms_run_as_their_transpose(self):
        # More than 64 rows and at most 64 columns (MLP-Mixer's token-mixing
        # fc2): C^T is the tiled product; partial tiles both ways.
        # (GROVE_SMALL_M_TILED_TRANSPOSED=1: off by default until this passes.)
        for tile in ("4x2", "16x1x8"):
            self.run_case(tile, 512, 256, 16, "none", torch.float32,
                          GROVE_SMALL_M_TILED_TRANSPOSED="1")
            self.run_case(tile, 100, 128, 36, "relu", torch.float32,
                          GROVE_SMALL_M_TILED_TRANSPOSED="1")
        self.run_case("8x2", 300, 512, 16, "gelu_tanh", torch.bfloat16,
                      GROVE_SMALL_M_TILED_TRANSPOSED="1")

    @unittest.skipUnless(HAS_DYNAMO, "this PyTorch has no torch._dynamo")
    def test_exact_gelu_after_the_bias(self):
        # The importer's exact gelu (PyTorch's nn.GELU through the door) joins
        # f32 GEMMs of up to 32 rows.
        import grove.torch  # noqa: F401  (registers the backend)

        for tile in ("8x1", "16x2"):
            for m, k, n in [(16, 512, 2048), (3, 768, 512)]:
                # Each case compiles new modules of one forward: without a
                # reset, dynamo's recompile limit would leave later ones to PyTorch.
                torch._dynamo.reset()
                torch.manual_seed(SEED + m * 7 + n)
                module = layer(k, n, "gelu", True).cuda().eval()
                x = torch.randn(m, k, device="cuda")
                with Env(GROVE_SMALL_M_TILED=tile), torch.no_grad():
                    graphs = torch.compile(module, backend="grove", dynamic=False)
                    eager = torch.compile(module, backend="grove", dynamic=False,
                                          options={"mode": "eager"})
                    graphs(x)
                    graphs(x)  # warm-up and recording; the profiled call replays
                    out, kernels = kernels_of(lambda: graphs(x).clone())
                    eager_out = eager(x).clone()
                self.check("tile %s m=%d k=%d n=%d exact gelu" % (tile, m, k, n), out,
                           eager_out, reference(module, x), kernels, torch.float32)

    def run_kn_case(self, tile, m, k, n, activation, bias=True):
        """x @ W for W stored [K, N] (GPT-2's Conv1D; Note [Small-M tiled GEMM
        over a K x N weight]), + b, then the activation, through grove.compile
        under tile `tile` (forced), against torch in float64."""
        import grove

        torch.manual_seed(SEED + m * 11 + n)
        w = torch.randn(k, n, device="cuda") / k ** 0.5
        b = torch.randn(n, device="cuda")
        x = torch.randn(m, k, device="cuda")
        params = [{"name": "w", "shape": [k, n], "dtype": "f32", "init": {"kind": "zeros"}}]
        nodes = [{"name": "mm", "op": "matmul", "inputs": ["x", "w"]}]
        bound = {"w": w}
        if bias:
            params.append({"name": "b", "shape": [n], "dtype": "f32", "init": {"kind": "zeros"}})
            nodes.append({"name": "biased", "op": "add", "inputs": ["mm", "b"]})
            bound["b"] = b
        if activation != "none":
            nodes.append({"name": "act", "op": {"relu": "relu", "gelu_tanh": "gelu"}[activation],
                          "inputs": [nodes[-1]["name"]]})
        text = {"name": "tiled_kn_case", "dims": {},
                "inputs": [{"name": "x", "shape": [m, k], "dtype": "f32"}],
                "params": params, "buffers": [], "nodes": nodes,
                "outputs": [nodes[-1]["name"]]}
        with Env(GROVE_SMALL_M_TILED=tile, GROVE_SMALL_M_TILED_KN="1"):
            graphs = grove.compile(text, backend="cudagraphs", device="cuda:0", params=bound)
            eager = grove.compile(text, backend="eager", device="cuda:0", params=bound)
        graphs(x)
        (out,), kernels = kernels_of(lambda: [o.clone() for o in graphs(x)])
        (eager_out,) = [o.clone() for o in eager(x)]
        graphs.close()
        eager.close()
        expected = x.double() @ w.double() + (b.double() if bias else 0)
        if activation == "relu":
            expected = torch.relu(expected)
        elif activation == "gelu_tanh":
            expected = torch.nn.functional.gelu(expected, approximate="tanh")
        where = "kn tile %s m=%d k=%d n=%d %s" % (tile, m, k, n, activation)
        self.assertTrue(any("grove_small_m_tiled_gemm_kn" in name for name in kernels),
                        "%s: the [K, N] kernel did not run; kernels: %s" % (where, sorted(kernels)))
        self.check(where, out, eager_out, expected, kernels, torch.float32)

    def test_k_by_n_weights_match_the_reference_with_partial_tiles(self):
        # 5 and 48 rows leave partial row tiles; 36 and 300 columns partial
        # column tiles (32 or 64 columns a block); K = 1024 takes 8 warps where
        # the tile leaves them to K; K = 20 gives some warps no step at all.
        for tile in TILES:
            for m, k, n in [(5, 256, 36), (48, 128, 300), (32, 1024, 256), (3, 20, 64)]:
                self.run_kn_case(tile, m, k, n, "none", bias=False)
        for tile in ("8x1", "16x2"):
            self.run_kn_case(tile, 32, 256, 768, "none")
            self.run_kn_case(tile, 16, 512, 520, "gelu_tanh")
            self.run_kn_case(tile, 7, 256, 128, "relu")


if __name__ == "__main__":
    junit_main.main()
