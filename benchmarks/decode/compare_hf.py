#!/usr/bin/env python3
"""PyTorch decoders on the checkpoint benchmarks/decode wrote, for the GPU host:
the same greedy decode that grove's `decode` benchmark times, in

  hf_dynamic   transformers' LlamaForCausalLM.generate, eager, dynamic cache
  hf_static    the same with cache_implementation="static"
  gpt_fast     a gpt-fast-style decoder: the KV cache as buffers written in
               place (index_copy_), scaled_dot_product_attention over the whole
               cache with a position mask, one step under
               torch.compile(mode="reduce-overhead", fullgraph=True)

For each batch of --batches, B seeded prompts of --prompt tokens; tokens/s is
B x steps / the time of the decode steps (generate's time includes its one
prefill; gpt_fast times the steps alone). Model bandwidth utilisation uses the
bytes benchmarks/decode counts: weights less the input embedding table, plus
the KV cache of B rows over max_seq_len positions, per step. A variant that
fails is recorded with its error and the run goes on; the JSON is rewritten
after each row.

  python3 benchmarks/decode/compare_hf.py --model-dir /tmp/grove_decode_models/1b_bf16 \\
      --json compare_hf.json [--batches 1,8,32,64] [--steps 64] [--hf-steps 16]
      [--prompt 16] [--max-seq-len 128] [--variants hf_dynamic,hf_static,gpt_fast]
      [--hbm-tbs 3.35] [--grove-json decode.json]

With --grove-json (the JSON of benchmarks/decode on the same checkpoint), row
0's prompt at batch 1 is decoded greedily by transformers' generate (eager,
dynamic cache) for as many tokens as grove gave, and the report says how many
are identical, the first step that differs and transformers' top-2 logit margin
there (bf16 near ties may differ between two correct decoders).
"""
import argparse
import datetime
import json
import os
import sys
import time
import traceback

VARIANTS = ["hf_dynamic", "hf_static", "gpt_fast"]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--json", required=True)
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--steps", type=int, default=64, help="gpt_fast decode steps")
    parser.add_argument("--hf-steps", type=int, default=16, help="generate's new tokens")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--hbm-tbs", type=float, default=3.35)
    parser.add_argument("--grove-json", help="benchmarks/decode's JSON: compare row 0's tokens")
    args = parser.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    args.variants = [v for v in args.variants.split(",") if v]
    for variant in args.variants:
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}; choose from {VARIANTS}")
    if args.prompt + max(args.steps, args.hf_steps) > args.max_seq_len:
        parser.error("--prompt plus the steps exceed --max-seq-len")
    return args


def prompts(torch, batch, length, vocab):
    generator = torch.Generator().manual_seed(7)
    return torch.randint(3, vocab, (batch, length), generator=generator).cuda()


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def time_hf(torch, model, batch, args, static):
    ids = prompts(torch, batch, args.prompt, model.config.vocab_size)
    kwargs = dict(max_new_tokens=args.hf_steps, min_new_tokens=args.hf_steps, do_sample=False,
                  pad_token_id=0, eos_token_id=None)
    if static:
        kwargs["cache_implementation"] = "static"
    samples = []
    for repeat in range(args.repeats + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        torch.cuda.synchronize()
        if repeat > 0:
            samples.append((time.perf_counter() - start) / args.hf_steps)
    assert out.shape[1] == args.prompt + args.hf_steps, out.shape
    return median(samples)


def grove_row0(path, config):
    """Row 0's prompt and greedy tokens at batch 1 from benchmarks/decode's JSON, for the
    config of this checkpoint."""
    with open(path) as handle:
        report = json.load(handle)
    for entry in report["configs"]:
        if (entry["hidden_size"], entry["layers"], entry["vocab_size"]) != (
                config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]):
            continue
        for result in entry["results"]:
            if result["batch"] == 1 and "row0_greedy" in result:
                return result["row0_prompt"], result["row0_greedy"]
    raise SystemExit(f"{path}: no batch-1 result with row0_greedy for this checkpoint's config")


