"""Plain-PyTorch blocks shaped like the real models that split on the ops of
issue 33 part 1, each imported whole on sim (plan.unsupported empty, one grove
program) and matched against torch: a LLaMA-like decoder block (rotary
embedding with cos/sin computed in the forward), a BERT-like encoder (padding
mask by advanced indexing and bitwise_and, token types by gather), and a
ResNet-like network (convolutions, eval batch norm, in-place relu_ and add_,
max pooling, adaptive average pooling)."""
import math
import os
import sys
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from grove import importer  # noqa: E402
import junit_main  # noqa: E402


class RmsNorm(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(width))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaBlock(nn.Module):
    """HF LLaMA's decoder layer in plain PyTorch: rotary embedding (inv_freq
    buffer, cos/sin of positions computed per call), causal attention, SwiGLU."""

    def __init__(self, width=32, heads=4, hidden=64):
        super().__init__()
        self.heads, self.head = heads, width // heads
        self.norm1, self.norm2 = RmsNorm(width), RmsNorm(width)
        self.q, self.k, self.v, self.o = (nn.Linear(width, width, bias=False) for _ in range(4))
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head, 2).float() / self.head))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, x, position_ids):
        batch, time, width = x.shape
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        h = self.norm1(x)

        def heads(t):
            return t.view(batch, time, self.heads, self.head).transpose(1, 2)

        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head)
        causal = torch.ones(time, time, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, time, width)
        x = x + self.o(y)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class BertEncoder(nn.Module):
    """HF BERT's embeddings and one encoder layer: token types gathered from
    a buffer by position, a padding mask built by advanced indexing of the
    attention mask and combined with bitwise_and (transformers' sdpa_mask)."""

    def __init__(self, vocab=40, width=32, heads=4, length=16):
        super().__init__()
        self.heads = heads
        self.words = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(length, width)
        self.types = nn.Embedding(2, width)
        self.register_buffer("token_type_ids", torch.zeros(1, length, dtype=torch.long))
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.ff1, self.ff2 = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, ids, attention_mask, position_ids):
        batch, time = ids.shape
        types = torch.gather(self.token_type_ids.expand(batch, -1), 1, position_ids)
        x = self.norm(self.words(ids) + self.positions(position_ids) + self.types(types))
        padding = attention_mask.bool()
        batch_index = torch.arange(batch)[:, None, None, None]
        kv_index = torch.arange(time)[None, None, None, :]
        q_index = torch.arange(time)[None, None, :, None]
        allowed = padding[batch_index, kv_index] & (q_index >= 0)
        width = x.shape[-1]
        q, k, v = self.qkv(x).split(width, dim=-1)

        def heads(t):
            return t.view(batch, time, self.heads, width // self.heads).transpose(1, 2)

        scores = heads(q) @ heads(k).transpose(-2, -1) / math.sqrt(width // self.heads)
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        y = (scores.softmax(-1) @ heads(v)).transpose(1, 2).reshape(batch, time, width)
        x = self.norm2(x + self.out(y))
        return x + self.ff2(F.gelu(self.ff1(x)))


class BasicBlock(nn.Module):
    def __init__(self, inputs, outputs, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or inputs != outputs:
            self.down = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False),
                                      nn.BatchNorm2d(outputs))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class SmallResNet(nn.Module):
    """torchvision's ResNet-18 shape at a small size: stem (7x7/2 conv, batch
    norm, relu_, 3x3/2 max pool), two basic blocks, adaptive pool, fc."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = BasicBlock(8, 8, 1)
        self.layer2 = BasicBlock(8, 16, 2)
        self.fc = nn.Linear(16, classes)
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):  # statistics worth testing
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.data.uniform_(0.5, 1.5)
                module.bias.data.uniform_(-0.2, 0.2)

    def forward(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class RealModelShapesTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(20261126)

    def import_whole_and_match(self, module, inputs, rtol=1e-4, atol=1e-4):
        module = module.eval()
        with torch.no_grad():
            graph = make_fx(module)(*inputs)
            expected = module(*inputs)
        plan = importer.import_graph(graph, list(inputs))
        self.assertEqual(plan.unsupported, [])
        self.assertEqual([kind for kind, _ in plan.steps], ["grove"])
        results = {}
        for backend in ("eager", "cudagraphs"):
            runner = plan.compile(backend=backend)
            for _ in range(3):
                results[backend] = runner(*inputs).clone()
        torch.testing.assert_close(results["eager"], expected, rtol=rtol, atol=atol)
        self.assertTrue(torch.equal(results["eager"], results["cudagraphs"]))
        return plan

    def test_llama_block_with_rotary_embedding(self):
        x = torch.randn(2, 12, 32)
        positions = torch.arange(3, 15).expand(2, 12).contiguous()
        plan = self.import_whole_and_match(LlamaBlock(), (x, positions))
        ops = {node["op"] for node in plan.programs()[0]["nodes"]}
        self.assertTrue({"sin", "cos"} <= ops, ops)

    def test_bert_encoder_with_padding_mask(self):
        ids = torch.randint(0, 40, (3, 10))
        mask = torch.ones(3, 10, dtype=torch.long)
        mask[1, 7:] = 0
        mask[2, 4:] = 0
        positions = torch.arange(10).expand(3, 10).contiguous()
        plan = self.import_whole_and_match(BertEncoder(), (ids, mask, positions))
        ops = {node["op"] for node in plan.programs()[0]["nodes"]}
        self.assertIn("bitwise_and", ops)

    def test_multi_head_attention_in_eval_mode_imports_whole(self):
        # nn.MultiheadAttention's inference fast path traces as one fused op
        # (aten._native_multi_head_attention: torchvision's ViT, Whisper-like
        # encoders); written out in grove ops (aten_fused_ops.py), self- and
        # cross-attention, with the attention weights where they are read.
        attention = nn.MultiheadAttention(16, 4, batch_first=True)
        query, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)

        class SelfAttention(nn.Module):
            def __init__(self, need_weights, average):
                super().__init__()
                self.attention, self.need, self.average = attention, need_weights, average

            def forward(self, x, memory):
                mixed, weights = self.attention(x, x, x, need_weights=self.need,
                                                average_attn_weights=self.average)
                crossed, _ = self.attention(x, memory, memory, need_weights=False)
                out = mixed + crossed
                return out if weights is None else out + weights.sum() * 0.1

        for need_weights, average in ((False, True), (True, True), (True, False)):
            module = SelfAttention(need_weights, average).eval()
            with torch.no_grad():
                traced = make_fx(module)(query, memory)
            if torch.__version__ < "2":  # PyTorch 2.x's make_fx writes the fast path out itself
                self.assertIn("_native_multi_head_attention", traced.code)
            self.import_whole_and_match(module, (query, memory))

    def test_resnet_like_network(self):
        self.import_whole_and_match(SmallResNet(), (torch.randn(2, 3, 32, 32),))

    def test_resnet_like_network_through_the_torch_backend(self):
        # What dynamo hands the backend on PyTorch >= 2.5: the parameters and
        # buffers lifted to graph inputs, which it binds as static inputs.
        import grove.torch

        module = SmallResNet().eval()
        state = dict(module.named_parameters())
        state.update(module.named_buffers())
        names = list(state)
        call = getattr(torch, "func", torch.nn.utils.stateless).functional_call

        def function(x, *tensors):
            return call(module, dict(zip(names, tensors)), (x,))

        x = torch.randn(1, 3, 32, 32)
        inputs = [x] + [state[name] for name in names]
        with torch.no_grad():
            compiled = grove.torch.compile_graph(function, inputs, mode="cudagraphs")
            self.assertEqual(compiled.unsupported, [])
            expected = module(x)
            for _ in range(3):
                result = compiled(*inputs)
        torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-4)
        grove.torch.mark_step_begin()

if __name__ == "__main__":
    junit_main.main()
