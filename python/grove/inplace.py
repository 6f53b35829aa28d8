"""In-place ATen ops on intermediates, imported as their functional forms
(Note [In-place ops on intermediates])."""

import torch
import torch.fx

from grove.fx_common import op_name

# Note [In-place ops on intermediates]: make_fx (without functionalization)
# records `y = aten.relu_(x)` with later reads of the mutated tensor naming
# either `y` or `x`. Where x is an intermediate that nothing else aliases, the
# importer rewires every read of x after the in-place node to read y instead
# and converts the node with its functional op's converter (aten.relu_ as
# aten.relu), so later users see the new value and no memory is written in
# place. An in-place op whose target is a graph input or parameter, or a view
# or aliased tensor (a write other nodes would see through their own storage),
# is left as it is: it runs in PyTorch (issue 33 part 2). Guarded by
# InPlaceTest (tests/python/importer_ops_test.py).


def mutates_first_argument(node):
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    arguments = target._schema.arguments
    if not arguments or not op_name(target).endswith("_"):
        return False
    alias = arguments[0].alias_info
    return alias is not None and alias.is_write


def _storage_key(value):
    if not isinstance(value, torch.Tensor):
        return None
    storage = value.untyped_storage() if hasattr(value, "untyped_storage") else value.storage()
    return (value.device, storage.data_ptr())


def functionalize_inplace(graph, values, converters):
    """Rewires reads after each safe in-place node (Note [In-place ops on
    intermediates]); returns the set of nodes to convert functionally.
    `values`: each node's recorded value, a mutated argument's taken before
    the mutation (the importer's recorder snapshots it)."""
    nodes = list(graph.nodes)
    order = {node: i for i, node in enumerate(nodes)}
    sharers = {}  # storage key -> nodes whose value lives there, in graph order
    for node in nodes:
        key = _storage_key(values.get(node))
        if key is not None:
            sharers.setdefault(key, []).append(node)
    versions = {}  # storage key -> the nodes that are versions of one mutated tensor
    approved = set()
    for node in nodes:
        if not mutates_first_argument(node) or op_name(node.target)[:-1] not in converters:
            continue
        target = node.args[0]
        if not isinstance(target, torch.fx.Node) or target.op != "call_function":
            continue
        key = _storage_key(values.get(node))
        if key is None:
            continue
        chain = versions.setdefault(key, {target})
        if target not in chain:
            continue
        aliased = [other for other in sharers.get(key, [])
                   if order[other] < order[node] and other not in chain]
        if aliased:
            continue  # a view or an input would see the write
        chain.add(node)
        approved.add(node)
        for user in list(target.users):
            if user is not node and order[user] > order[node]:
                user.replace_input_with(target, node)
    return approved
