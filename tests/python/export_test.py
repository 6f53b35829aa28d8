"""grove.export (Note [Export for serving], python/grove/export.py): a
ViT-like and a BERT-like module in plain PyTorch are exported as grove
program JSON with a dynamic batch and a safetensors file, served by
`grove serve` on sim over HTTP, and the answers for batches of 1 and 3 rows
compared with PyTorch (f32: within 1e-4 of the largest magnitude). A module
with an op grove does not take is refused naming the op; the batch must be
the only size that changes."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
import requests
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import architectures  # noqa: E402
from grove import export as grove_export  # noqa: E402
import junit_main  # noqa: E402

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "grove")
GROVE = os.path.join(RUNFILES, "cli", "grove")
TOLERANCE = 1e-4
DATATYPES = {torch.float32: "FP32", torch.int64: "INT64"}


class Served:
    def __init__(self, program, weights):
        self.process = subprocess.Popen(
            [GROVE, "serve", program, "--weights", weights, "--device", "sim", "--port", "0",
             "--max-batch", "4", "--buckets", "1,2,4"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        lines = []
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("grove serve ended:\n%s%s" % ("".join(lines),
                                                                 self.process.stderr.read()))
            lines.append(line)
            match = re.search(r"listening on (http://[0-9.]+:\d+)", line)
            if match:
                self.url = match.group(1)
                return
        raise RuntimeError("grove serve did not listen in time")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.communicate(timeout=60)


class ExportTest(unittest.TestCase):
    def serve_and_compare(self, name, module, make_inputs):
        torch.manual_seed(3)
        with tempfile.TemporaryDirectory() as out_dir:
            program_path, weights_path = grove_export.export(module, make_inputs(2), out_dir,
                                                             name=name)
            with open(program_path) as program_file:
                program = json.load(program_file)
            self.assertEqual(program["dims"], {"batch": 2})
            for entry in program["inputs"]:
                self.assertEqual(entry["shape"][0], "batch", entry)
            server = Served(program_path, weights_path)
            try:
                for rows in (1, 3):
                    inputs = make_inputs(rows)
                    with torch.no_grad():
                        expected = module(*inputs)
                    body = {"inputs": [
                        {"name": entry["name"], "shape": list(value.shape),
                         "datatype": DATATYPES[value.dtype],
                         "data": value.reshape(-1).tolist()}
                        for entry, value in zip(program["inputs"], inputs)]}
                    answer = requests.post("%s/v2/models/%s/infer" % (server.url, name),
                                           json=body, timeout=120)
                    self.assertEqual(answer.status_code, 200, answer.text)
                    output = answer.json()["outputs"][0]
                    self.assertEqual(output["shape"], list(expected.shape))
                    got = np.array(output["data"], dtype=np.float32).reshape(expected.shape)
                    scale = max(expected.abs().max().item(), 1e-6)
                    error = np.abs(got - expected.numpy()).max() / scale
                    self.assertLessEqual(error, TOLERANCE, "%s, %d rows: error %.3g" % (
                        name, rows, error))
            finally:
                server.stop()

    def test_a_vit_like_module_is_exported_and_served(self):
        torch.manual_seed(0)
        module = architectures.Vit().eval()
        self.serve_and_compare("vit", module, lambda rows: (torch.randn(rows, 3, 32, 32),))

    def test_a_bert_like_module_with_a_padding_mask_is_exported_and_served(self):
        torch.manual_seed(0)
        module = architectures.Bert().eval()

        def inputs(rows):
            ids = torch.randint(0, 500, (rows, 16))
            mask = torch.ones(rows, 16, dtype=torch.long)
            mask[0, 12:] = 0
            return ids, mask

        self.serve_and_compare("bert", module, inputs)

    def test_torchvision_models_are_exported_and_served(self):
        # Models nobody here wrote: a CNN with squeeze-excitation and
        # hardswish, Swin (its shifted-window masks fold into 0-d constants,
        # which the weights file once wrote as shape [1]) and ViT (its
        # attention traces as nn.MultiheadAttention's fused op).
        import torchvision

        models = torchvision.models
        for name, make in (("mobilenet_v3_small", lambda: models.mobilenet_v3_small(num_classes=10)),
                           ("swin_t", lambda: models.swin_t(num_classes=10)),
                           ("vit", lambda: models.VisionTransformer(
                               image_size=32, patch_size=8, num_layers=2, num_heads=4,
                               hidden_dim=64, mlp_dim=128, num_classes=10))):
            torch.manual_seed(0)
            module = make().eval()
            for parameter in module.parameters():  # ViT's head starts at zero
                if parameter.abs().max() == 0:
                    torch.nn.init.normal_(parameter, 0, 0.2)
            size = 32 if name == "vit" else 64
            self.serve_and_compare(name, module, lambda rows: (torch.randn(rows, 3, size, size),))

    def test_names_are_the_forward_parameters_and_outputs_in_order(self):
        # Note [Exported names] (grove/export.py): the module reads its second
        # argument first; a client names the inputs as the forward does, in
        # any order, and reads output_0.. in the order the module returns them.
        class Scaled(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(8, 5)

            def forward(self, x, scale):
                gain = scale[:, None] * 2.0
                y = self.linear(x) * gain
                return y, y.argmax(-1), y > 0

        torch.manual_seed(0)
        module = Scaled().eval()
        with tempfile.TemporaryDirectory() as out_dir:
            program_path, weights_path = grove_export.export(
                module, (torch.randn(2, 8), torch.rand(2)), out_dir, name="scaled")
            with open(program_path) as program_file:
                program = json.load(program_file)
            self.assertEqual([entry["name"] for entry in program["inputs"]], ["x", "scale"])
            self.assertEqual(program["outputs"], ["output_0", "output_1", "output_2"])
            server = Served(program_path, weights_path)
            try:
                x, scale = torch.randn(3, 8), torch.tensor([1.0, -0.5, 2.0])
                body = {"inputs": [  # named, in the other order
                    {"name": "scale", "shape": [3], "datatype": "FP32", "data": scale.tolist()},
                    {"name": "x", "shape": [3, 8], "datatype": "FP32",
                     "data": x.reshape(-1).tolist()}]}
                answer = requests.post("%s/v2/models/scaled/infer" % server.url, json=body,
                                       timeout=120)
                self.assertEqual(answer.status_code, 200, answer.text)
                outputs = {output["name"]: output for output in answer.json()["outputs"]}
                with torch.no_grad():
                    y, top, positive = module(x, scale)
                self.assertEqual(outputs["output_1"]["datatype"], "INT64")
                self.assertEqual(outputs["output_2"]["datatype"], "BOOL")
                np.testing.assert_allclose(np.array(outputs["output_0"]["data"]).reshape(3, 5),
                                           y.numpy(), rtol=1e-5, atol=1e-5)
                self.assertEqual(outputs["output_1"]["data"], top.tolist())
                self.assertEqual(outputs["output_2"]["data"], positive.reshape(-1).tolist())
            finally:
                server.stop()

    def test_a_module_with_an_op_left_to_pytorch_is_refused_naming_it(self):
        class WithCumprod(torch.nn.Module):
            def forward(self, x):
                return torch.cumprod(x, dim=-1) * 2.0

        module = WithCumprod().train()
        with tempfile.TemporaryDirectory() as out_dir:
            with self.assertRaisesRegex(grove_export.ExportError, "aten.cumprod"):
                grove_export.export(module, (torch.randn(2, 8),), out_dir)
        self.assertTrue(module.training)  # export traces in eval mode, then gives the mode back

    def test_a_size_that_does_not_scale_with_the_batch_is_refused(self):
        class Flatten(torch.nn.Module):
            def forward(self, x):
                return x.reshape(-1)[: x.shape[0] + 1] * 2.0  # batch + 1 elements

        with tempfile.TemporaryDirectory() as out_dir:
            with self.assertRaises(grove_export.ExportError):
                grove_export.export(Flatten(), (torch.randn(2, 8),), out_dir)


if __name__ == "__main__":
    junit_main.main()
