"""A gpt-fast-style decoder in plain PyTorch: the KV cache lives in module
buffers of a fixed size, written at the positions `input_pos` with
`index_copy_` (keys) and `index_put_` (values: `v_cache[:, :, input_pos] = v`
on PyTorch 2.x, as gpt-fast writes it); the causal mask is a buffer
indexed by `input_pos`, so a decode step has the same shapes at every
position. Shared by static_cache_decode_test.py (sim, PyTorch 1.13) and
benchmarks/torch_zoo.py (GPU).

`functional_step(model)` returns a function of (*params, *buffers, tokens,
input_pos) and its static positions: what dynamo hands a backend for the
module (parameters and buffers lifted to inputs, marked static), built
without dynamo."""
import torch
import torch.nn as nn
import torch.nn.functional as F


_SLICE_WRITES = hasattr(torch, "compile")  # PyTorch 2.x


class KvCache(nn.Module):
    def __init__(self, batch, heads, max_length, head_dim, dtype=torch.float32):
        super().__init__()
        shape = (batch, heads, max_length, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype))

    def update(self, input_pos, k, v):
        self.k_cache.index_copy_(2, input_pos, k)
        if _SLICE_WRITES:
            self.v_cache[:, :, input_pos] = v  # gpt-fast's write: index_put_ through slices
        else:
            # The same index_put_ without the two full slices, which PyTorch
            # 1.13's functionalization cannot trace (undefined sym_strides).
            torch.ops.aten.index_put_(self.v_cache, [None, None, input_pos], v)
        return self.k_cache, self.v_cache


class Attention(nn.Module):
    def __init__(self, width, heads, batch, max_length):
        super().__init__()
        self.heads = heads
        self.wqkv = nn.Linear(width, 3 * width, bias=False)
        self.wo = nn.Linear(width, width, bias=False)
        self.kv_cache = KvCache(batch, heads, max_length, width // heads)

    def forward(self, x, mask, input_pos):
        batch, length, width = x.shape
        q, k, v = self.wqkv(x).split(width, dim=-1)
        head_dim = width // self.heads
        q, k, v = (t.view(batch, length, self.heads, head_dim).transpose(1, 2) for t in (q, k, v))
        k, v = self.kv_cache.update(input_pos, k, v)
        scores = q @ k.transpose(-2, -1) / head_dim ** 0.5
        scores = scores.masked_fill(~mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.wo(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, width, heads, batch, max_length):
        super().__init__()
        self.attention_norm = nn.LayerNorm(width)
        self.attention = Attention(width, heads, batch, max_length)
        self.ffn_norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x, mask, input_pos):
        x = x + self.attention(self.attention_norm(x), mask, input_pos)
        return x + self.down(F.gelu(self.up(self.ffn_norm(x)), approximate="tanh"))


class StaticCacheDecoder(nn.Module):
    def __init__(self, vocab=64, width=32, heads=4, layers=2, batch=1, max_length=32):
        super().__init__()
        self.max_length = max_length
        self.tok_embeddings = nn.Embedding(vocab, width)
        self.pos_embeddings = nn.Embedding(max_length, width)
        self.layers = nn.ModuleList(Block(width, heads, batch, max_length) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.output = nn.Linear(width, vocab, bias=False)
        self.register_buffer("causal_mask", torch.tril(
            torch.ones(max_length, max_length, dtype=torch.bool)))

    def forward(self, tokens, input_pos):
        mask = self.causal_mask[None, None, input_pos]
        x = self.tok_embeddings(tokens) + self.pos_embeddings(input_pos)
        for layer in self.layers:
            x = layer(x, mask, input_pos)
        return self.output(self.norm(x))

    def reset_cache(self):
        for layer in self.layers:
            layer.attention.kv_cache.k_cache.zero_()
            layer.attention.kv_cache.v_cache.zero_()


def _functional_call(model, tensors, args):
    try:
        from torch.func import functional_call  # PyTorch 2.x
    except ImportError:
        from torch.nn.utils.stateless import functional_call  # PyTorch 1.13
    return functional_call(model, tensors, args)


def functional_step(model, static_buffers=True):
    """(step, its state tensors): step(*state, tokens, input_pos) runs the
    model on `state` (parameters, then buffers, marked as
    torch._dynamo.mark_static_address marks them unless static_buffers is
    False)."""
    names = [name for name, _ in model.named_parameters()] + \
        [name for name, _ in model.named_buffers()]
    state = [p for _, p in model.named_parameters()] + [b for _, b in model.named_buffers()]
    for buffer in state:
        if isinstance(buffer, nn.Parameter):
            continue
        if static_buffers:
            buffer._dynamo_static_input_type = "unguarded"
        elif hasattr(buffer, "_dynamo_static_input_type"):
            del buffer._dynamo_static_input_type

    def step(*args):
        tensors = dict(zip(names, args[:len(names)]))
        return _functional_call(model, tensors, tuple(args[len(names):]))

    return step, state


def greedy(forward, prompt, new_tokens):
    """Greedy decoding: forward(tokens [1, T], input_pos [T]) -> logits [1, T, V]."""
    device = prompt.device
    length = prompt.shape[1]
    logits = forward(prompt, torch.arange(length, device=device))
    token = logits[:, -1].argmax(-1, keepdim=True)
    out = [token]
    for position in range(length, length + new_tokens - 1):
        logits = forward(token, torch.tensor([position], device=device))
        token = logits[:, -1].argmax(-1, keepdim=True)
        out.append(token)
    return torch.cat(out, dim=1)
