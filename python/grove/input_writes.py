"""Writes into a graph's inputs (issue 33 part 2): the graph is traced
functionalized, and each mutated input's new value is written back into it
inside the grove program (Note [Writes into graph inputs])."""

import logging

import torch
import torch.fx

from grove.fx_common import draws_random_numbers, op_name
from grove.inplace import mutates_first_argument

# Note [Writes into graph inputs]: a graph that updates its inputs in place (a
# KV cache's index_copy_, a position counter's add_, batch norm's running
# stats) is traced again through functionalization, which computes every
# update out of place and ends the graph with `aten.copy_(input, new_value)`
# per mutated input (what AOTAutograd and dynamo 2.x emit). The importer turns
# each such write-back into grove's `copy_into` inside the segment that
# computes the value, emitted where the graph has it, after every read of the
# input (functionalization puts the write-backs last; a write-back some later
# node reads through the input is left to PyTorch):
#   - a static input (a parameter, a buffer, a `mark_static_address` tensor:
#     bound as a param) is written in place by the program itself, so a CUDA
#     graph replays the update with no copy and no split (the tree's mutation
#     type (b));
#   - any other input is written in the program's input, which the graph
#     tree copies back into the caller's tensor after each replay (type (d),
#     Note [Copy-back of mutated inputs]); such an input must be contiguous
#     (a strided input runs on a copy, Note [Strided inputs]), else the write
#     stays in PyTorch.
# Outputs that are tensors the graph wrote in place (a cache created and
# filled inside the compiled region, a counter moved to the device and
# advanced) are state the caller keeps across calls: they are copied out of
# the tree's pool (Note [State outputs leave the pool]).
# A new value that reads the input at other positions (a flip, a shift) must
# be complete before the write lands: InputWritesTest.
# test_a_new_value_read_from_other_positions_of_the_input guards it on sim,
# which runs a kernel's elements in order. Tests: InputWritesTest
# (tests/python/input_writes_test.py), GpuInputWritesTest on a GPU host.

# Ops whose result may share its argument's memory.
VIEW_OPS = {"aten.view", "aten._unsafe_view", "aten.reshape", "aten.slice", "aten.select",
            "aten.expand", "aten.transpose", "aten.permute", "aten.t", "aten.unsqueeze",
            "aten.squeeze", "aten.alias", "aten.as_strided", "aten.narrow", "aten.diagonal",
            "aten.unflatten", "aten.flatten", "aten.view_as", "aten.unbind", "aten.split",
            "aten.chunk", "aten.detach", "aten._reshape_alias", "getitem"}


def _state_source(node):
    return isinstance(node, torch.fx.Node) and node.op in ("placeholder", "get_attr")


def write_backs(graph):
    """The `aten.copy_` nodes that write a whole graph input (a placeholder
    or a get_attr tensor) and after which nothing reads that input."""
    nodes = list(graph.nodes)
    order = {node: i for i, node in enumerate(nodes)}
    found = set()
    for node in nodes:
        if node.op != "call_function" or op_name(node.target) != "aten.copy_":
            continue
        destination = node.args[0]
        if not _state_source(destination):
            continue
        if node.users or any(order[user] > order[node] for user in destination.users
                             if user is not node):
            continue
        found.add(node)
    return found


_UNANNOTATED_BATCH_NORMS = ("aten.native_batch_norm", "aten.cudnn_batch_norm")


def running_statistics_written(node):
    """Batch norm's running statistics when a training-mode
    native_batch_norm or cudnn_batch_norm updates them: their schemas do not
    mark them written (_native_batch_norm_legit's does, and functionalizes)."""
    if node.op != "call_function" or op_name(node.target) not in _UNANNOTATED_BATCH_NORMS:
        return []
    training = node.args[5] if len(node.args) > 5 else node.kwargs.get("training")
    if not training:
        return []
    return [value for value in node.args[3:5] if isinstance(value, torch.fx.Node)]


