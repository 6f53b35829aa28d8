"""`grove generate` on sim against plain-PyTorch LLaMA and GPT-2 (Hugging Face
names and layouts, random weights, checkpoints written by grove_weights):
logits of every step and greedy tokens, f32 and bf16, through the recorded
prefill and decode graphs of the cudagraphs backend and through eager."""
import copy
import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch

import grove_weights
import junit_main
import reference_decoders as ref

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "grove")
GROVE = os.path.join(RUNFILES, "cli", "grove")
PROMPT = [5, 17, 3, 88, 41, 9, 60]
STEPS = 8
SEED = 38


def run_grove(directory, backend, extra=()):
    logits_path = os.path.join(directory, "logits_%s.safetensors" % backend)
    out = subprocess.run(
        [GROVE, "generate", directory, "--device", "sim", "--backend", backend,
         "--prompt-ids", ",".join(map(str, PROMPT)), "--max-tokens", str(STEPS),
         "--max-seq-len", "32", "--batch-buckets", "1,2,4", "--ignore-eos",
         "--logits-out", logits_path, *extra],
        capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise AssertionError("grove generate failed (seed %d): %s" % (SEED, out.stderr))
    tokens = [int(t) for t in out.stdout.strip().splitlines()[0].split(",")]
    return tokens, grove_weights.load_file(logits_path)["logits"]


class GenerateMatchesReference(unittest.TestCase):
    def check(self, config, tolerance, tie_margin, shards=1, model=None, write=None,
              extra=()):
        """grove generate against the reference `model` (default: config's, seeded);
        write(model, directory) writes the checkpoint where given."""
        model = model if model is not None else ref.make_model(config, SEED)
        expected_tokens, expected_logits = ref.greedy(model, PROMPT, STEPS)
        expected_logits = expected_logits.float().numpy()
        with tempfile.TemporaryDirectory() as directory:
            if write is None:
                ref.write_checkpoint(model, config, directory, shards=shards)
            else:
                write(model, directory)
            for backend in ("cudagraphs", "eager"):
                tokens, logits = run_grove(directory, backend, extra)
                self.assertEqual(logits.shape, expected_logits.shape)
                for step in range(STEPS):
                    worst = float(np.abs(logits[step] - expected_logits[step]).max())
                    self.assertLessEqual(worst, tolerance, "%s %s step %d (seed %d)" % (
                        config["model_type"], backend, step, SEED))
                    top2 = np.sort(expected_logits[step])[-2:]
                    if top2[1] - top2[0] <= tie_margin:
                        break  # a near tie: later tokens may legitimately differ
                    self.assertEqual(tokens[step], expected_tokens[step], "%s %s step %d" % (
                        config["model_type"], backend, step))

    # A float16 checkpoint (LLaMA 2's) is refused naming --dtype, and runs
    # converted with --dtype float32: the reference holds the same f16 values.
    def test_a_float16_checkpoint_runs_converted_under_dtype(self):
        config = ref.llama_config("float32")
        model = ref.make_model(config, SEED)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.half().float())

        def write(model, directory):
            ref.write_checkpoint(copy.deepcopy(model).half(), dict(config, torch_dtype="float16"),
                                 directory)
            out = subprocess.run([GROVE, "generate", directory, "--device", "sim", "--prompt-ids",
                                  "1,2", "--max-tokens", "2"], capture_output=True, text=True,
                                 timeout=120)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("--dtype", out.stderr)

        self.check(config, 2e-3, 4e-3, model=model, write=write, extra=("--dtype", "float32"))

    def test_llama_f32(self):
        self.check(ref.llama_config("float32"), 2e-3, 4e-3)

    def test_gpt2_f32(self):
        self.check(ref.gpt2_config("float32"), 2e-3, 4e-3)

    def test_llama_bf16(self):
        self.check(ref.llama_config("bfloat16"), 1.0, 0.5)

    def test_gpt2_bf16(self):
        self.check(ref.gpt2_config("bfloat16"), 1.0, 0.5)

    # Note [Rotary settings in both layouts], Note [Sharded checkpoints]: a
    # config.json in transformers 5's layout (theta 500000 and LLaMA 3.1's
    # scaling inside rope_parameters, "dtype") over a checkpoint in shards;
    # grove read theta 10000, no scaling and float32 from such a file.
    def test_llama_in_transformers5_layout_with_llama3_scaling_from_shards(self):
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 256}
        for dtype, tolerance, margin in (("float32", 2e-3, 4e-3), ("bfloat16", 1.0, 0.5)):
            with self.subTest(dtype=dtype):
                self.check(ref.transformers5_llama_config(dtype, scaling=scaling, eos=(2, 3)),
                           tolerance, margin, shards=3)

    def test_linear_scaling_and_a_plain_theta_in_transformers5_layout(self):
        self.check(ref.transformers5_llama_config(
            "float32", theta=10000.0, scaling={"rope_type": "linear", "factor": 4.0}), 2e-3, 4e-3)

    # Note [LLaMA's family]: Mistral within its window (32 holds the cache),
    # Qwen2's q, k and v biases, Qwen3's per-head norms (head_dim 16, so the
    # heads are wider than hidden / heads), each in f32 and bf16.
    def test_llamas_family(self):
        family = {
            "mistral": dict(ref.llama_config("float32"), model_type="mistral", sliding_window=32),
            "qwen2": dict(ref.llama_config("float32"), model_type="qwen2", use_sliding_window=False,
                          sliding_window=8, rope_theta=1e6),
            "qwen3": dict(ref.llama_config("float32"), model_type="qwen3", head_dim=16,
                          attention_bias=False),
        }
        for name, config in family.items():
            for dtype, tolerance, margin in (("float32", 2e-3, 4e-3), ("bfloat16", 1.0, 0.5)):
                with self.subTest(model=name, dtype=dtype):
                    self.check(dict(config, torch_dtype=dtype), tolerance, margin)

    def test_batched_prompts_give_each_prompt_its_own_tokens(self):
        config = ref.llama_config("float32")
        model = ref.make_model(config, SEED)
        prompts = [PROMPT, [7, 7, 1], [90, 2, 33, 4, 5, 6, 7, 8, 9, 10, 11]]
        with tempfile.TemporaryDirectory() as directory:
            ref.write_checkpoint(model, config, directory)
            out = subprocess.run(
                [GROVE, "generate", directory, "--device", "sim", "--prompt-ids",
                 ";".join(",".join(map(str, p)) for p in prompts), "--max-tokens", "5",
                 "--max-seq-len", "32", "--batch-buckets", "1,2,4", "--ignore-eos"],
                capture_output=True, text=True, timeout=600)
            self.assertEqual(out.returncode, 0, out.stderr)
            lines = out.stdout.strip().splitlines()
            for prompt, line in zip(prompts, lines):
                expected, _ = ref.greedy(model, prompt, 5)
                self.assertEqual([int(t) for t in line.split(",")], expected)

    def test_checkpoint_missing_a_tensor_is_refused_by_name(self):
        config = ref.llama_config("float32")
        model = ref.make_model(config, SEED)
        with tempfile.TemporaryDirectory() as directory:
            ref.write_checkpoint(model, config, directory)
            state = {k: v for k, v in model.state_dict().items()
                     if k != "model.layers.1.mlp.up_proj.weight"}
            grove_weights.save_file(state, os.path.join(directory, "model.safetensors"))
            out = subprocess.run([GROVE, "generate", directory, "--device", "sim",
                                  "--prompt-ids", "1,2", "--max-seq-len", "16"],
                                 capture_output=True, text=True, timeout=600)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("model.layers.1.mlp.up_proj.weight", out.stderr)

    def test_bad_sampling_numbers_and_a_missing_named_tokenizer_are_clear_errors(self):
        # "--temperature 1e400" printed only "grove: error: stod", and a
        # --tokenizer naming no file was passed over with --prompt-ids.
        config = ref.llama_config("float32")
        model = ref.make_model(config, SEED)
        with tempfile.TemporaryDirectory() as directory:
            ref.write_checkpoint(model, config, directory)
            base = [GROVE, "generate", directory, "--device", "sim", "--prompt-ids", "1,2",
                    "--max-seq-len", "16", "--max-tokens", "2"]
            for flag, value in (("--temperature", "1e400"), ("--temperature", "nan"),
                                ("--top-p", "0.5x")):
                out = subprocess.run(base + [flag, value], capture_output=True, text=True,
                                     timeout=600)
                self.assertNotEqual(out.returncode, 0, (flag, value))
                self.assertIn("%s expects a finite decimal number, found '%s'" % (flag, value),
                              out.stderr)
            missing = os.path.join(directory, "no-such-tokenizer.model")
            out = subprocess.run(base + ["--tokenizer", missing], capture_output=True, text=True,
                                 timeout=600)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn("no-such-tokenizer.model", out.stderr)


if __name__ == "__main__":
    torch.manual_seed(SEED)
    junit_main.main()
