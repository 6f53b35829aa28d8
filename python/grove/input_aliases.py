"""Graph outputs that are the caller's input tensors, or views of them
(Note [Outputs that alias inputs])."""

import torch
import torch.fx

from grove.fx_common import op_name
from grove.inplace import mutates_first_argument
from grove.input_writes import VIEW_OPS

# Note [Outputs that alias inputs]
# In PyTorch a function that returns its input, or a view of it (x[1:],
# x.t(), x after x.add_(y)), returns memory the caller's tensor shares:
# writing the returned tensor writes the input, and `out is x` where the
# input itself comes back. grove computed such an output as a value of its
# own, equal at the call but unaliased, so a caller who wrote through it
# changed nothing in the input: silently other state than eager PyTorch's (a
# new user's probe on an H200, 2.45 off after a fill_ through x[1:]). An output
# reached from a placeholder through view ops and in-place ops only (the plain
# trace), or through view ops from a value the graph writes back into a
# placeholder (the functionalized trace's copy_ at its end), is now made after
# the call by replaying those view ops on the caller's tensor, once its
# write-back has landed; a graph with such outputs takes the runner's general
# path. Only the inference door's graphs (dynamo's, compile_graph's) are
# treated so: AOTAutograd regenerates the aliases of its graphs' outputs
# itself, and a training forward's saved views of parameters (a weight's
# transpose) stay values of grove's own (Note [Saved parameters]). Tests:
# InputAliasesTest
# (tests/python/input_writes_test.py).


def aliased_outputs(graph):
    """[(index in the graph's top-level outputs, placeholder position, view
    nodes from the input to the output)] for outputs that alias an input."""
    output = next(node for node in graph.nodes if node.op == "output")
    items = output.args[0]
    items = list(items) if isinstance(items, (tuple, list)) else [items]
    placeholders = {node: position for position, node in enumerate(
        node for node in graph.nodes if node.op == "placeholder")}
    written_back = _written_back(graph)
    found = []
    for index, item in enumerate(items):
        if not isinstance(item, torch.fx.Node) or item.op == "placeholder":
            continue  # passed through as the argument itself already
        chain, base = _view_chain(item)
        base = written_back.get(base, base)
        if base in placeholders and (chain or item is not base):
            found.append((index, placeholders[base], chain))
    return found


def _written_back(graph):
    """{value node: placeholder} for each write-back copy_(placeholder, value)."""
    found = {}
    for node in graph.nodes:
        if node.op == "call_function" and op_name(node.target) == "aten.copy_" and \
                isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "placeholder" \
                and isinstance(node.args[1], torch.fx.Node):
            found[node.args[1]] = node.args[0]
    return found


def _view_chain(node):
    """(the view nodes from the base up to `node`, the base): walks down view
    ops and in-place ops (whose result is their first argument)."""
    chain = []
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.args:
        if op_name(node.target) in VIEW_OPS:
            chain.append(node)
        elif not mutates_first_argument(node):
            break
        node = node.args[0]
    chain.reverse()
    return chain, node


def replay(chain, tensor, read):
    """The views of `chain` applied to `tensor`; `read(node)` gives the value
    of any other node a view op takes."""
    value = tensor
    for node in chain:
        rest = torch.fx.node.map_arg(node.args[1:], read)
        kwargs = torch.fx.node.map_arg(node.kwargs, read)
        value = node.target(value, *rest, **kwargs)
    return value