def compare_tokens(torch, model, prompt, expected):
    """transformers' greedy tokens for `prompt` against grove's `expected`."""
    ids = torch.tensor([prompt], device="cuda")
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=len(expected), min_new_tokens=len(expected),
                             do_sample=False, pad_token_id=0, eos_token_id=None)
    got = out[0, len(prompt):].tolist()
    same = sum(1 for a, b in zip(got, expected) if a == b)
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)
    result = {"tokens": len(expected), "identical": same, "first_differing_step": first,
              "transformers_tokens": got, "grove_tokens": expected}
    if first is not None:  # transformers' top-2 margin where they part: a near tie or a bug
        prefix = torch.tensor([prompt + got[:first]], device="cuda")
        with torch.no_grad():
            logits = model(prefix).logits[0, -1].float()
        top = torch.topk(logits, 2).values
        result["top2_margin_at_first_difference"] = float(top[0] - top[1])
        result["grove_token_logit_gap"] = float(top[0] - logits[expected[first]])
    return result


def build_gpt_fast(torch, config, weights, batch, max_seq_len, dtype):
    nn = torch.nn
    F = torch.nn.functional
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    d = config.get("head_dim", hidden // heads)
    eps = config.get("rms_norm_eps", 1e-6)
    theta = config.get("rope_theta", 10000.0)

    def rms_norm(x, weight):
        x32 = x.float()
        return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    def rotate(x, cos, sin):  # HF's rotate_half convention
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = {name: tensor.to(device="cuda", dtype=dtype) for name, tensor in weights.items()}
            self.layers = config["num_hidden_layers"]
            for layer in range(self.layers):
                self.register_buffer(f"k{layer}", torch.zeros(batch, kv_heads, max_seq_len, d,
                                                              dtype=dtype, device="cuda"))
                self.register_buffer(f"v{layer}", torch.zeros(batch, kv_heads, max_seq_len, d,
                                                              dtype=dtype, device="cuda"))
            inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
            angles = torch.arange(max_seq_len, dtype=torch.float32)[:, None] * inv_freq[None]
            angles = torch.cat([angles, angles], dim=-1)
            self.register_buffer("cos", angles.cos().to(dtype).cuda())
            self.register_buffer("sin", angles.sin().to(dtype).cuda())
            self.register_buffer("causal", torch.tril(torch.ones(max_seq_len, max_seq_len,
                                                                 dtype=torch.bool, device="cuda")))

        def forward(self, ids, input_pos):  # ids [B, S], input_pos [S]
            w = self.w
            x = F.embedding(ids, w["model.embed_tokens.weight"])
            s = ids.shape[1]
            cos = self.cos[input_pos][None, :, None, :]
            sin = self.sin[input_pos][None, :, None, :]
            mask = self.causal[input_pos][None, None]  # [1, 1, S, T]
            for layer in range(self.layers):
                p = f"model.layers.{layer}."
                h = rms_norm(x, w[p + "input_layernorm.weight"])
                q = F.linear(h, w[p + "self_attn.q_proj.weight"]).view(batch, s, heads, d)
                k = F.linear(h, w[p + "self_attn.k_proj.weight"]).view(batch, s, kv_heads, d)
                v = F.linear(h, w[p + "self_attn.v_proj.weight"]).view(batch, s, kv_heads, d)
                q, k = rotate(q, cos, sin), rotate(k, cos, sin)
                k_cache, v_cache = getattr(self, f"k{layer}"), getattr(self, f"v{layer}")
                k_cache.index_copy_(2, input_pos, k.transpose(1, 2))
                v_cache.index_copy_(2, input_pos, v.transpose(1, 2))
                keys = k_cache.repeat_interleave(heads // kv_heads, dim=1)
                values = v_cache.repeat_interleave(heads // kv_heads, dim=1)
                o = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask)
                x = x + F.linear(o.transpose(1, 2).reshape(batch, s, heads * d),
                                 w[p + "self_attn.o_proj.weight"])
                h = rms_norm(x, w[p + "post_attention_layernorm.weight"])
                gate = F.linear(h, w[p + "mlp.gate_proj.weight"])
                up = F.linear(h, w[p + "mlp.up_proj.weight"])
                x = x + F.linear(F.silu(gate) * up, w[p + "mlp.down_proj.weight"])
            x = rms_norm(x, w["model.norm.weight"])
            return F.linear(x[:, -1], w["lm_head.weight"]).float()

    return Decoder()


def time_gpt_fast(torch, config, weights, batch, args):
    model = build_gpt_fast(torch, config, weights, batch, args.max_seq_len, torch.bfloat16
                           if config.get("torch_dtype") == "bfloat16" else torch.float32)
    ids = prompts(torch, batch, args.prompt, config["vocab_size"])

    def step(token, input_pos):
        return model(token, input_pos).argmax(-1, keepdim=True)

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    samples = []
    with torch.no_grad():
        for repeat in range(args.repeats + 2):  # two warm-ups: compile, then record
            token = model(ids, torch.arange(args.prompt, device="cuda")).argmax(-1, keepdim=True)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for position in range(args.prompt, args.prompt + args.steps):
                torch.compiler.cudagraph_mark_step_begin()
                token = compiled(token, torch.tensor([position], device="cuda")).clone()
            torch.cuda.synchronize()
            if repeat > 1:
                samples.append((time.perf_counter() - start) / args.steps)
    return median(samples)


def main(argv):
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("compare_hf: no CUDA device; this script is for the GPU host", file=sys.stderr)
        return 2
    with open(os.path.join(args.model_dir, "config.json")) as handle:
        config = json.load(handle)
    from safetensors.torch import load_file
    weights = load_file(os.path.join(args.model_dir, "model.safetensors"))
    element = 2 if config.get("torch_dtype") == "bfloat16" else 4
    total = sum(t.numel() for t in weights.values()) * element
    embed = weights["model.embed_tokens.weight"].numel() * element
    kv_heads = config.get("num_key_value_heads", config["num_attention_heads"])
    d = config.get("head_dim", config["hidden_size"] // config["num_attention_heads"])
    report = {"benchmark": "decode_compare_hf", "device_name": torch.cuda.get_device_name(),
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
              "torch": torch.__version__, "model_dir": args.model_dir, "config": config,
              "weights_bytes": total, "hbm_tbs": args.hbm_tbs, "max_seq_len": args.max_seq_len,
              "results": []}
    model = None

    def load_hf():
        import transformers
        report["transformers"] = transformers.__version__
        dtype = torch.bfloat16 if element == 2 else torch.float32
        try:  # transformers 5 names it dtype; 4.x torch_dtype
            loaded = transformers.LlamaForCausalLM.from_pretrained(args.model_dir, dtype=dtype)
        except TypeError:
            loaded = transformers.LlamaForCausalLM.from_pretrained(args.model_dir,
                                                                   torch_dtype=dtype)
        return loaded.cuda().eval()

    if args.grove_json:
        prompt, expected = grove_row0(args.grove_json, config)
        model = load_hf()
        tokens = compare_tokens(torch, model, prompt, expected)
        report["tokens_against_grove"] = tokens
        print(f"tokens against grove (batch 1, row 0): {tokens['identical']} of "
              f"{tokens['tokens']} identical; first differing step "
              f"{tokens['first_differing_step']}"
              + (f" (transformers' top-2 margin there {tokens['top2_margin_at_first_difference']:.4f},"
                 f" grove's token {tokens['grove_token_logit_gap']:.4f} below the top)"
                 if tokens["first_differing_step"] is not None else ""), flush=True)
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
            handle.write("\n")
    for variant in args.variants:
        if variant.startswith("hf") and model is None:
            model = load_hf()
        for batch in args.batches:
            row = {"variant": variant, "batch": batch}
            try:
                if variant == "gpt_fast":
                    step_s = time_gpt_fast(torch, config, weights, batch, args)
                else:
                    step_s = time_hf(torch, model, batch, args, static=variant == "hf_static")
                kv = 2 * config["num_hidden_layers"] * batch * kv_heads * args.max_seq_len * d * element
                row.update(step_us=step_s * 1e6, tokens_per_s=batch / step_s,
                           mbu=(total - embed + kv) / step_s / (args.hbm_tbs * 1e12))
                print(f"{variant:11s} batch {batch:3d}: {step_s * 1e6:10.1f} us/step "
                      f"{batch / step_s:10.1f} tokens/s  MBU {100 * row['mbu']:.1f}%", flush=True)
            except Exception as error:  # noqa: BLE001  a failing variant is a result
                row["error"] = f"{type(error).__name__}: {error}"
                traceback.print_exc()
                print(f"{variant:11s} batch {batch:3d}: failed ({row['error'][:200]})", flush=True)
            report["results"].append(row)
            with open(args.json, "w") as handle:
                json.dump(report, handle, indent=2)
                handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
