"""Weights written from PyTorch run in grove and give torch's outputs.

Builds the torch module equivalent to benchmarks/models/mlp16x512.json from
its JSON (linear nodes become nn.Linear named after their weight, gelu nodes
the tanh-approximated GELU), writes its state_dict with grove_weights, runs
`grove run --weights --inputs --save-outputs` on sim with both backends and
compares with torch's output on the same rows.
"""
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch

import grove_weights
import junit_main

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "grove")
GROVE = os.path.join(RUNFILES, "cli", "grove")
MLP = os.path.join(RUNFILES, "benchmarks", "models", "mlp16x512.json")
# 16 layers of 512-term float32 dot products: grove's GEMM sums in another
# order than torch's, so outputs agree to rounding, not bitwise.
ATOL = 2e-5
RTOL = 1e-4


class JsonModule(torch.nn.Module):
    """The torch twin of a grove JSON model made of linear and gelu nodes."""

    def __init__(self, model):
        super().__init__()
        params = {p["name"]: p for p in model["params"]}
        self.steps = []
        for node in model["nodes"]:
            if node["op"] == "linear":
                weight = params[node["inputs"][1]]
                out_features, in_features = weight["shape"]
                prefix = weight["name"].rsplit(".", 1)[0]
                self.add_module(prefix, torch.nn.Linear(in_features, out_features,
                                                        bias=len(node["inputs"]) > 2))
                self.steps.append(("linear", prefix))
            elif node["op"] == "gelu":
                self.steps.append(("gelu", None))
            else:
                raise ValueError(f"node {node['name']}: op {node['op']} has no torch twin here")

    def forward(self, x):
        for op, prefix in self.steps:
            x = getattr(self, prefix)(x) if op == "linear" else \
                torch.nn.functional.gelu(x, approximate="tanh")
        return x


def run_grove(*args):
    return subprocess.run([GROVE, *args], capture_output=True, text=True, timeout=300)


class TorchWeightsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(MLP) as f:
            cls.model_json = json.load(f)
        torch.manual_seed(21)
        cls.module = JsonModule(cls.model_json).eval()

    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory()
        self.dir = self.scratch.name

    def tearDown(self):
        self.scratch.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_state_dict_names_are_the_models(self):
        grove_weights.check_against_model(self.module, MLP)
        self.assertEqual(sorted(self.module.state_dict()),
                         sorted(grove_weights.model_weights(MLP)))

    def test_grove_outputs_match_torch_with_both_backends(self):
        grove_weights.save_state_dict(self.module, self.path("w.safetensors"))
        x = torch.rand(4, 512, generator=torch.Generator().manual_seed(5)) * 2 - 1
        grove_weights.save_file({"x": x}, self.path("x.safetensors"))
        with torch.no_grad():
            expected = self.module(x).numpy()
        for backend in ("eager", "cudagraphs"):
            out = self.path(f"y_{backend}.safetensors")
            result = run_grove("run", MLP, "--device", "sim", "--batch", "4", "--backend",
                               backend, "--iters", "1", "--warmup", "2",
                               "--weights", self.path("w.safetensors"),
                               "--inputs", self.path("x.safetensors"), "--save-outputs", out)
            self.assertEqual(result.returncode, 0, result.stderr)
            got = grove_weights.load_file(out)["gelu15"]
            self.assertEqual(got.shape, (4, 512))
            # The weights matter: the model's own initializers give other outputs.
            self.assertGreater(np.abs(expected).max(), 1e-3)
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL,
                                       err_msg=f"backend {backend}")

    def test_a_renamed_tensor_is_refused_naming_it(self):
        state = dict(self.module.state_dict())
        state["layer3.weight"] = state.pop("fc3.weight")
        with self.assertRaisesRegex(ValueError, "fc3.weight"):
            grove_weights.check_against_model(state, MLP)
        grove_weights.save_state_dict(state, self.path("bad.safetensors"))
        result = run_grove("run", MLP, "--device", "sim", "--iters", "1",
                           "--weights", self.path("bad.safetensors"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("lacks tensor 'fc3.weight'", result.stderr)

    def test_wrong_dtype_is_refused_naming_it(self):
        state = dict(self.module.state_dict())
        state["fc0.bias"] = state["fc0.bias"].double()
        grove_weights.save_state_dict(state, self.path("f64.safetensors"))
        result = run_grove("run", MLP, "--device", "sim", "--iters", "1",
                           "--weights", self.path("f64.safetensors"))
        self.assertEqual(result.returncode, 1)
        self.assertIn("tensor 'fc0.bias': dtype F64 but model 'mlp16x512' has f32",
                      result.stderr)

    def test_export_weights_writes_what_torch_can_load(self):
        out = self.path("exported.safetensors")
        result = run_grove("export-weights", MLP, out, "--device", "sim")
        self.assertEqual(result.returncode, 0, result.stderr)
        tensors = grove_weights.load_file(out)
        self.assertEqual(sorted(tensors), sorted(grove_weights.model_weights(MLP)))
        module = JsonModule(self.model_json)
        module.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()})
        low = self.model_json["params"][0]["init"]["low"]
        self.assertLessEqual(np.abs(tensors["fc0.weight"]).max(), abs(low))
        self.assertGreater(np.abs(tensors["fc0.weight"]).max(), 0)

    def test_bf16_and_integers_round_trip(self):
        tensors = {"a": torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16),
                   "ids": np.array([[1, -2], [3, 1 << 40]], dtype=np.int64)}
        grove_weights.save_file(tensors, self.path("t.safetensors"))
        back = grove_weights.load_file(self.path("t.safetensors"))
        np.testing.assert_array_equal(back["a"], [1.5, -2.0, 3.25])
        np.testing.assert_array_equal(back["ids"], tensors["ids"])

    def test_scalars_keep_their_empty_shape(self):
        # A 0-d tensor (an exported model's scalar constant) is shape [] in
        # the file, as the program declares it; it was written as [1].
        tensors = {"scale": torch.tensor(0.5), "count": np.array(7, dtype=np.int64),
                   "strided": torch.arange(6.0).view(2, 3).t()}
        grove_weights.save_file(tensors, self.path("s.safetensors"))
        with open(self.path("s.safetensors"), "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(length))
        self.assertEqual(header["scale"]["shape"], [])
        self.assertEqual(header["count"]["shape"], [])
        back = grove_weights.load_file(self.path("s.safetensors"))
        self.assertEqual(back["scale"].shape, ())
        self.assertEqual(float(back["scale"]), 0.5)
        self.assertEqual(int(back["count"]), 7)
        np.testing.assert_array_equal(back["strided"], tensors["strided"].numpy())


if __name__ == "__main__":
    junit_main.main()
