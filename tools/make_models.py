#!/usr/bin/env python3
"""Writes grove's benchmark models (benchmarks/models/*.json).

  python3 tools/make_models.py            # regenerate the files
  python3 tools/make_models.py --check    # exit 1 if the files are stale

The models use named dimensions ("batch", "seq") that a caller binds when it
loads them: load_model(json, {{"batch", 8}, {"seq", 32}}, device).
"""
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "benchmarks", "models")
SERVE_HTTP_MODELS = os.path.join(ROOT, "benchmarks", "serve_http", "models")


class Model:
    def __init__(self, name, description, dims):
        self.doc = {"name": name, "description": description, "dims": dims,
                    "inputs": [], "params": [], "buffers": [], "nodes": [], "outputs": []}
        self.seed = 0

    def input(self, name, shape, dtype="f32"):
        self.doc["inputs"].append({"name": name, "shape": shape, "dtype": dtype})
        return name

    def _state(self, section, name, shape, init, dtype):
        self.doc[section].append({"name": name, "shape": shape, "dtype": dtype, "init": init})
        return name

    def param(self, name, shape, init, dtype="f32"):
        if init["kind"] in ("normal", "uniform"):
            self.seed += 1
            init = dict(init, seed=self.seed)
        return self._state("params", name, shape, init, dtype)

    def buffer(self, name, shape, init, dtype="f32"):
        return self._state("buffers", name, shape, init, dtype)

    def node(self, name, op, inputs, **attrs):
        entry = {"name": name, "op": op, "inputs": inputs}
        if attrs:
            entry["attrs"] = attrs
        self.doc["nodes"].append(entry)
        return name

    def output(self, name):
        self.doc["outputs"].append(name)

    def linear_params(self, prefix, out_features, in_features, bias=True):
        # PyTorch's default nn.Linear init: U(-1/sqrt(in), 1/sqrt(in)).
        bound = 1.0 / math.sqrt(in_features)
        uniform = {"kind": "uniform", "low": -bound, "high": bound}
        weight = self.param(prefix + ".weight", [out_features, in_features], uniform)
        b = self.param(prefix + ".bias", [out_features], uniform) if bias else None
        return weight, b

    def linear(self, name, x, out_features, in_features, bias=True):
        weight, b = self.linear_params(name, out_features, in_features, bias)
        return self.node(name, "linear", [x, weight] + ([b] if b else []))

    def layer_norm(self, name, x, features):
        weight = self.param(name + ".weight", [features], {"kind": "ones"})
        bias = self.param(name + ".bias", [features], {"kind": "zeros"})
        return self.node(name, "layer_norm", [x, weight, bias], eps=1e-5)


def mlp(depth, width, description=""):
    m = Model(f"mlp{depth}x{width}",
              f"{depth} x [Linear {width}->{width} + GELU (tanh approximation)]{description}",
              {"batch": 1})
    h = m.input("x", ["batch", width])
    for layer in range(depth):
        h = m.linear(f"fc{layer}", h, width, width)
        h = m.node(f"gelu{layer}", "gelu", [h])
    m.output(h)
    return m.doc


def mlp16x512():
    return mlp(16, 512)


def mlp64x256():
    # serve_http's model where eager's launches, not the HTTP front, bound eager's answers at
    # max batch 64 (4x mlp16x512's kernels per call, rows a quarter as wide).
    return mlp(64, 256, ": four times mlp16x512's launches per call, rows half as wide")


def gpt4x256():
    vocab, d, heads, blocks, max_seq = 512, 256, 4, 4, 128
    dh = d // heads
    m = Model("gpt4x256",
              "GPT: token + positional embedding, 4 pre-LN blocks (d=256, 4 heads, causal "
              "self-attention, MLP 4d with GELU), final layer norm, LM head",
              {"batch": 1, "seq": 32})
    tokens = m.input("tokens", ["batch", "seq"], "i64")
    tok_table = m.param("tok_emb", [vocab, d], {"kind": "normal", "std": 0.02})
    pos_table = m.param("pos_emb", [max_seq, d], {"kind": "normal", "std": 0.02})
    mask = m.buffer("causal_mask", ["seq", "seq"], {"kind": "tril"}, "bool")
    scale = m.node("attn_scale", "full", [], value=1.0 / math.sqrt(dh))
    masked_fill = m.node("attn_masked_fill", "full", [], value=-1e9)
    tok = m.node("tok", "embedding", [tok_table, tokens])
    pos = m.node("pos", "slice", [pos_table], dim=0, start=0, end="seq")
    x = m.node("embed", "add", [tok, pos])
    for b in range(blocks):
        p = f"h{b}"
        ln1 = m.layer_norm(f"{p}.ln1", x, d)
        split = {}
        for part in ("q", "k", "v"):
            proj = m.linear(f"{p}.attn.{part}", ln1, d, d)
            split[part] = m.node(f"{p}.attn.{part}_heads", "reshape", [proj],
                                 shape=["batch", "seq", heads, dh])
        q = m.node(f"{p}.attn.q_t", "permute", [split["q"]], order=[0, 2, 1, 3])
        kt = m.node(f"{p}.attn.k_t", "permute", [split["k"]], order=[0, 2, 3, 1])
        v = m.node(f"{p}.attn.v_t", "permute", [split["v"]], order=[0, 2, 1, 3])
        scores = m.node(f"{p}.attn.scores", "matmul", [q, kt])
        scaled = m.node(f"{p}.attn.scaled", "mul", [scores, scale])
        masked = m.node(f"{p}.attn.masked", "where", [mask, scaled, masked_fill])
        probs = m.node(f"{p}.attn.probs", "softmax", [masked], dim=-1)
        context = m.node(f"{p}.attn.context", "matmul", [probs, v])
        merged = m.node(f"{p}.attn.merge_t", "permute", [context], order=[0, 2, 1, 3])
        merged = m.node(f"{p}.attn.merge", "reshape", [merged], shape=["batch", "seq", d])
        attn = m.linear(f"{p}.attn.out", merged, d, d)
        x = m.node(f"{p}.attn.residual", "add", [x, attn])
        ln2 = m.layer_norm(f"{p}.ln2", x, d)
        hidden = m.linear(f"{p}.mlp.fc", ln2, 4 * d, d)
        hidden = m.node(f"{p}.mlp.gelu", "gelu", [hidden])
        out = m.linear(f"{p}.mlp.proj", hidden, d, 4 * d)
        x = m.node(f"{p}.mlp.residual", "add", [x, out])
    final = m.layer_norm("ln_f", x, d)
    logits = m.linear("lm_head", final, vocab, d, bias=False)
    m.output(logits)
    return m.doc


def render(doc):
    return json.dumps(doc, indent=2) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    os.makedirs(MODELS, exist_ok=True)
    for directory, name, build in ((MODELS, "mlp16x512", mlp16x512),
                                   (MODELS, "gpt4x256", gpt4x256),
                                   (SERVE_HTTP_MODELS, "mlp64x256", mlp64x256)):
        path = os.path.join(directory, name + ".json")
        text = render(build())
        if check:
            with open(path) as existing:
                if existing.read() != text:
                    stale.append(path)
        else:
            with open(path, "w") as out:
                out.write(text)
    if stale:
        print("stale (run tools/make_models.py):", " ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
