"""scaled_dot_product_attention kept whole through the door's ATen trace.

Note [Attention kept whole through tracing]: make_fx traces below
scaled_dot_product_attention, so the ATen graph holds whichever kernel
PyTorch picked for the example inputs: a fused one (flash, efficient, cudnn:
the importer makes grove's `attention` of it), or, where none takes the call
(grouped-query keys, some masks, f32 with flash only), the math path written
out as matmuls, masks and a softmax, where grove's fused attention never
applies. So before tracing an inference graph the door replaces each
dropout-free scaled_dot_product_attention call of dynamo's torch-level graph
by this module's op, grove::grove_scaled_dot_product_attention: one ATen-level
node whatever PyTorch would pick, computed by PyTorch's own
scaled_dot_product_attention wherever it runs in PyTorch, converted like
PyTorch's attention ops by the importer (Note [Fused attention in the
importer]). Tests: importer_ops_test's AttentionTest (the op traced and
imported whole), gpu_zoo_test (HF models through the door)."""

import torch

OP_NAME = "grove_scaled_dot_product_attention"
_SCHEMA = ("(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, "
           "bool is_causal=False, float? scale=None, bool enable_gqa=False) -> Tensor")
_library = None


def _pytorch_attention(query, key, value, attn_mask=None, is_causal=False, scale=None,
                       enable_gqa=False):
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if sdpa is None:  # PyTorch 1.13: no scale, no grouped-query keys
        if scale is not None or enable_gqa:
            raise ValueError("grove: this PyTorch's attention takes no scale or enable_gqa")
        return torch.ops.aten._scaled_dot_product_attention(query, key, value, attn_mask, 0.0,
                                                            False, is_causal)[0]
    options = {"enable_gqa": True} if enable_gqa else {}
    return sdpa(query, key, value, attn_mask=attn_mask, dropout_p=0.0, is_causal=is_causal,
                scale=scale, **options)


def registered():
    """Defines the op once per process; False where this PyTorch has no
    torch.library to define it with."""
    global _library
    if _library is None:
        library = getattr(torch, "library", None)
        if library is None or not hasattr(library, "Library"):
            return False
        defined = library.Library("grove", "DEF")
        defined.define(OP_NAME + _SCHEMA)
        defined.impl(OP_NAME, _pytorch_attention, "CompositeExplicitAutograd")
        _library = defined
    return True


def kept_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                   enable_gqa=False):
    """scaled_dot_product_attention's signature, calling grove's op (dropout
    stays with PyTorch's function)."""
    if dropout_p:
        options = {"enable_gqa": True} if enable_gqa else {}
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **options)
    op = getattr(torch.ops.grove, OP_NAME)
    return op(query, key, value, attn_mask, bool(is_causal), scale, bool(enable_gqa))


def keep_attention(graph_module):
    """Points each scaled_dot_product_attention call of a torch-level fx graph
    (dynamo's) without dropout at kept_attention; returns how many."""
    from grove.training_steps import _attention_targets

    targets = _attention_targets()
    graph = getattr(graph_module, "graph", None)  # a plain function has no graph to edit
    if graph is None or not targets or not registered():
        return 0
    kept = 0
    for node in graph.nodes:
        if node.op != "call_function" or node.target not in targets:
            continue
        dropout = node.args[4] if len(node.args) > 4 else node.kwargs.get("dropout_p", 0.0)
        if not isinstance(dropout, (int, float)) or dropout:
            continue
        node.target = kept_attention
        kept += 1
    if kept:
        graph_module.recompile()
    return kept
