"""Random draws moved to the start of a graph, so that the rest of it is one
grove program (Note [Random draws run first])."""

import operator
import os

import torch
import torch.fx

from grove import verify
from grove.fx_common import op_name

# Note [Random draws run first]
# grove draws no random numbers of its own in a graph: every draw (a dropout
# mask, timm's drop-path bernoulli, a noise tensor) runs in PyTorch, from
# PyTorch's generator, in the graph's order, so a training step draws what
# eager PyTorch draws under the same seed (Note [Random draws are never
# constants], importer.py). Each draw in the middle of a graph split it: a
# model with dropout after every attention and MLP block (HF BERT, GPT-2,
# RoBERTa, T5 at their default configs) trained as dozens of graph replays a
# step with PyTorch kernels between them. Most draws read no value the graph
# computes, only a shape: a draw whose inputs are all free of the graph's
# inputs (torch.rand(shape), bernoulli_ of a new empty tensor) moves, with
# what it reads, before the graph's first computation. A training dropout,
# native_dropout(x, p, True), reads x, but on CUDA and on the CPU its mask
# depends only on x's shape when x is contiguous and its first element
# 16-byte aligned (the fused kernel's vectorized path, which an aligned new
# tensor takes too), and the mapping of random numbers to elements depends on
# the dtype: it becomes native_dropout(ones(shape, x's dtype), p, True), moved
# to the start, and where it stood x times the draw's first result (float32:
# the kernel's own scale where the mask keeps), or for a half-precision x (on
# CUDA only) x in float32 times the mask times the kernel's float32 scale,
# rounded to x's dtype, as the kernel computes. The draws keep
# their order among themselves: the first draw that cannot move stops the
# moving (a later draw stays after it). GROVE_DRAWS_FIRST=0 (read at import)
# leaves every draw where it is. Tests: RandomDrawsTest
# (tests/python/random_draws_test.py: a graph of two dropouts and a drop-path
# draw imports as one grove program after the draws, every call equal to eager
# under the same seed); on the GPU, GpuRandomDrawsTest
# (tests/python/gpu_random_draws_test.py: every float dtype, eager's F.dropout
# and the door's training of a block with dropout).


def enabled():
    return os.environ.get("GROVE_DRAWS_FIRST", "1") != "0"


ALIGNMENT_BYTES = 16


def _dropout_operands(node, values):
    """(x, p) of a training native_dropout this module can rewrite, or None."""
    if node.op != "call_function" or op_name(node.target) != "aten.native_dropout":
        return None
    args = list(node.args) + [None] * (3 - len(node.args))
    x, p, train = args[0], args[1], args[2]
    p = node.kwargs.get("p", p)
    train = node.kwargs.get("train", train)
    value = values.get(x)
    if train is not True or not isinstance(p, float) or not 0.0 < p < 1.0:
        return None
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or \
            value.numel() == 0 or not value.is_contiguous() or \
            (value.storage_offset() * value.element_size()) % ALIGNMENT_BYTES:
        return None
    if value.dtype != torch.float32 and not value.is_cuda:
        return None  # the CPU kernel rounds a half-precision product its own way
    if any(user.op != "call_function" or user.target is not operator.getitem
           for user in node.users):
        return None
    return x, p


# Ops that read only their first argument's shape, dtype and device: the
# tensor they make, of the shape the import run saw, is free of the graph's
# inputs (new_empty(x, shape).bernoulli_(p): timm's drop path; rand_like(x)).
_MADE_LIKE = {"aten.new_empty": torch.ops.aten.empty.memory_format,
              "aten.empty_like": torch.ops.aten.empty.memory_format,
              "aten.new_zeros": torch.ops.aten.zeros.default,
              "aten.zeros_like": torch.ops.aten.zeros.default,
              "aten.new_ones": torch.ops.aten.ones.default,
              "aten.ones_like": torch.ops.aten.ones.default,
              # Draws like their operand: the same numbers as a draw of its
              # shape where the operand is contiguous.
              "aten.rand_like": torch.ops.aten.rand.default,
              "aten.randn_like": torch.ops.aten.randn.default}


def _made_like(node, values):
    value = values.get(node)
    return node.op == "call_function" and op_name(node.target) in _MADE_LIKE and \
        isinstance(value, torch.Tensor) and value.is_contiguous()


def _free_of_inputs(graph, values):
    """Nodes whose value reads no placeholder and no attribute, transitively."""
    free = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if _made_like(node, values) or all(arg in free for arg in node.all_input_nodes):
            free.add(node)
    return free


