"""A training graph of the torch door run as one autograd.Function of grove's
own (Note [The door's own autograd function]), instead of AOTAutograd's
runtime wrappers: the forward and backward graphs are AOTAutograd's (traced
as one joint graph, split by the same partition), grove compiles them as the
tree's forward and backward stages (training_steps.StepCompiler), and a call
is Function.apply, the forward graph, and in backward() the backward graph:
no Python per tensor, none of AOTAutograd's per-call bookkeeping.
"""

import os

import torch

# Note [The door's own autograd function]
# AOTAutograd's runtime (its RuntimeWrapper, CompiledFunction and their
# prologues and epilogues) handles input mutations, outputs that alias
# inputs, subclasses and RNG state, at a host cost per call that a step of
# small graphs pays whole. A graph with none of these needs only: run the
# forward graph, keep its saved values for the backward, run the backward
# graph on them and the outputs' gradients, hand one gradient per input
# back. PyTorch's aot_export_joint_simple traces exactly such graphs (it
# refuses input mutations and outputs aliasing inputs); the door partitions
# its joint graph with StepCompiler.partition (the default partition, as
# the AOTAutograd path uses) and runs the two graphs inside one
# autograd.Function. The saved values (a token for those kept in grove, Note
# [Saved values kept in grove], handoff.py) are the context's saved tensors,
# released after the backward as AOTAutograd's are (a loss still held at the
# next step's forward holds no activation);
# the backward graph returns a gradient (or None) for every input, in input
# order, so gradients land in .grad as on the AOTAutograd path (Note
# [Gradients handed out of the pool], gradients.py). A graph this cannot take
# (a mutation, an alias, a parameter read as a constant, an output without a
# gradient) takes the AOTAutograd path. On by default on PyTorch 2.x;
# GROVE_DOOR_FUNCTION=0 turns it off. Tests: DoorFunctionTest
# (tests/python/door_function_test.py, sim: the Function over graphs that
# PyTorch 1.13's AOTAutograd partitions) and GpuTorchTrainingTest
# (tests/python/gpu_torch_training_test.py, the door on a GPU).


taken = 0  # training graphs run as the door's own function (tests read it)


class Unsupported(Exception):
    """The graph needs AOTAutograd's runtime (Note [The door's own autograd function])."""


def enabled():
    return os.environ.get("GROVE_DOOR_FUNCTION", "1") != "0"


def joint_partition(gm, example_inputs, compiler):
    """(forward module, backward module, user output count) of dynamo's
    graph `gm`: AOTAutograd's joint graph (aot_export_joint_simple), split by
    compiler.partition. Raises Unsupported for a graph the door's function
    cannot run."""
    try:
        from torch._functorch.aot_autograd import aot_export_joint_simple
    except ImportError as error:
        raise Unsupported("no aot_export_joint_simple (%s)" % error) from None
    parameters = [name for name, value in getattr(gm, "named_parameters", lambda: [])()
                  if value.requires_grad]
    if parameters:  # their gradients would be lost: the joint differentiates inputs only
        raise Unsupported("parameters read as graph attributes: %s" % ", ".join(parameters[:3]))
    try:
        joint = aot_export_joint_simple(gm, list(example_inputs), trace_joint=True)
    except Exception as error:  # mutations, aliases, pytrees: AOTAutograd's path
        raise Unsupported("%s: %s" % (type(error).__name__, str(error).splitlines()[0][:200])
                          ) from None
    placeholders = [node for node in joint.graph.nodes if node.op == "placeholder"]
    tangents = sum(1 for node in placeholders if "tangents" in node.target)
    primals = len(placeholders) - tangents
    # The partitioner reads the joint's outputs as pytree leaves, so do we.
    outputs = torch.utils._pytree.tree_flatten(
        [node for node in joint.graph.nodes if node.op == "output"][0].args)[0]
    required = sum(1 for value in example_inputs
                   if isinstance(value, torch.Tensor) and value.requires_grad)
    user_outputs = len(outputs) - required
    if primals != len(example_inputs) or user_outputs != tangents or user_outputs < 1:
        raise Unsupported("%d primals for %d inputs, %d outputs and %d tangents"
                          % (primals, len(example_inputs), user_outputs, tangents))
    forward, backward = compiler.partition(joint, list(example_inputs),
                                           num_fwd_outputs=user_outputs)
    return forward, backward, user_outputs


def door_function(forward, backward, user_outputs, requires_grad, compiler, single=False):
    """The callable dynamo runs for one training graph: `forward` and
    `backward` (fx modules of one partition), `requires_grad` per input
    (which inputs get a gradient, in order). `single`: the graph returns one
    value, not a tuple."""
    # The backward's arguments: the saved values (the forward's outputs past
    # the user's, reordered where the backward lists them otherwise), then
    # the outputs' gradients.
    saved_order = _saved_order(forward, backward, user_outputs)
    _one_gradient_per_input(backward, requires_grad)
    run_forward = compiler.forward(forward, None)
    run_backward = compiler.backward(backward, None)

    class DoorStep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            results = run_forward(list(args))
            # Saved as autograd saves tensors: released after the backward
            # (the kept set dies with its token), kept for retain_graph=True.
            ctx.save_for_backward(*results[user_outputs:])
            return tuple(results[:user_outputs])

        @staticmethod
        def backward(ctx, *gradients):
            saved = list(ctx.saved_tensors)
            if saved_order is not None:
                saved = [saved[index] for index in saved_order]
            tangents = [gradient if gradient.is_contiguous() else gradient.contiguous()
                        for gradient in gradients]
            return tuple(run_backward(saved + tangents))

    global taken
    taken += 1
    apply = DoorStep.apply
    if single:
        return lambda *args: apply(*args)[0]
    return apply


def _saved_order(forward, backward, user_outputs):
    """The positions, among the forward's saved outputs, of the backward's
    saved inputs in its order, or None where that is the forward's order.
    Both graphs come from one joint graph, so a saved value keeps its
    node's name in both; the tangents come last."""
    outputs = [node for node in forward.graph.nodes if node.op == "output"][0].args[0]
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    saved = [getattr(node, "name", None) for node in outputs[user_outputs:]]
    placeholders = [node for node in backward.graph.nodes if node.op == "placeholder"]
    tangents = [index for index, node in enumerate(placeholders) if "tangents" in node.target]
    names = [node.name for node in placeholders if "tangents" not in node.target]
    if len(tangents) != user_outputs or tangents != list(range(len(names), len(placeholders))):
        raise Unsupported("the backward takes %d tangents at %s" % (len(tangents), tangents))
    if names == saved:
        return None
    index = {name: position for position, name in enumerate(saved)}
    if len(index) != len(saved) or any(name not in index for name in names):
        raise Unsupported("the backward's saved inputs %s are not the forward's outputs"
                          % names[:4])
    return [index[name] for name in names]


def _one_gradient_per_input(backward, requires_grad):
    """Rewrites the backward graph to return a gradient or None for every
    input (it returns one per input that requires a gradient)."""
    output = [node for node in backward.graph.nodes if node.op == "output"][0]
    values = output.args[0]
    values = list(values) if isinstance(values, (tuple, list)) else [values]
    if len(values) == len(requires_grad):
        return
    if len(values) != sum(requires_grad):
        raise Unsupported("the backward returns %d gradients for %d inputs that need one"
                          % (len(values), sum(requires_grad)))
    gradients = iter(values)
    output.args = ([next(gradients) if required else None for required in requires_grad],)
    backward.recompile()
