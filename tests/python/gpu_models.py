"""Models in plain PyTorch for the GPU backend test and benchmark: grove's
mlp16x512 and gpt4x256 written as nn.Modules, a LLaMA-style block, and
PyTorch's own nn.TransformerEncoder."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    """16 x [Linear 512->512 + GELU (tanh)], like benchmarks/models/mlp16x512.json."""

    def __init__(self, width=512, depth=16):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = F.gelu(layer(x), approximate="tanh")
        return x


class GptBlock(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.out = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.proj = nn.Linear(4 * width, width)

    def forward(self, x):
        batch, time, width = x.shape
        h = self.ln1(x)

        def split(t):
            return t.view(batch, time, self.heads, width // self.heads).transpose(1, 2)

        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(batch, time, width))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    """gpt4x256: token + positional embedding, 4 pre-LN blocks, final LN, LM head."""

    def __init__(self, vocab=512, width=256, heads=4, layers=4, max_len=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(max_len, width)
        self.blocks = nn.ModuleList(GptBlock(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class RmsNorm(nn.Module):
    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class LlamaBlock(nn.Module):
    """RMSNorm, rotary embedding, causal attention, SiLU-gated MLP."""

    def __init__(self, width=256, heads=4, hidden=688, max_len=128):
        super().__init__()
        self.heads = heads
        self.norm1 = RmsNorm(width)
        self.wq = nn.Linear(width, width, bias=False)
        self.wk = nn.Linear(width, width, bias=False)
        self.wv = nn.Linear(width, width, bias=False)
        self.wo = nn.Linear(width, width, bias=False)
        self.norm2 = RmsNorm(width)
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)
        head = width // heads
        inverse = 1.0 / (10000 ** (torch.arange(0, head, 2).float() / head))
        angles = torch.outer(torch.arange(max_len).float(), inverse)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x):
        batch, time, width = x.shape
        h = self.norm1(x)

        def split(t):
            return t.view(batch, time, self.heads, width // self.heads).transpose(1, 2)

        q, k, v = split(self.wq(h)), split(self.wk(h)), split(self.wv(h))
        cos, sin = self.cos[:time], self.sin[:time]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(batch, time, width))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def transformer_encoder(width=128, heads=4, layers=2):
    layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.0,
                                       batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


class WithCumprod(nn.Module):
    """A model with an op grove does not take (cumprod) between two linears."""

    def __init__(self, width=128):
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)

    def forward(self, x):
        return self.b(torch.cumprod(1.0 + 0.01 * torch.tanh(self.a(x)), dim=-1)
                      / math.sqrt(x.shape[-1]))


def cases(device):
    """(name, module, example inputs) for each model of the issue."""
    torch.manual_seed(0)
    return [
        ("mlp16x512_b1", Mlp().to(device).eval(), (torch.randn(1, 512, device=device),)),
        ("mlp16x512_b256", Mlp().to(device).eval(), (torch.randn(256, 512, device=device),)),
        ("gpt4x256_b1_t32", Gpt().to(device).eval(),
         (torch.randint(0, 512, (1, 32), device=device),)),
        ("llama_block_b1_t32", LlamaBlock().to(device).eval(),
         (torch.randn(1, 32, 256, device=device),)),
        ("transformer_encoder_b2_t16", transformer_encoder().to(device).eval(),
         (torch.randn(2, 16, 128, device=device),)),
    ]