def _made_afresh(graph, node, values):
    """A _MADE_LIKE node as the same tensor made from its shape alone."""
    value = values[node]
    with graph.inserting_before(node):
        made = graph.call_function(_MADE_LIKE[op_name(node.target)], (list(value.shape),),
                                   {"dtype": value.dtype, "device": value.device})
    node.replace_all_uses_with(made)
    values[made] = values.pop(node)
    graph.erase_node(node)
    return made


def kernel_scale(p):
    """The float32 scale CUDA's fused dropout kernel multiplies a kept element
    by: 1.0 / (1 - p) with the keep probability in float32, the quotient in
    float64, rounded to float32."""
    keep = torch.tensor(1.0 - p, dtype=torch.float32).item()
    return torch.tensor(1.0 / keep, dtype=torch.float32).item()


def _rewrite_dropout(graph, node, x, p, values):
    """native_dropout(x, p, True) as a draw on ones and x times its scale;
    returns the draw's nodes, to move (Note [Random draws run first])."""
    value = values[x]
    with graph.inserting_before(node):
        ones = graph.call_function(torch.ops.aten.ones.default, (list(value.shape),),
                                   {"dtype": value.dtype, "device": value.device})
        draw = graph.call_function(torch.ops.aten.native_dropout.default, (ones, p, True))
        scale = graph.call_function(operator.getitem, (draw, 0))
        mask = graph.call_function(operator.getitem, (draw, 1))
        if value.dtype == torch.float32:
            # The draw's first result is the kernel's own float32 scale where it keeps.
            result = graph.call_function(torch.ops.aten.mul.Tensor, (x, scale))
            computed = [result]
        else:
            # In half precision that result is the scale rounded: x in float32
            # times the mask times the kernel's float32 scale, then rounded.
            wide = graph.call_function(torch.ops.aten._to_copy.default, (x,),
                                       {"dtype": torch.float32})
            kept = graph.call_function(torch.ops.aten.mul.Tensor, (wide, mask))
            product = graph.call_function(torch.ops.aten.mul.Tensor,
                                          (kept, kernel_scale(p)))
            result = graph.call_function(torch.ops.aten._to_copy.default, (product,),
                                         {"dtype": value.dtype})
            computed = [wide, kept, product, result]
    # The import run's values (the draw's numbers do not matter: it runs at
    # every call), drawn without advancing PyTorch's generator.
    devices = [value.device.index or 0] if value.is_cuda else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        for made in [ones, draw, scale, mask] + computed:
            values[made] = verify.evaluate(made, values, dict.__getitem__)
    for user in list(node.users):
        replacement = result if user.args[1] == 0 else mask
        user.replace_all_uses_with(replacement)
        values.pop(user, None)
        graph.erase_node(user)
    values.pop(node, None)
    graph.erase_node(node)
    return [ones, draw, scale, mask]


def draws_first(graph, values, draws_random_numbers):
    """Moves the graph's random draws to its start, in their order, up to the
    first that cannot move (Note [Random draws run first]); `values` (the
    import run's, by node) gains the new nodes' values. Returns how many moved."""
    if not enabled():
        return 0
    draws = [node for node in graph.nodes if draws_random_numbers(node)]
    if not draws:
        return 0
    free = _free_of_inputs(graph, values)
    moved_nodes = set()
    moved = 0
    for draw in draws:
        if draw in free:
            if not _written_before_its_readers(draw):
                break
            chain = [node for node in graph.nodes
                     if node in free and node not in moved_nodes and _feeds(node, draw, free)]
        else:
            operands = _dropout_operands(draw, values)
            if operands is None:
                break
            chain = _rewrite_dropout(graph, draw, *operands, values)
        for node in chain:
            if _made_like(node, values):
                node = _made_afresh(graph, node, values)
            anchor = next(other for other in graph.nodes if other not in moved_nodes
                          and other.op not in ("placeholder", "get_attr"))
            if node is not anchor:
                anchor.prepend(node)
            moved_nodes.add(node)
        moved += 1
    return moved


def _written_before_its_readers(draw):
    """An in-place draw (bernoulli_ of a new tensor) moves only where nothing
    reads the tensor it writes before it does."""
    if not op_name(draw.target).endswith("_") or not draw.args or \
            not isinstance(draw.args[0], torch.fx.Node):
        return True
    order = {node: index for index, node in enumerate(draw.graph.nodes)}
    return all(order[user] >= order[draw] for user in draw.args[0].users)


def _feeds(node, target, free):
    """Whether `node` is `target` or one of its inputs, transitively, through
    free nodes (a made-like node's tensor argument is not read)."""
    pending, seen = [target], set()
    while pending:
        current = pending.pop()
        if current is node:
            return True
        if current in seen or current not in free:
            continue
        seen.add(current)
        pending.extend(current.all_input_nodes)
    return False
