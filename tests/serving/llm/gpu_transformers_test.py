"""On a GPU host: checkpoints written from the plain-PyTorch reference decoders
are loaded by transformers' own LlamaForCausalLM / GPT2LMHeadModel and by
`grove generate --device cuda`; their logits at every greedy step and their
greedy tokens must agree. Skips without CUDA or without transformers (CI runs
torch 1.13 on CPU with no transformers). The grove binary is GROVE_BINARY or
cli/grove in the Bazel runfiles."""
import json
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
        dtype = ref.model_dtype(config)
        cls = {"llama": transformers.LlamaForCausalLM, "mistral": transformers.MistralForCausalLM,
               "qwen2": transformers.Qwen2ForCausalLM, "qwen3": transformers.Qwen3ForCausalLM,
               "gpt2": transformers.GPT2LMHeadModel}[config["model_type"]]
        model = cls.from_pretrained(directory, torch_dtype=dtype).cuda().eval()
        ids = list(PROMPT)
        rows = []
        with torch.no_grad():
            for _ in range(STEPS):
                logits = model(torch.tensor([ids], device="cuda")).logits[0, -1].float().cpu()
                rows.append(logits.numpy())
                ids.append(int(np.argmax(rows[-1])))
        return ids[len(PROMPT):], np.stack(rows)

    def grove_generate(self, directory, extra=()):
        logits_path = os.path.join(directory, "logits.safetensors")
        out = subprocess.run(
            [GROVE, "generate", directory, "--device", "cuda", "--prompt-ids",
             ",".join(map(str, PROMPT)), "--max-tokens", str(STEPS), "--max-seq-len", "32",
             "--logits-out", logits_path, *extra],
            capture_output=True, text=True, timeout=600)
        self.assertEqual(out.returncode, 0, out.stderr)
        tokens = [int(t) for t in out.stdout.strip().splitlines()[0].split(",")]
        return tokens, grove_weights.load_file(logits_path)["logits"]

    def compare(self, directory, config, tolerance, tie_margin, extra=()):
        expected_tokens, expected_logits = self.hf_greedy(directory, config)
        tokens, logits = self.grove_generate(directory, ["--ignore-eos", *extra])
        for step in range(STEPS):
            worst = float(np.abs(logits[step] - expected_logits[step]).max())
            self.assertLessEqual(worst, tolerance, "%s step %d (seed %d)" % (
                config["model_type"], step, SEED))
            top2 = np.sort(expected_logits[step])[-2:]
            if top2[1] - top2[0] <= tie_margin:
                break  # a near tie
            self.assertEqual(tokens[step], expected_tokens[step], "step %d" % step)
        return tokens

    def check(self, config, tolerance, tie_margin):
        model = ref.make_model(config, SEED)
        with tempfile.TemporaryDirectory() as directory:
            ref.write_checkpoint(model, config, directory)
            self.compare(directory, config, tolerance, tie_margin)

    # Note [Rotary settings in both layouts], Note [Sharded checkpoints], Note
    # [Every EOS token stops a row]: checkpoints transformers itself saved
    # (its config.json layout, its shards), LLaMA 3.1's scaling and theta
    # 500000 in bf16, linear scaling in f32; then generation stops at the
    # second of two EOS tokens where transformers' own tokens meet it.
    def test_checkpoints_saved_by_transformers(self):
        llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 256,
                  "rope_theta": 500000.0}
        linear = {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}
        for rope, dtype, tolerance, margin in ((llama3, torch.bfloat16, 1.0, 0.5),
                                               (linear, torch.float32, 2e-2, 4e-2)):
            with self.subTest(rope=rope["rope_type"]), tempfile.TemporaryDirectory() as directory:
                torch.manual_seed(SEED)
                hf_config = transformers.LlamaConfig(
                    hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, vocab_size=97,
                    max_position_embeddings=512, rope_parameters=rope, bos_token_id=1,
                    eos_token_id=[95, 96])
                model = transformers.LlamaForCausalLM(hf_config)
                with torch.no_grad():
                    for name, p in model.named_parameters():
                        p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name
                                else 0.5 * torch.randn_like(p))
                model.to(dtype).save_pretrained(directory, max_shard_size="40KB")
                with open(os.path.join(directory, "config.json")) as f:
                    config = json.load(f)
                # The case is what it says: transformers 5's layout, in shards.
                self.assertIn("rope_parameters", config)
                self.assertNotIn("rope_theta", config)
                self.assertTrue(os.path.exists(
                    os.path.join(directory, "model.safetensors.index.json")))
                free_run = self.compare(directory, config, tolerance, margin)
                # Two EOS tokens in generation_config.json: one never made, one made at step 3.
                eos = [t for t in range(97) if t not in free_run][0]
                with open(os.path.join(directory, "generation_config.json"), "w") as f:
                    json.dump({"eos_token_id": [eos, free_run[3]]}, f)
                tokens, _ = self.grove_generate(directory)
                self.assertEqual(tokens, free_run[:free_run.index(free_run[3]) + 1])

    # Note [LLaMA's family]: transformers' own Mistral (its window longer than
    # grove's cache of 32 positions), Qwen2 (q, k, v biases) and Qwen3 (per-head
    # norms, head_dim 32 against hidden 64 / 4 heads), saved by transformers.
    def test_llamas_family_saved_by_transformers(self):
        sizes = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, vocab_size=97,
                     max_position_embeddings=64)
        family = [("mistral", "MistralConfig", "MistralForCausalLM", dict(sliding_window=48)),
                  ("qwen2", "Qwen2Config", "Qwen2ForCausalLM", dict(rope_theta=1e6)),
                  ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=32))]
        for name, config_class, model_class, extra in family:
            with self.subTest(model=name), tempfile.TemporaryDirectory() as directory:
                torch.manual_seed(SEED)
                hf_config = getattr(transformers, config_class)(**sizes, **extra)
                model = getattr(transformers, model_class)(hf_config)
                with torch.no_grad():
                    for param_name, p in model.named_parameters():
                        p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in param_name
                                else 0.5 * torch.randn_like(p))
                model.save_pretrained(directory)
                with open(os.path.join(directory, "config.json")) as f:
                    config = json.load(f)
                self.assertEqual(config["model_type"], name)
                self.compare(directory, config, 2e-2, 4e-2)

    # A float16 checkpoint transformers saved (LLaMA 2's dtype) is refused
    # naming --dtype, and with --dtype float32 gives transformers' float32 run
    # of the same weights.
    def test_a_float16_checkpoint_under_dtype_float32(self):
        with tempfile.TemporaryDirectory() as directory:
            torch.manual_seed(SEED)
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
                hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=97, max_position_embeddings=64))
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name
                            else 0.5 * torch.randn_like(p))
            model.half().save_pretrained(directory)
            with open(os.path.join(directory, "config.json")) as f:
                config = json.load(f)
            self.assertEqual(config.get("dtype", config.get("torch_dtype")), "float16")
            refused = subprocess.run([GROVE, "generate", directory, "--device", "cuda",
                                      "--prompt-ids", "1,2", "--max-tokens", "2"],
                                     capture_output=True, text=True, timeout=300)
            self.assertNotEqual(refused.returncode, 0)
            self.assertIn("--dtype", refused.stderr)
            self.compare(directory, config, 2e-2, 4e-2, extra=("--dtype", "float32"))

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
