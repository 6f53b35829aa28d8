"""Inputs of a backward graph that are views of the forward's parameters,
bound in place (Note [Saved parameters], training_steps.py): a contiguous one
as it is, a permuted one (the transpose of a weight AOTAutograd saves) as its
contiguous base, the permutation written into the graph after its placeholder.
"""

import copy

import torch


def permuted_base(value):
    """(base, order) with `base` contiguous over value's memory and
    value == base.permute(order) (order None where value is contiguous), or
    None where no permutation of value is contiguous."""
    if value.is_contiguous():
        return value, None
    dims = list(range(value.dim()))
    by_stride = sorted(dims, key=lambda dim: (-value.stride(dim), -value.size(dim)))
    base = value.permute(by_stride)
    if not base.is_contiguous():
        return None
    order = [0] * len(dims)
    for position, dim in enumerate(by_stride):
        order[dim] = position
    return base, order


def bound_as_bases(graph_module, example_inputs, positions):
    """(graph module, example inputs, positions bound): the inputs at
    `positions` that permuted_base can express become their contiguous bases
    (each followed in a copy of the graph by aten.permute back to the view);
    the others are left out of the positions."""
    example_inputs = list(example_inputs)
    rewrites, bound = [], []
    for position in sorted(positions):
        found = permuted_base(example_inputs[position])
        if found is None:
            continue
        base, order = found
        bound.append(position)
        if order is not None:
            example_inputs[position] = base
            rewrites.append((position, order))
    if not rewrites:
        return graph_module, example_inputs, bound
    graph = copy.deepcopy(graph_module.graph)
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    for position, order in rewrites:
        placeholder = placeholders[position]
        with graph.inserting_after(placeholders[-1]):  # the placeholders stay first
            view = graph.call_function(torch.ops.aten.permute.default, (placeholder, order))
        placeholder.replace_all_uses_with(view, delete_user_cb=lambda user: user is not view)
        placeholder.meta[BASE_ORDER] = sorted(range(len(order)), key=order.__getitem__)
    return torch.fx.GraphModule(graph_module, graph), example_inputs, bound


# Note [Static inputs in a permuted layout]: grove binds a static input (a
# parameter, buffer or marked cache) by address and needs it contiguous. A
# model moved to channels_last (model.to(memory_format=torch.channels_last),
# the usual way to run convolutions fast) has every 4-d weight in a permuted
# layout: its inference and training graphs failed to compile ("bound params
# and buffers must be contiguous"). Every graph's static inputs now go through
# bound_as_bases, as the backward's saved transposes do: a contiguous one is
# bound as it is, a permuted one as its contiguous base with the permutation
# written after its placeholder, and one no permutation makes contiguous (a
# strided slice) is passed per call, copied by the graph tree. Tests:
# ParameterViewsTest (tests/python/handout_test.py), gpu_torch_backend_test's
# channels_last model.
#
# Note [Bound bases read as bases]: the caller still passes the view (AOTAutograd
# calls the backward with the saved transpose); grove's segments read the bound
# base at its address and never look at the argument, but a step that reads
# the placeholder's value in Python (a PyTorch step, verify mode's reference
# run) must get the base the graph now expects: the runner permutes the
# argument by the placeholder's BASE_ORDER first. Verify mode on any trained
# Linear raised a shape error in its reference run before. Test:
# HandoutTest.test_verify_mode_reads_a_bound_base_as_the_base
# (tests/python/handout_test.py).
BASE_ORDER = "grove_base_order"


def as_base(placeholder, value):
    """The argument `value` as the base its placeholder takes (Note [Bound
    bases read as bases])."""
    order = placeholder.meta.get(BASE_ORDER)
    return value if order is None else value.permute(order)
