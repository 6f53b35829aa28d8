"""Small LLaMA and GPT-2 decoders in plain PyTorch with Hugging Face's module
names, and checkpoint directories (config.json, model.safetensors) written from
them through grove_weights: what the grove decoder tests compare against on CI
(torch 1.13, no transformers). The math follows transformers' LlamaForCausalLM
and GPT2LMHeadModel (eager attention); the GPU-host test checks the files
against transformers itself.
"""
import json
import math
import os

import torch
from torch import nn

import grove_weights


def llama_config(dtype="float32", vocab=97, hidden=32, layers=2, heads=4, kv_heads=2,
                 intermediate=48, positions=64):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": hidden, "intermediate_size": intermediate, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "max_position_embeddings": positions, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": dtype,
        "bos_token_id": 1, "eos_token_id": 2, "attention_bias": False,
    }


def transformers5_llama_config(dtype="float32", theta=500000.0, scaling=None, eos=(2,), **sizes):
    """llama_config as transformers 5 writes it: "dtype" for "torch_dtype", one
    "rope_parameters" dict (theta, type and a scaling's numbers) for the
    top-level "rope_theta" and "rope_scaling", and eos_token_id a list."""
    config = llama_config(dtype, **sizes)
    for key in ("torch_dtype", "rope_theta"):
        del config[key]
    config["dtype"] = dtype
    config["rope_parameters"] = dict(scaling or {"rope_type": "default"}, rope_theta=theta)
    config["eos_token_id"] = list(eos)
    return config


def model_dtype(config):
    """The torch dtype a config names (transformers 5's "dtype" or 4's "torch_dtype")."""
    name = config.get("dtype", config.get("torch_dtype"))
    return torch.bfloat16 if name == "bfloat16" else torch.float32


def rope_settings(config):
    """(theta, the rotary dict or {}) of either layout."""
    if config.get("rope_parameters"):
        rope = config["rope_parameters"]
        return rope.get("rope_theta", 10000.0), rope
    return config.get("rope_theta", 10000.0), config.get("rope_scaling") or {}


def inverse_frequencies(config, d):
    """inv_freq [d / 2] as transformers computes it for the config's rotary type
    (default, linear, llama3), in f32 tensor arithmetic."""
    theta, rope = rope_settings(config)
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "linear":
        return inv_freq / rope["factor"]
    if kind == "llama3":
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        wavelength = 2 * math.pi / inv_freq
        scaled = torch.where(wavelength > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelength - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelength < old / high) * ~(wavelength > old / low)
        return torch.where(medium, blended, scaled)
    assert kind == "default", kind
    return inv_freq


def gpt2_config(dtype="float32", vocab=97, hidden=32, layers=2, heads=4, positions=64):
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": vocab,
        "n_embd": hidden, "n_layer": layers, "n_head": heads, "n_positions": positions,
        "n_inner": None, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
        "torch_dtype": dtype, "bos_token_id": 0, "eos_token_id": 0,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
    }


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def causal_softmax(scores, dtype):
    n = scores.shape[-1]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    scores = scores.float().masked_fill(~mask, torch.finfo(torch.float32).min)
    return torch.softmax(scores, dim=-1).to(dtype)


class LlamaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.d = c.get("head_dim") or c["hidden_size"] // self.heads
        h = c["hidden_size"]
        # Qwen2: biases on q, k and v; Qwen3: an RMSNorm of each query and key head.
        bias = c["model_type"] == "qwen2"
        self.q_proj = nn.Linear(h, self.heads * self.d, bias=bias)
        self.k_proj = nn.Linear(h, self.kv_heads * self.d, bias=bias)
        self.v_proj = nn.Linear(h, self.kv_heads * self.d, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.d, h, bias=False)
        if c["model_type"] == "qwen3":
            self.q_norm = RMSNorm(self.d, c["rms_norm_eps"])
            self.k_norm = RMSNorm(self.d, c["rms_norm_eps"])
        self.inv_freq = inverse_frequencies(c, self.d)

    def forward(self, x):
        n = x.shape[0]
        q = self.q_proj(x).view(n, self.heads, self.d)
        k = self.k_proj(x).view(n, self.kv_heads, self.d)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(0, 1), k.transpose(0, 1)
        v = self.v_proj(x).view(n, self.kv_heads, self.d).transpose(0, 1)
        freqs = torch.outer(torch.arange(n).float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        groups = self.heads // self.kv_heads
        k = k.repeat_interleave(groups, dim=0)
        v = v.repeat_interleave(groups, dim=0)
        scores = torch.matmul(q, k.transpose(1, 2)) * (1.0 / math.sqrt(self.d))
        out = torch.matmul(causal_softmax(scores, x.dtype), v)
        return self.o_proj(out.transpose(0, 1).reshape(n, self.heads * self.d))


class LlamaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = LlamaAttention(c)
        self.mlp = LlamaMLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([LlamaLayer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class LlamaForCausalLM(nn.Module):
    """logits [n, vocab] of a sequence of n token ids."""

    def __init__(self, c):
        super().__init__()
        self.model = LlamaModel(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x)).float()


class Conv1D(nn.Module):
    """HF's Conv1D: y = x @ weight + bias, weight stored [in, out]."""

    def __init__(self, out_features, in_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Gpt2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["n_embd"]
        self.heads, self.d = c["n_head"], h // c["n_head"]
        self.c_attn = Conv1D(3 * h, h)
        self.c_proj = Conv1D(h, h)

    def forward(self, x):
        n, h = x.shape
        q, k, v = self.c_attn(x).split(h, dim=1)
        q, k, v = (t.view(n, self.heads, self.d).transpose(0, 1) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(1, 2)) * (1.0 / math.sqrt(self.d))
        out = torch.matmul(causal_softmax(scores, x.dtype), v)
        return self.c_proj(out.transpose(0, 1).reshape(n, h))


class Gpt2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["n_embd"]
        inner = c["n_inner"] or 4 * h
        self.c_fc = Conv1D(inner, h)
        self.c_proj = Conv1D(h, inner)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class Gpt2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["n_embd"]
        self.ln_1 = nn.LayerNorm(h, eps=c["layer_norm_epsilon"])
        self.attn = Gpt2Attention(c)
        self.ln_2 = nn.LayerNorm(h, eps=c["layer_norm_epsilon"])
        self.mlp = Gpt2MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["n_positions"], c["n_embd"])
        self.h = nn.ModuleList([Gpt2Block(c) for _ in range(c["n_layer"])])
        self.ln_f = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])


class GPT2LMHeadModel(nn.Module):
    """logits [n, vocab] of a sequence of n token ids; lm_head is tied to wte."""

    def __init__(self, c):
        super().__init__()
        self.transformer = Gpt2Model(c)

    def forward(self, ids):
        t = self.transformer
        x = t.wte(ids) + t.wpe(torch.arange(ids.shape[0]))
        for block in t.h:
            x = block(x)
        return torch.matmul(t.ln_f(x), t.wte.weight.t()).float()


def make_model(config, seed):
    """The reference module of `config` with seeded random weights (norms near 1)."""
    torch.manual_seed(seed)
    model = (GPT2LMHeadModel(config) if config["model_type"] == "gpt2"
             else LlamaForCausalLM(config))  # Note [LLaMA's family]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p) if name.endswith("weight") else 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.5 * torch.randn_like(p))
    return model.to(model_dtype(config)).eval()


def write_checkpoint(model, config, directory, shards=1, generation_config=None):
    """config.json and model.safetensors (HF names; format pt, as transformers
    requires), or with shards > 1 the tensors dealt over that many
    model-0000K-of-0000N.safetensors files and model.safetensors.index.json, as
    save_pretrained writes a sharded checkpoint; generation_config.json when given."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    if generation_config is not None:
        with open(os.path.join(directory, "generation_config.json"), "w") as f:
            json.dump(generation_config, f, indent=1)
    state = {name: t.detach().contiguous() for name, t in model.state_dict().items()}
    if shards == 1:
        grove_weights.save_file(state, os.path.join(directory, "model.safetensors"),
                                metadata={"format": "pt"})
        return
    names = sorted(state)
    weight_map = {}
    for k in range(shards):
        shard = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        part = {name: state[name] for name in names[k::shards]}
        weight_map.update({name: shard for name in part})
        grove_weights.save_file(part, os.path.join(directory, shard), metadata={"format": "pt"})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(t.numel() * t.element_size()
                                                  for t in state.values())},
                   "weight_map": weight_map}, f, indent=1)


@torch.no_grad()
def greedy(model, prompt, steps):
    """(tokens, logits per step [steps, vocab]) of greedy decoding by full recompute."""
    ids = list(prompt)
    rows = []
    for _ in range(steps):
        logits = model(torch.tensor(ids))[-1]
        rows.append(logits)
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], torch.stack(rows)
