"""The converters of PyTorch's fused inference ops of its attention modules,
written out in grove ops: nn.TransformerEncoderLayer's
(aten._transformer_encoder_layer_fwd) and nn.MultiheadAttention's
(aten._native_multi_head_attention, torchvision's ViT in eval mode).
Importing this module adds them to aten_ops.CONVERTERS."""

import math

from grove.aten_ops import CONVERTERS, _exact_gelu
from grove.fx_common import Unsupported


def _encoder_layer(c, a):
    """PyTorch's fused nn.TransformerEncoderLayer (its inference fast path),
    written out: self-attention, residuals, two layer norms, a ReLU or GELU MLP."""
    if a.get("mask") is not None:
        raise Unsupported("an encoder layer with a mask")
    src = a["src"]
    shape = c.shape(src)
    if len(shape) != 3:
        raise Unsupported("an encoder layer input of rank %d" % len(shape))
    batch, time, width = shape
    heads = a["num_heads"]
    head = width // heads
    dtype = c.dtype(src)
    eps = float(a["eps"])

    def norm(x, weight, bias):
        return c.emit("layer_norm", [x, c.tensor(a[weight]), c.tensor(a[bias])], {"eps": eps})

    def attention(x):
        qkv = c.emit("linear", [x, c.tensor(a["qkv_weight"]), c.tensor(a["qkv_bias"])])
        parts = []
        for index in range(3):
            part = c.emit("slice", [qkv], {"dim": 2, "start": index * width,
                                           "end": (index + 1) * width})
            part = c.emit("reshape", [part], {"shape": [batch, time, heads, head]})
            parts.append(c.emit("transpose", [part], {"dim0": 1, "dim1": 2}))
        q, k, v = parts
        keys = c.emit("transpose", [k], {"dim0": -2, "dim1": -1})
        scores = c.emit("mul", [c.emit("matmul", [q, keys]), c.scalar(1 / math.sqrt(head), dtype)])
        mixed = c.emit("matmul", [c.emit("softmax", [scores], {"dim": -1}), v])
        merged = c.emit("reshape", [c.emit("transpose", [mixed], {"dim0": 1, "dim1": 2})],
                        {"shape": [batch, time, width]})
        return c.emit("linear", [merged, c.tensor(a["proj_weight"]), c.tensor(a["proj_bias"])])

    def feed_forward(x):
        hidden = c.emit("linear", [x, c.tensor(a["ffn_weight_1"]), c.tensor(a["ffn_bias_1"])])
        hidden = _exact_gelu(c, hidden, dtype) if a["use_gelu"] else c.emit("relu", [hidden])
        return c.emit("linear", [hidden, c.tensor(a["ffn_weight_2"]), c.tensor(a["ffn_bias_2"])])

    x = c.tensor(src)
    if a["norm_first"]:
        x = c.emit("add", [x, attention(norm(x, "norm_weight_1", "norm_bias_1"))])
        return c.emit("add", [x, feed_forward(norm(x, "norm_weight_2", "norm_bias_2"))])
    x = norm(c.emit("add", [x, attention(x)]), "norm_weight_1", "norm_bias_1")
    return norm(c.emit("add", [x, feed_forward(x)]), "norm_weight_2", "norm_bias_2")


def _heads(c, x, shape, heads):
    """[B, T, E] -> [B, heads, T, E / heads]."""
    batch, time, width = shape
    split = c.emit("reshape", [x], {"shape": [batch, time, heads, width // heads]})
    return c.emit("transpose", [split], {"dim0": 1, "dim1": 2})


def _multi_head_attention(c, a):
    """nn.MultiheadAttention's fast path (batch first, no mask): the three
    projections (rows of in_proj_weight), softmax(q k^T / sqrt(d)) v per head,
    the output projection; the attention weights too where they are read
    (averaged over the heads unless average_attn_weights is False)."""
    if a.get("mask") is not None:
        raise Unsupported("a fused multi-head attention with a mask")
    query, key, value = a["query"], a["key"], a["value"]
    shapes = [c.shape(x) for x in (query, key, value)]
    if any(len(shape) != 3 for shape in shapes):
        raise Unsupported("a fused multi-head attention over inputs of rank other than 3")
    width, heads = a["embed_dim"], a["num_head"]
    if width % heads or shapes[0][2] != width:
        raise Unsupported("a fused multi-head attention whose width does not split in heads")
    dtype = c.dtype(query)
    weight, bias = c.tensor(a["qkv_weight"]), c.tensor(a["qkv_bias"])
    projected = []
    for index, (x, shape) in enumerate(zip((query, key, value), shapes)):
        rows = {"dim": 0, "start": index * width, "end": (index + 1) * width}
        part = c.emit("linear", [c.tensor(x), c.emit("slice", [weight], rows),
                                 c.emit("slice", [bias], rows)])
        projected.append(_heads(c, part, shape, heads))
    q, k, v = projected
    keys = c.emit("transpose", [k], {"dim0": -2, "dim1": -1})
    scores = c.emit("mul", [c.emit("matmul", [q, keys]),
                            c.scalar(1 / math.sqrt(width // heads), dtype)])
    weights = c.emit("softmax", [scores], {"dim": -1})
    mixed = c.emit("transpose", [c.emit("matmul", [weights, v])], {"dim0": 1, "dim1": 2})
    merged = c.emit("reshape", [mixed], {"shape": [shapes[0][0], shapes[0][1], width]})
    out = c.emit("linear", [merged, c.tensor(a["proj_weight"]), c.tensor(a["proj_bias"])])
    if not a.get("need_weights", True):
        return out, None  # PyTorch's second result is then empty; reading it stays in PyTorch
    if a.get("average_attn_weights", True):
        weights = c.emit("mean", [weights], {"dims": [1], "keepdim": 0})
    return out, weights


CONVERTERS["aten._transformer_encoder_layer_fwd"] = _encoder_layer
CONVERTERS["aten._native_multi_head_attention"] = _multi_head_attention
