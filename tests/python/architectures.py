"""The architectures of tests/python/gpu_zoo_test.py's real models, written
in plain PyTorch that torch 1.13's make_fx traces (CI has no transformers,
timm or torchvision): GPT-2 (learned positions, pre-norm, GELU MLP), LLaMA
(RMSNorm, rotary embedding computed from the position ids the caller passes,
grouped-query attention, SwiGLU), BERT (post-norm encoder with a padding
mask built from an attention mask), an encoder-decoder (BART-like: encoder,
causal decoder with cross-attention), ViT (patches cut by reshapes, class
token) and ResNet (convolution, batch norm, max pool, residual add). Small
sizes, random weights."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def attention(q, k, v, mask=None, causal=False):
    """q, k, v: [B, H, T, D]; mask: additive, broadcast to [B, H, Tq, Tk]."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        time_q, time_k = q.shape[-2], k.shape[-2]
        allowed = torch.ones(time_q, time_k, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    if mask is not None:
        scores = scores + mask
    return torch.softmax(scores, dim=-1) @ v


def heads_of(x, heads):
    batch, time, width = x.shape
    return x.view(batch, time, heads, width // heads).transpose(1, 2)


def merge_heads(x):
    batch, heads, time, head = x.shape
    return x.transpose(1, 2).reshape(batch, time, heads * head)


class SelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x, mask=None, causal=False):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        y = attention(heads_of(q, self.heads), heads_of(k, self.heads), heads_of(v, self.heads),
                      mask, causal)
        return self.out(merge_heads(y))


class Gpt2(nn.Module):
    def __init__(self, vocab=500, width=128, heads=4, layers=2, max_len=64):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(max_len, width)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "norm1": nn.LayerNorm(width), "attention": SelfAttention(width, heads),
            "norm2": nn.LayerNorm(width), "up": nn.Linear(width, 4 * width),
            "down": nn.Linear(4 * width, width)}) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)[None]
        for block in self.blocks:
            x = x + block["attention"](block["norm1"](x), causal=True)
            x = x + block["down"](F.gelu(block["up"](block["norm2"](x)), approximate="tanh"))
        return self.head(self.norm(x))


class RmsNorm(nn.Module):
    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(width))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


class Llama(nn.Module):
    """The rotary angles come from the position ids the caller passes (HF's
    cache_position), so cos and sin depend on an input."""

    def __init__(self, vocab=500, width=128, heads=4, kv_heads=2, hidden=344, layers=2):
        super().__init__()
        self.heads, self.kv_heads, self.head = heads, kv_heads, width // heads
        self.tokens = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(nn.ModuleDict({
            "norm1": RmsNorm(width), "q": nn.Linear(width, width, bias=False),
            "k": nn.Linear(width, kv_heads * self.head, bias=False),
            "v": nn.Linear(width, kv_heads * self.head, bias=False),
            "o": nn.Linear(width, width, bias=False), "norm2": RmsNorm(width),
            "gate": nn.Linear(width, hidden, bias=False),
            "up": nn.Linear(width, hidden, bias=False),
            "down": nn.Linear(hidden, width, bias=False)}) for _ in range(layers))
        self.norm = RmsNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (
            torch.arange(0, self.head, 2).float() / self.head)), persistent=False)

    def forward(self, ids, positions):
        angles = positions[:, :, None].float() * self.inv_freq[None, None, :]
        angles = torch.cat([angles, angles], dim=-1)
        x = self.tokens(ids)
        cos, sin = angles.cos()[:, None].to(x.dtype), angles.sin()[:, None].to(x.dtype)
        repeat = self.heads // self.kv_heads
        for layer in self.layers:
            h = layer["norm1"](x)
            q = heads_of(layer["q"](h), self.heads)
            k = heads_of(layer["k"](h), self.kv_heads)
            v = heads_of(layer["v"](h), self.kv_heads)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(repeat, dim=1)
            v = v.repeat_interleave(repeat, dim=1)
            x = x + layer["o"](merge_heads(attention(q, k, v, causal=True)))
            h = layer["norm2"](x)
            x = x + layer["down"](F.silu(layer["gate"](h)) * layer["up"](h))
        return self.lm_head(self.norm(x))


class Bert(nn.Module):
    def __init__(self, vocab=500, width=128, heads=4, layers=2, max_len=64):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(max_len, width)
        self.norm = nn.LayerNorm(width)
        self.layers = nn.ModuleList(nn.ModuleDict({
            "attention": SelfAttention(width, heads), "norm1": nn.LayerNorm(width),
            "up": nn.Linear(width, 4 * width), "down": nn.Linear(4 * width, width),
            "norm2": nn.LayerNorm(width)}) for _ in range(layers))

    def forward(self, ids, attention_mask):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.tokens(ids) + self.positions(positions)[None])
        # HF BERT's extended attention mask: 0 where attended, the dtype's min where padded.
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer["norm1"](x + layer["attention"](x, mask))
            x = layer["norm2"](x + layer["down"](F.gelu(layer["up"](x))))
        return x


class CrossAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x, memory):
        k, v = self.kv(memory).chunk(2, dim=-1)
        y = attention(heads_of(self.q(x), self.heads), heads_of(k, self.heads),
                      heads_of(v, self.heads))
        return self.out(merge_heads(y))


class EncoderDecoder(nn.Module):
    def __init__(self, vocab=500, width=96, heads=4, layers=2):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.encoder = nn.ModuleList(nn.ModuleDict({
            "attention": SelfAttention(width, heads), "norm1": nn.LayerNorm(width),
            "up": nn.Linear(width, 2 * width), "down": nn.Linear(2 * width, width),
            "norm2": nn.LayerNorm(width)}) for _ in range(layers))
        self.decoder = nn.ModuleList(nn.ModuleDict({
            "attention": SelfAttention(width, heads), "norm1": nn.LayerNorm(width),
            "cross": CrossAttention(width, heads), "norm2": nn.LayerNorm(width),
            "up": nn.Linear(width, 2 * width), "down": nn.Linear(2 * width, width),
            "norm3": nn.LayerNorm(width)}) for _ in range(layers))

    def forward(self, ids, decoder_ids):
        memory = self.tokens(ids)
        for layer in self.encoder:
            memory = layer["norm1"](memory + layer["attention"](memory))
            memory = layer["norm2"](memory + layer["down"](F.gelu(layer["up"](memory))))
        x = self.tokens(decoder_ids)
        for layer in self.decoder:
            x = layer["norm1"](x + layer["attention"](x, causal=True))
            x = layer["norm2"](x + layer["cross"](x, memory))
            x = layer["norm3"](x + layer["down"](F.gelu(layer["up"](x))))
        return x


class Vit(nn.Module):
    def __init__(self, size=32, patch=8, width=96, heads=4, layers=2, classes=10):
        super().__init__()
        self.patch = patch
        count = (size // patch) ** 2
        self.embed = nn.Linear(3 * patch * patch, width)
        self.cls = nn.Parameter(0.02 * torch.randn(1, 1, width))
        self.positions = nn.Parameter(0.02 * torch.randn(1, count + 1, width))
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "norm1": nn.LayerNorm(width), "attention": SelfAttention(width, heads),
            "norm2": nn.LayerNorm(width), "up": nn.Linear(width, 2 * width),
            "down": nn.Linear(2 * width, width)}) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, images):
        batch, channels, height, width = images.shape
        p = self.patch
        patches = images.reshape(batch, channels, height // p, p, width // p, p)
        patches = patches.permute(0, 2, 4, 1, 3, 5).reshape(batch, -1, channels * p * p)
        x = torch.cat([self.cls.expand(batch, -1, -1), self.embed(patches)], dim=1)
        x = x + self.positions
        for block in self.blocks:
            x = x + block["attention"](block["norm1"](x))
            x = x + block["down"](F.gelu(block["up"](block["norm2"](x))))
        return self.head(self.norm(x)[:, 0])


class ResNet(nn.Module):
    """A stem and two basic blocks, as torchvision's ResNet-18 writes them
    (in-place ReLU and residual add)."""

    def __init__(self, width=16, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "conv1": nn.Conv2d(width, width, 3, padding=1, bias=False),
            "bn1": nn.BatchNorm2d(width),
            "conv2": nn.Conv2d(width, width, 3, padding=1, bias=False),
            "bn2": nn.BatchNorm2d(width)}) for _ in range(2))
        self.fc = nn.Linear(width, classes)
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):  # eval statistics that are not trivial
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)

    def forward(self, images):
        x = self.pool(torch.relu_(self.bn(self.stem(images))))
        for block in self.blocks:
            y = torch.relu_(block["bn1"](block["conv1"](x)))
            y = block["bn2"](block["conv2"](y))
            y += x
            x = torch.relu_(y)
        return self.fc(x.mean(dim=(2, 3)))


def cases():
    """(name, module, inputs) for each architecture, eval mode, random weights."""
    torch.manual_seed(0)
    ids = torch.randint(0, 500, (2, 16))
    attention_mask = torch.ones(2, 16, dtype=torch.long)
    attention_mask[1, 11:] = 0
    positions = torch.arange(16)[None].expand(1, 16).contiguous()
    return [
        ("gpt2", Gpt2().eval(), (ids,)),
        ("llama", Llama().eval(), (ids[:1], positions)),
        ("bert_padding_mask", Bert().eval(), (ids, attention_mask)),
        ("encoder_decoder", EncoderDecoder().eval(), (ids, torch.randint(0, 500, (2, 10)))),
        ("vit", Vit().eval(), (torch.randn(2, 3, 32, 32),)),
        ("resnet", ResNet().eval(), (torch.randn(1, 3, 32, 32),)),
    ]