def written_arguments(node):
    """The tensor arguments an ATen op writes, by its schema (batch norm's
    running statistics as well as an in-place op's self)."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return []
    if op_name(target) in _UNANNOTATED_BATCH_NORMS:
        return running_statistics_written(node)
    written = []
    for index, argument in enumerate(target._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = node.args[index] if index < len(node.args) else node.kwargs.get(argument.name)
        if isinstance(value, torch.fx.Node):
            written.append(value)
    return written


def _written_bases(graph):
    """Every node whose tensor an op of `graph` writes in place: an in-place
    op's result and the chain of views and earlier writes under each
    argument it writes."""
    written = set()
    for node in graph.nodes:
        arguments = written_arguments(node)
        if not arguments:
            continue
        if mutates_first_argument(node):
            written.add(node)
        for base in arguments:
            _add_chain(written, base)
    return written


def _add_chain(written, base):
    """Adds `base` and what it views or updates, down to the tensor it lives in."""
    while isinstance(base, torch.fx.Node):
        written.add(base)
        if base.op != "call_function" or not base.args or not (
                op_name(base.target) in VIEW_OPS or mutates_first_argument(base)):
            return
        base = base.args[0]


def view_base(base):
    """The tensor `base` views or updates, through chains of views and writes."""
    while isinstance(base, torch.fx.Node) and base.op == "call_function" and \
            (op_name(base.target) in VIEW_OPS or mutates_first_argument(base)) and base.args:
        base = base.args[0]
    return base


def mutated_placeholders(graph):
    """The placeholders an in-place op of `graph` writes, through views."""
    mutated = set()
    for node in graph.nodes:
        for base in written_arguments(node):
            base = view_base(base)
            if isinstance(base, torch.fx.Node) and base.op == "placeholder":
                mutated.add(base)
    return mutated


def _flat_outputs(graph):
    output = next(node for node in graph.nodes if node.op == "output")
    flat = []
    torch.fx.node.map_arg(output.args[0], flat.append)
    return output, flat


def state_output_positions(graph):
    """Positions, among the graph's flattened output nodes, of the values
    an in-place op writes that are not inputs (Note [Writes into graph
    inputs]): state the caller keeps, such as a cache made inside the graph."""
    written = _written_bases(graph)
    _, flat = _flat_outputs(graph)
    # An input updated in place and returned is the input itself (Note
    # [Outputs that alias inputs], input_aliases.py), not state of the graph's.
    return {position for position, node in enumerate(flat)
            if node in written and node.op == "call_function"
            and view_base(node).op != "placeholder"}


def output_nodes_at(graph, positions):
    _, flat = _flat_outputs(graph)
    return {flat[position] for position in positions if position < len(flat)}


def mutates_an_input(graph):
    """Whether an in-place op of `graph` writes a placeholder, through views."""
    for node in _written_bases(graph):
        if node.op == "placeholder":
            return True
    return False


def writes_through_views(graph):
    """Whether an in-place op of `graph` writes through a view (Note [Writes
    through views are functionalized])."""
    return any(mutates_first_argument(node) and isinstance(node.args[0], torch.fx.Node)
               and node.args[0].op == "call_function"
               and op_name(node.args[0].target) in VIEW_OPS
               for node in graph.nodes)


def _functionalize():
    try:
        from torch.func import functionalize  # PyTorch 2.x
    except ImportError:
        try:
            from functorch.experimental import functionalize  # PyTorch 1.13
        except ImportError:
            return None
    return functionalize


def trace_clones(example_inputs):
    """What make_fx runs a graph on: tracing executes it, so every tensor
    that is not a parameter is a clone (the caller's state must not advance)."""
    return [value.detach().clone() if isinstance(value, torch.Tensor) and
            not isinstance(value, torch.nn.Parameter) else value for value in example_inputs]


# Note [Writes through views are functionalized]: an in-place op on a view
# of an intermediate that is not all of it (Swin V2's
# qkv_bias[n:2n].zero_() on a clone of a parameter, DeepSeek-V3's query
# assembled by copy_ into two slices of a new_empty) is a write grove's values
# cannot make in place (Note [In-place ops on intermediates] takes writes of
# whole tensors only). Such a graph is traced functionalized, like one that
# writes its inputs: the write becomes the functional op on the view and a
# slice_scatter / select_scatter (or as_strided_scatter) of the base, which
# grove converts. Guarded by InputWritesTest.test_writes_through_partial_views_
# of_intermediates_are_functionalized (tests/python/input_writes_test.py).
def aten_graph(function, example_inputs):
    """(the ATen graph of `function`, the flattened output positions that
    are state). A graph that writes its inputs, or writes through a view, is
    traced functionalized, so its writes end it as write-backs or become
    scatters; where functionalization is missing or fails the plain trace is
    kept (those in-place ops run in PyTorch)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    # Tracing runs the graph: PyTorch's random state is left as it was
    # (Note [The import run leaves the inputs alone], importer.py).
    with random_state_kept(example_inputs), torch.no_grad():
        plain = make_fx(function)(*trace_clones(example_inputs))
    states = state_output_positions(plain.graph)
    if not mutates_an_input(plain.graph) and not writes_through_views(plain.graph):
        return plain, states
    functionalize = _functionalize()
    if functionalize is None:
        return plain, states
    try:
        with random_state_kept(example_inputs), torch.no_grad():
            functional = make_fx(functionalize(function))(*trace_clones(example_inputs))
    except Exception as error:  # an op functionalization cannot take
        logging.getLogger("grove").info("functionalization failed (%s); in-place writes of "
                                        "inputs run in PyTorch", error)
        return plain, states
    if not _draws_alike(plain, functional, example_inputs):
        logging.getLogger("grove").info("functionalization changed the numbers a random draw "
                                        "draws; in-place writes of inputs run in PyTorch")
        return plain, states
    return functional, states


def random_state_kept(example_inputs):
    """A context that leaves PyTorch's random state (the CPU generator and
    those of the inputs' CUDA devices) as it found it."""
    devices = sorted({value.device.index or 0 for value in example_inputs
                      if isinstance(value, torch.Tensor) and value.is_cuda})
    return torch.random.fork_rng(devices=devices)


# Note [Functionalized draws checked against the plain trace]
# Functionalization may rewrite a random draw's operand: PyTorch 2.11 traces
# dropout on the CPU, eager's bernoulli_ of empty_like(x), as bernoulli.p of
# an empty 0-d tensor expanded to x's shape, which draws other numbers under
# the same seed (the door fuzzer's seeds 40145 and 44656 on the GPU host's
# sim path: dropout masks 1.3 off, the traced graph itself differing from
# eager; PyTorch 1.13 keeps a dense empty_like and draws alike). So a graph
# with random draws that needed functionalization runs both traces once,
# each from the same random state on clones of the inputs, and keeps the
# functional one only where their outputs and written inputs agree; else the
# plain trace stays, its in-place writes run in PyTorch (exact, split).
# Test: InputWritesTest.test_a_functional_trace_that_draws_otherwise_is_not_used.
def _draws_alike(plain, functional, example_inputs):
    if not any(draws_random_numbers(node) for node in functional.graph.nodes):
        return True
    # Only the inputs the graph writes are copied for the two runs (a model's
    # weights stay shared: a decode step with its sampling draw and cache
    # writes would otherwise copy every weight twice).
    written = mutated_placeholders(plain.graph)
    positions = {index for index, node in enumerate(
        node for node in plain.graph.nodes if node.op == "placeholder") if node in written}
    runs = []
    for graph in (plain, functional):
        inputs = [value.detach().clone() if index in positions and isinstance(value, torch.Tensor)
                  else value for index, value in enumerate(example_inputs)]
        with random_state_kept(example_inputs), torch.no_grad():
            outputs = graph(*inputs)
        runs.append(_tensors(outputs) + [inputs[index] for index in sorted(positions)])
    return len(runs[0]) == len(runs[1]) and all(
        _alike(a, b) for a, b in zip(*runs))


def _tensors(values):
    values = values if isinstance(values, (tuple, list)) else [values]
    return [value for value in values if isinstance(value, torch.Tensor)]


def _alike(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not (a.is_floating_point() or a.is_complex()):
        return torch.equal(a, b)
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
