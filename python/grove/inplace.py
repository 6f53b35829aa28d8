"""In-place ATen ops on intermediates, imported as their functional forms
(Note [In-place ops on intermediates])."""

import torch
import torch.fx

from grove.fx_common import op_name, untyped_storage

# Note [In-place ops on intermediates]: make_fx (without functionalization)
# records `y = aten.relu_(x)` with later reads of the mutated tensor naming
# either `y` or `x`. Where x is an intermediate that nothing else aliases, the
# importer rewires every read of x after the in-place node to read y instead
# and converts the node with its functional op's converter (aten.relu_ as
# aten.relu), so later users see the new value and no memory is written in
# place; writes through views of the whole tensor (x[:, :, i] = v) count as
# writes of x. An in-place op whose target is a graph input or parameter (but
# for the functionalized write-backs of Note [Writes into graph inputs]), or a
# view or aliased tensor (a write other nodes would see through their own
# storage), runs in PyTorch, and so does every node whose
# value lives in the storage it writes: a grove segment's output is not the
# caller's storage, so a write into it would not reach the values made from
# it. The recorder keeps each value's copy from before a write, for constant
# folding. Guarded by InPlaceTest (tests/python/importer_ops_test.py).


def mutates_first_argument(node):
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    arguments = target._schema.arguments
    if not arguments or not op_name(target).endswith("_"):
        return False
    alias = arguments[0].alias_info
    return alias is not None and alias.is_write


def storage_key(value):
    """What identifies a tensor's storage; None for non-tensors and empty
    storage (whose addresses are all 0)."""
    if not isinstance(value, torch.Tensor):
        return None
    storage = untyped_storage(value)
    if storage.data_ptr() == 0:
        return None
    return (value.device, storage.data_ptr())


def _whole_view(node, values):
    """Whether `node` is a view of all of its first argument (a full slice, an alias)."""
    if node.op != "call_function" or not isinstance(node.args[0], torch.fx.Node):
        return False
    name = op_name(node.target)
    value, base = values.get(node), values.get(node.args[0])
    if not isinstance(value, torch.Tensor) or not isinstance(base, torch.Tensor):
        return False
    if name == "aten.alias":
        return True
    if name != "aten.slice" or value.shape != base.shape:
        return False
    step = node.args[4] if len(node.args) > 4 else node.kwargs.get("step", 1)
    return step in (None, 1)


# Note [Aliases nobody reads after the write]: an in-place op on a view of an
# intermediate (Falcon's mlp_output += attention_output, where mlp_output is
# the _unsafe_view of its mm) writes storage the base shares. The write stays
# out of PyTorch when every such alias is an intermediate that nothing reads
# after the write (the mm, read only by its view before it): nothing can see
# the difference between writing in place and the functional op. An input, a
# parameter or any alias read later (the graph's output included) still
# sends the write to PyTorch. Test: InPlaceTest.test_a_write_through_a_view_
# nobody else reads_stays_in_grove (tests/python/importer_ops_test.py).
def _sees_the_write(other, node, order):
    """Whether alias `other` of the storage `node` writes can observe it."""
    if other.op != "call_function":
        return True  # the caller's input or parameter
    return any(order[user] > order[node] for user in other.users)


def functionalize_inplace(graph, values, converters, write_backs=()):
    """Rewires reads after each safe in-place node (Note [In-place ops on
    intermediates]). Returns (the nodes to convert functionally, the nodes
    that must run in PyTorch: every value in a storage that an in-place op
    left to PyTorch writes, so that its readers see the write). `values`: each
    node's recorded value (tensors that share storage are aliases).
    `write_backs`: the writes into graph inputs the importer converts itself
    (Note [Writes into graph inputs], input_writes.py)."""
    nodes = list(graph.nodes)
    order = {node: i for i, node in enumerate(nodes)}
    sharers = {}  # storage key -> nodes whose value lives there, in graph order
    for node in nodes:
        key = storage_key(values.get(node))
        if key is not None:
            sharers.setdefault(key, []).append(node)
    versions = {}  # storage key -> the nodes that are versions of one mutated tensor
    safe = []  # (node, its target, the whole views it writes through)
    written_in_torch = set()
    for node in nodes:
        if not mutates_first_argument(node) or node in write_backs:
            continue
        key = storage_key(values.get(node))
        decision = _safe_target(node, values, converters)
        if decision is not None and key is not None:
            target, views = decision
            chain = versions.setdefault(key, {target})
            aliased = [other for other in sharers.get(key, [])
                       if order[other] < order[node] and other not in chain
                       and other not in views and _sees_the_write(other, node, order)]
            if target in chain and not aliased:
                chain.add(node)
                safe.append((node, target, views))
                continue
        if key is not None:
            written_in_torch.add(key)
    approved = set()
    for node, target, views in safe:
        if storage_key(values.get(node)) in written_in_torch:
            continue
        approved.add(node)
        if views:
            node.replace_input_with(views[0], target)  # the write's result is all of it
        for user in list(target.users):
            if user is not node and order[user] > order[node]:
                user.replace_input_with(target, node)
    in_torch = {node for key in written_in_torch for node in sharers.get(key, [])
                if node.op == "call_function"}
    # Note [Elements of a result PyTorch writes]: an element of a multi-result
    # op (getitem of a batch norm's tuple) runs in PyTorch when an in-place op
    # there writes it, and reads the whole tuple, which no grove segment hands
    # out (segments output tensors): so the op that makes the tuple runs in
    # PyTorch too. Test: InPlaceTest.test_an_element_of_a_tuple_written_in_
    # pytorch_runs_with_its_op (tests/python/importer_ops_test.py).
    for node in list(in_torch):
        if op_name(node.target) == "getitem" and isinstance(node.args[0], torch.fx.Node) and \
                isinstance(values.get(node.args[0]), (tuple, list)) and \
                node.args[0].op == "call_function":
            in_torch.add(node.args[0])
    return approved, in_torch


def _safe_target(node, values, converters):
    """(the intermediate an in-place node writes, the whole views it writes
    through), or None where the write must stay in PyTorch."""
    if op_name(node.target)[:-1] not in converters:
        return None
    target = node.args[0]
    if not isinstance(target, torch.fx.Node) or target.op != "call_function":
        return None
    views = []
    while _whole_view(target, values):
        views.append(target)  # x[:, :, i] = v writes through slices of all of x
        target = target.args[0]
    if target.op != "call_function":
        return None
    return target, views
