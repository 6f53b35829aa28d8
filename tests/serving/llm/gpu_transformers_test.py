"""On a GPU host: checkpoints written from the plain-PyTorch reference decoders
are loaded by transformers' own LlamaForCausalLM / GPT2LMHeadModel and by
`grove generate --device cuda`; their logits at every greedy step and their
greedy tokens must agree. Skips without CUDA or without transformers (CI runs
torch 1.13 on CPU with no transformers). The grove binary is GROVE_BINARY or
cli/grove in the Bazel runfiles."""
import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch

import grove_weights
import junit_main
import reference_decoders as ref

try:
    import transformers
except ImportError:  # CI: no transformers
    transformers = None

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "grove")
GROVE = os.environ.get("GROVE_BINARY", os.path.join(RUNFILES, "cli", "grove"))
PROMPT = [5, 17, 3, 88, 41, 9, 60]
STEPS = 8
SEED = 38


@unittest.skipUnless(torch.cuda.is_available(), "no CUDA device (the GPU host runs this test)")
@unittest.skipIf(transformers is None, "transformers is not installed (the GPU host has it)")
class GroveMatchesTransformers(unittest.TestCase):
    def hf_greedy(self, directory, config):
        dtype = torch.bfloat16 if config["torch_dtype"] == "bfloat16" else torch.float32
        cls = (transformers.LlamaForCausalLM if config["model_type"] == "llama"
               else transformers.GPT2LMHeadModel)
        model = cls.from_pretrained(directory, torch_dtype=dtype).cuda().eval()
        ids = list(PROMPT)
        rows = []
        with torch.no_grad():
            for _ in range(STEPS):
                logits = model(torch.tensor([ids], device="cuda")).logits[0, -1].float().cpu()
                rows.append(logits.numpy())
                ids.append(int(np.argmax(rows[-1])))
        return ids[len(PROMPT):], np.stack(rows)

    def check(self, config, tolerance, tie_margin):
        model = ref.make_model(config, SEED)
        with tempfile.TemporaryDirectory() as directory:
            ref.write_checkpoint(model, config, directory)
            expected_tokens, expected_logits = self.hf_greedy(directory, config)
            logits_path = os.path.join(directory, "logits.safetensors")
            out = subprocess.run(
                [GROVE, "generate", directory, "--device", "cuda", "--prompt-ids",
                 ",".join(map(str, PROMPT)), "--max-tokens", str(STEPS), "--max-seq-len", "32",
                 "--ignore-eos", "--logits-out", logits_path],
                capture_output=True, text=True, timeout=600)
            self.assertEqual(out.returncode, 0, out.stderr)
            tokens = [int(t) for t in out.stdout.strip().splitlines()[0].split(",")]
            logits = grove_weights.load_file(logits_path)["logits"]
            for step in range(STEPS):
                worst = float(np.abs(logits[step] - expected_logits[step]).max())
                self.assertLessEqual(worst, tolerance, "%s step %d (seed %d)" % (
                    config["model_type"], step, SEED))
                top2 = np.sort(expected_logits[step])[-2:]
                if top2[1] - top2[0] <= tie_margin:
                    break  # a near tie
                self.assertEqual(tokens[step], expected_tokens[step], "step %d" % step)

    def test_llama_f32(self):
        self.check(ref.llama_config("float32"), 2e-2, 4e-2)

    def test_gpt2_f32(self):
        self.check(ref.gpt2_config("float32"), 2e-2, 4e-2)

    def test_llama_bf16(self):
        self.check(ref.llama_config("bfloat16"), 1.0, 0.5)

    def test_gpt2_bf16(self):
        self.check(ref.gpt2_config("bfloat16"), 1.0, 0.5)


if __name__ == "__main__":
    junit_main.main()
