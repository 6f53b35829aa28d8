"""The converter of PyTorch's fused nn.TransformerEncoderLayer inference op
(aten._transformer_encoder_layer_fwd), written out in grove ops. Importing
this module adds it to aten_ops.CONVERTERS."""

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


CONVERTERS["aten._transformer_encoder_layer_fwd"] = _encoder_layer
