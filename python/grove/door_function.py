"""A training graph of the torch door run as one autograd.Function of grove's
own (Note [The door's own autograd function]), instead of AOTAutograd's
runtime wrappers: the forward and backward graphs are AOTAutograd's (its
trace and partition), grove compiles them as the tree's forward and
backward stages (training_steps.StepCompiler), and a call is
Function.apply, the forward graph, and in backward() the backward graph: no
Python per tensor, none of AOTAutograd's per-call bookkeeping.
"""

import collections
import itertools
import operator
import os

import torch

# Note [The door's own autograd function]
# AOTAutograd's runtime (its RuntimeWrapper, CompiledFunction and their
# prologues and epilogues) handles input mutations, outputs that alias
# inputs, subclasses and RNG state, at a host cost per call that a step of
# small graphs pays whole. A graph with none of these needs only: run the
# forward graph, keep its saved values for the backward, run the backward
# graph on them and the outputs' gradients, hand one gradient per input
# back. So AOTAutograd traces and partitions every training graph as before
# (the same forward and backward graphs: StepCompiler notes the partition and
# the forward AOTAutograd compiles, with AOTAutograd's metadata of it), and
# where that metadata shows no input mutation, no output aliasing an input
# or an intermediate, no effect token, no functionalized RNG and no tensor
# subclass, and the forward takes exactly the graph's inputs (after the graph
# module's own parameters and buffers, as AOTAutograd passes them), the door
# runs the two graphs inside one autograd.Function of its own instead of
# AOTAutograd's compiled function. The saved values (a token for those kept
# in grove, Note [Saved values kept in grove], handoff.py) are the context's
# saved tensors, released after the backward as AOTAutograd's are (a loss
# still held at the next step's forward holds no activation); the backward
# graph returns a gradient (or None) for every input, in input order, so
# gradients land in .grad as on AOTAutograd's path (Note [Gradients handed
# out of the pool], gradients.py). Any other graph (or an output without a
# gradient, or a backward whose inputs are not the forward's saved outputs)
# keeps AOTAutograd's compiled function. On by default since its GPU test
# passed on an H100 (PyTorch 2.11, session 15) with steps 0.87x (mlp16x512
# b32) and 0.88x (gpt4x256 b8) of AOTAutograd's runtime there;
# GROVE_DOOR_FUNCTION=0 turns it off. Tests: DoorFunctionTest
# (tests/python/door_function_test.py, sim: the Function over graphs that
# PyTorch 1.13's AOTAutograd partitions) and GpuTorchTrainingTest.
# test_the_door_runs_its_own_autograd_function (gpu_torch_training_test.py).


taken = 0  # training graphs run as the door's own function (tests read it)
direct_taken = 0  # of them, those whose backward sets .grad itself (tests read it)
in_backward_taken = 0  # of those, the ones that also run an optimizer's update (tests read it)


class Unsupported(Exception):
    """The graph needs AOTAutograd's runtime (Note [The door's own autograd function])."""


def enabled():
    """Whether training graphs may run as the door's own function (the
    default; GROVE_DOOR_FUNCTION=0 keeps AOTAutograd's runtime)."""
    return os.environ.get("GROVE_DOOR_FUNCTION", "1") != "0"


def aot_partition(gm, example_inputs, compiler):
    """(forward module, backward module, user output count, the parameters
    and buffers AOTAutograd passes before the graph's inputs) of the graph
    AOTAutograd just compiled with `compiler` (StepCompiler: its partition
    and forward compiler noted them). Raises Unsupported for a graph the
    door's function cannot run."""
    if compiler.compiled_forward is None or compiler.partitioned is None:
        raise Unsupported("AOTAutograd compiled no forward and backward just now")
    forward, metadata = compiler.compiled_forward
    _, backward = compiler.partitioned
    why = _not_simple(metadata)
    if why:
        raise Unsupported(why)
    # AOTAutograd passes a graph module's own parameters and buffers first
    # (aot_module_simplified); dynamo's graphs usually take them as inputs.
    lifted = _named_tensors(gm)
    placeholders = [node for node in forward.graph.nodes if node.op == "placeholder"]
    if len(placeholders) != len(lifted) + len(example_inputs):
        raise Unsupported("the forward takes %d inputs where the graph has %d and %d "
                          "parameters and buffers" % (len(placeholders), len(example_inputs),
                                                      len(lifted)))
    user_outputs = compiler.user_outputs
    if not user_outputs or user_outputs != len(metadata.output_info):
        raise Unsupported("the forward returns %s outputs before its saved values for %d "
                          "user outputs" % (user_outputs, len(metadata.output_info)))
    return forward, backward, user_outputs, lifted


def _not_simple(metadata):
    """Why AOTAutograd's runtime must run a graph of this metadata
    (ViewAndMutationMeta), or ""."""
    if metadata is None:
        return "AOTAutograd noted no metadata"
    inputs = getattr(metadata, "input_info", None)
    outputs = getattr(metadata, "output_info", None)
    if inputs is None or outputs is None:
        return "AOTAutograd's metadata has no input_info/output_info"
    for index, info in enumerate(inputs):
        for what in ("mutates_data", "mutates_metadata", "mutates_storage_metadata"):
            if getattr(info, what, False):
                return "input %d: %s" % (index, what)
    for index, info in enumerate(outputs):
        kind = getattr(getattr(info, "output_type", None), "name", None)
        if kind != "non_alias":
            return "output %d is %s" % (index, kind)
    if getattr(metadata, "num_intermediate_bases", 0):
        return "outputs alias intermediates"
    if getattr(metadata, "tokens", None):
        return "effect tokens"
    if getattr(metadata, "is_rng_op_functionalized", False):
        return "functionalized RNG"
    # Plain tensors' entries are ints (older PyTorch) or PlainTensorMeta.
    subclasses = getattr(metadata, "subclass_inp_meta", None) or []
    if any(type(entry).__name__ == "SubclassCreationMeta" for entry in subclasses):
        return "tensor subclass inputs"
    return ""


def _named_tensors(gm):
    """A graph module's parameters, then its buffers, as AOTAutograd lists them."""
    named = {}
    for members in ("named_parameters", "named_buffers"):
        method = getattr(gm, members, None)
        if method is None:
            continue
        try:
            items = method(remove_duplicate=False)
        except TypeError:
            items = method()
        named.update(items)
    return list(named.values())


def door_function(forward, backward, user_outputs, requires_grad, compiler, single=False,
                  lifted=(), direct=(), optimizer=None):
    """The callable dynamo runs for one training graph: `forward` and
    `backward` (fx modules of one partition), `requires_grad` per input
    of the forward (which get a gradient, in order); `lifted`: tensors passed
    before the call's arguments (a graph module's own parameters). `single`:
    the graph returns one value, not a tuple. `direct`: positions (among
    lifted and arguments) of leaf parameters whose gradients the backward
    sets as .grad itself (Note [Gradients set directly by the door's
    function]; direct_positions). `optimizer`: a grove optimizer whose
    parameters are exactly those at `direct`, updated at the end of the
    backward (Note [The optimizer's update inside the door's backward],
    grove/optim.py; update_in_backward)."""
    # The backward's arguments: the saved values (the forward's outputs past
    # the user's, reordered where the backward lists them otherwise), then
    # the outputs' gradients.
    saved_order = _saved_order(forward, backward, user_outputs)
    _one_gradient_per_input(backward, requires_grad)
    run_forward = _StageCall(compiler.forward(forward, None))
    run_backward = _StageCall(compiler.backward(backward, None))
    global taken
    taken += 1
    if direct:
        direct_set = set(direct)
        anchored = not any(required for index, required in enumerate(requires_grad)
                           if index not in direct_set)
        return _direct_door_function(run_forward, run_backward, saved_order, user_outputs,
                                     len(requires_grad), single, tuple(lifted), tuple(direct),
                                     anchored, optimizer, compiler.step)

    class DoorStep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            results = run_forward.call(args)
            # Saved as autograd saves tensors: released after the backward
            # (the kept set dies with its token), kept for retain_graph=True.
            ctx.save_for_backward(*results[user_outputs:])
            return tuple(results[:user_outputs])

        @staticmethod
        def backward(ctx, *gradients):
            return tuple(run_backward.call(_backward_arguments(ctx, saved_order, gradients)))

    return _door_call(DoorStep, tuple(lifted), single)


# Note [The door's call in one frame]
# What dynamo calls for a training graph run by the door's function was
# three wrappers around the Function's apply, each a Python frame that packs
# the call's arguments (every parameter: ViT-tiny's 152) into a new tuple:
# real_calls_only's fake-tensor check (Note [Fake calls of the door's
# function]), the lambda that prepends the lifted tensors and takes a
# single output, and c_apply's transform check (Note [The door's Function
# applied in C]). _door_call makes them one closure: the first tensor
# argument's fake check (where a fallback is given: real_calls_only hands it
# to the door's call, which makes the closure again with it), the lifted
# tensors, the C apply while no functorch transform is active (else the
# Python apply), and the single output. Same calls, same order.
# GROVE_DOOR_STAGE=layers (read when the door's function is made) keeps the
# wrappers, as for Note [The door's stages in one frame] (handoff.py). Tests:
# DoorFunctionTest.test_fake_calls_go_to_aotautograds_function and
# test_c_apply_matches_the_python_apply (door_function_test.py).
def _door_call(function, lifted, single, fallback=None):
    """The door's callable over `function` (Note [The door's call in one
    frame]); it has .with_fallback(fallback), the same callable sending
    calls on fake tensors to `fallback`."""
    if os.environ.get("GROVE_DOOR_STAGE", "one_frame") == "layers":
        return _layered_door_call(function, lifted, single)
    python_apply, direct, transforms_active = _applies(function)
    fake = _fake_tensor_type() if fallback is not None else None
    tensor = torch.Tensor

    def call(*args):
        if fake is not None:
            for value in args:
                if isinstance(value, tensor):
                    if isinstance(value, fake):
                        return fallback(*args)
                    break
        if lifted:  # the graph module's own parameters and buffers come first
            args = lifted + args
        if direct is not None and not transforms_active():
            results = direct(*args)
        else:
            results = python_apply(*args)
        return results[0] if single else results

    call.with_fallback = lambda fallback: _door_call(function, lifted, single, fallback)
    return call


# Note [Gradients set directly by the door's function]
# On the door's function, autograd's engine runs one AccumulateGrad node per
# parameter after the door's backward node: it checks the gradient's layout
# and sets (or adds to) .grad, for every parameter of every step. With
# GROVE_DOOR_GRADIENTS=direct (opt-in) the leaf parameters of a graph (but
# one, when no other input needs a gradient, so that the outputs still need
# one and the backward runs) are not the Function's autograd inputs: the
# forward reads them from the call's arguments as before, and the backward
# sets each one's .grad to its gradient where .grad is None (zero_grad's
# default; one C-level map over the set) or adds it in place otherwise, as
# AccumulateGrad does without create_graph. Semantics the user gives up with
# the switch: those parameters are not in autograd's graph, so
# torch.autograd.grad(loss, params) refuses them and any backward through
# the graph (autograd.grad of another input too) sets their .grad; hooks on
# them or on their AccumulateGrad nodes do not run. So direct_positions takes
# no parameter that has tensor hooks or is passed twice (tied weights: autograd
# sums the two gradients), and none while torch.distributed is
# initialized (DDP's reducer hooks the AccumulateGrad nodes), unless grove's
# own DistributedDataParallel compiles the graph (its all-reduces are in the
# backward graph, gradient_reduce.py; no hooks), on any number of ranks.
# (Sessions 18 and 19 saw benchmarks/ddp_door.py's grove_ddp_direct hang on
# two GPUs and refused direct gradients across ranks; the hang was any second
# grove DDP of a process, which replaced the first one's NCCL communicator
# while that one's captured graphs lived: Note [Communicators captured by
# graphs are never destroyed], runtime/cuda/nccl_communicator.h. Alone, on
# 2xH100, grove_ddp_direct ran 1465.8 us per step with torch DDP's losses.)
# Tests: DoorFunctionTest.test_direct_gradients_match_torch_over_steps,
# test_direct_gradients_accumulate_into_existing_grad and
# test_direct_positions_keep_one_parameter_and_hooked_ones
# (tests/python/door_function_test.py, sim; positions also with two ranks mocked) and
# gpu_ddp_door_test.py's grove_ddp_direct cases (1 and 2 GPUs). Measured (session 19, r1, H200,
# door_timeline.py: 10 blocks of 20 steps interleaved in one process):
# mlp16x512 b32 1457.9 us per step against the default's 1727.3 (0.84x), the
# same losses bitwise; session 18's "600 us slower" was one block per variant
# (Note [At least five blocks per training variant], torch_backend.py).
def direct_gradients():
    """Whether GROVE_DOOR_GRADIENTS=direct is set (Note [Gradients set
    directly by the door's function]); off by default."""
    value = os.environ.get("GROVE_DOOR_GRADIENTS", "")
    if value not in ("", "autograd", "direct"):
        raise ValueError("grove: GROVE_DOOR_GRADIENTS=%r; use 'direct' or 'autograd' (the "
                         "default)" % value)
    return value == "direct"


def direct_positions(values, grove_reduces=False, keep_one=True):
    """The positions among `values` (a graph's lifted tensors and inputs)
    whose gradients the door's function sets as .grad itself (Note
    [Gradients set directly by the door's function]): hook-free leaf
    parameters, less one where no other value needs a gradient; () while
    torch.distributed is initialized, unless grove_reduces (the backward
    graph averages the gradients itself: grove.torch.DistributedDataParallel,
    no reducer hooks). keep_one=False: every such parameter, none kept (the
    door's function then anchors its outputs in autograd's graph itself)."""
    distributed = getattr(torch, "distributed", None)
    if (not grove_reduces and distributed is not None and distributed.is_available()
            and distributed.is_initialized()):
        return ()
    needing = [index for index, value in enumerate(values)
               if isinstance(value, torch.Tensor) and value.requires_grad]
    # A tensor passed twice (tied weights) gets the sum of its two gradients,
    # which autograd's one AccumulateGrad node for it makes: it stays there.
    seen = collections.Counter(id(values[index]) for index in needing)
    leaves = [index for index in needing
              if values[index].is_leaf and seen[id(values[index])] == 1
              and not getattr(values[index], "_backward_hooks", None)
              and not getattr(values[index], "_post_accumulate_grad_hooks", None)]
    if keep_one and leaves and len(leaves) == len(needing):
        leaves = leaves[1:]  # through autograd, so that the outputs need a gradient
    return tuple(leaves)


def update_in_backward(values, grove_reduces=False):
    """(optimizer, positions): the grove optimizer made with
    update_in_backward whose parameters are exactly the direct-able leaf
    parameters among `values` (all of them, none kept), and their positions;
    (None, ()) where there is none (Note [The optimizer's update inside the
    door's backward], grove/optim.py)."""
    from grove import optim

    if not optim._IN_BACKWARD:
        return None, ()
    positions = direct_positions(values, grove_reduces, keep_one=False)
    optimizer = optim.in_backward_for([values[index] for index in positions])
    return (optimizer, positions) if optimizer is not None and positions else (None, ())


def _direct_door_function(run_forward, run_backward, saved_order, user_outputs, inputs, single,
                          lifted, direct, anchored=False, optimizer=None, step=None):
    """door_function's callable where the gradients at `direct` are set as
    .grad by the backward (Note [Gradients set directly by the door's
    function]): the Function's autograd inputs are the other tensors, and
    (anchored: none of them needs a gradient) an empty leaf tensor of its
    own that does, so that the outputs need one; its gradient is None.
    `optimizer` updates at the end of the backward, in the forward's trees
    (`step`, the StepContext; Note [The optimizer's update inside the door's
    backward], grove/optim.py)."""
    global direct_taken, in_backward_taken
    direct_taken += 1
    direct_set = set(direct)
    kept = tuple(index for index in range(inputs) if index not in direct_set)
    pick_kept = _picker(kept)
    pick_direct = _picker(direct)
    anchor = (torch.empty(0, requires_grad=True),) if anchored else ()
    leading = (None,) * (1 + len(anchor))  # the arguments' tuple, the anchor

    if optimizer is None:
        def finish():
            pass
    elif step is None:  # eager mode: no trees to enter
        in_backward_taken += 1
        finish = optimizer.update_from_backward
    else:
        in_backward_taken += 1

        def finish():
            step.run(optimizer.update_from_backward, ())

    class DoorStepDirect(torch.autograd.Function):
        @staticmethod
        def forward(ctx, args, *kept_tensors):
            results = run_forward.call(args)
            ctx.save_for_backward(*results[user_outputs:])
            ctx.direct = pick_direct(args)
            return tuple(results[:user_outputs])

        @staticmethod
        def backward(ctx, *gradients):
            computed = run_backward.call(_backward_arguments(ctx, saved_order, gradients))
            _set_gradients(ctx.direct, pick_direct(computed))
            finish()
            return leading + pick_kept(computed)

    apply = c_apply(DoorStepDirect)

    def call(*args):
        if lifted:
            args = lifted + args
        results = apply(args, *anchor, *pick_kept(args))
        return results[0] if single else results
    return call


# Note [The door's Function applied in C]
# On PyTorch 2.x, autograd.Function.apply is a Python classmethod over the C
# apply (_C._FunctionBase.apply): it checks for a setup_context, asks whether
# a functorch transform is active and, if none is, unwraps "dead" functorch
# wrappers (tensors left over from a transform that has exited) with one
# Python generator step and one C call per argument, then calls the C apply.
# The door's Function takes every parameter as an argument (ViT-tiny: 152),
# and defines no setup_context, so c_apply calls the C apply directly while no
# transform is active (one C check per call) and the Python apply otherwise.
# The one thing skipped is the dead-wrapper unwrap: a door's arguments are
# dynamo's graph inputs (the module's parameters and the user's tensors), and
# a functorch wrapper escaped from an exited transform reaches the door only
# if the user stored it out of the transform by hand. GROVE_DOOR_APPLY=python
# keeps the Python apply (read when the door's function is made), for timing
# both in one process. Measured (session 22, r2, an H200, benchmarks/
# door_timeline.py, both interleaved in one process per model; PyTorch's
# optimizer): mlp16x512 b32 1750.6 against 1766.1 us per step (0.991x),
# gpt4x256 b8 2727.0 against 2882.4 (0.946x), ViT-tiny b8 SGD 4660.8 against
# 5297.3 (0.880x); r1's mlp row had it 1.015x, within that run's spread.
# Test: DoorFunctionTest.test_c_apply_matches_the_python_apply
# (tests/python/door_function_test.py).
def _layered_door_call(function, lifted, single):
    """The door's callable as it was before Note [The door's call in one
    frame] (GROVE_DOOR_STAGE=layers), for timing both in one process."""
    apply = c_apply(function)
    if lifted:
        if single:
            return lambda *args: apply(*lifted, *args)[0]
        return lambda *args: apply(*lifted, *args)
    if single:
        return lambda *args: apply(*args)[0]
    return apply


def c_apply(function):
    """function.apply (an autograd.Function subclass defining no
    setup_context), calling the C apply directly while no functorch transform
    is active (Note [The door's Function applied in C])."""
    python_apply, direct, transforms_active = _applies(function)
    if direct is None:
        return python_apply

    def apply(*args):
        if transforms_active():
            return python_apply(*args)
        return direct(*args)
    return apply


def _applies(function):
    """(function.apply, the C apply or None where it is not to be called
    directly, the transform check) (Note [The door's Function applied in C])."""
    python_apply = function.apply
    transforms_active = getattr(torch._C, "_are_functorch_transforms_active", None)
    if os.environ.get("GROVE_DOOR_APPLY", "c") == "python" or transforms_active is None:
        return python_apply, None, None
    direct = super(torch.autograd.Function, function).apply
    if direct == python_apply:  # PyTorch 1.13: Function.apply is the C one
        return python_apply, None, None
    return python_apply, direct, transforms_active


class _StageCall:
    """A stage of the door's function (a boxed compiled graph, compiled on
    its first call): `call(args)` runs it, through the layered boxed call
    until the stage's one-frame closure exists (Note [The door's stages in
    one frame], handoff.py), then through that closure alone."""

    def __init__(self, boxed):
        self.boxed = boxed
        self.call = self._first
        self.one_frame = os.environ.get("GROVE_DOOR_STAGE", "one_frame") != "layers"

    def _first(self, args):
        results = self.boxed(list(args))
        if self.one_frame:
            compiled = getattr(self.boxed, "compiled", self.boxed)  # training_steps._Lazy
            make = getattr(compiled, "stage_call", None)
            stage = make() if make is not None else None
            if stage is not None:
                self.call = stage
                return results
        boxed = self.boxed
        self.call = lambda args: boxed(list(args))
        return results


def _backward_arguments(ctx, saved_order, gradients):
    """The backward graph's arguments: the values the forward saved (in the
    backward's order where it lists them otherwise), then the outputs'
    gradients, contiguous (Tensor.contiguous returns a contiguous tensor
    itself: one map, no Python per gradient)."""
    saved = ctx.saved_tensors
    if saved_order is not None:
        saved = [saved[index] for index in saved_order]
    return [*saved, *map(_CONTIGUOUS, gradients)]


_CONTIGUOUS = torch.Tensor.contiguous


def _picker(positions):
    """A function from a sequence to the tuple of its items at `positions`."""
    if not positions:
        return lambda values: ()
    if len(positions) == 1:
        position = positions[0]
        return lambda values: (values[position],)
    return operator.itemgetter(*positions)


_GRAD = operator.attrgetter("grad")


def _set_gradients(parameters, gradients):
    """AccumulateGrad's work for a set: .grad = gradient where .grad is None,
    .grad += gradient otherwise; None gradients leave .grad alone."""
    current = list(map(_GRAD, parameters))
    # No current.count(None): Note [Tensors are never counted against None] (gradients.py).
    if not any(map(operator.is_not, current, itertools.repeat(None))) and all(
            map(operator.is_not, gradients, itertools.repeat(None))):
        list(map(setattr, parameters, itertools.repeat("grad", len(parameters)), gradients))
        return
    for parameter, grad, gradient in zip(parameters, current, gradients):
        if gradient is None:
            continue
        if grad is None:
            parameter.grad = gradient
        else:
            grad.add_(gradient)


# Note [Fake calls of the door's function]
# Dynamo's DDP optimizer (torch.compile of a DistributedDataParallel model,
# PyTorch 2.x) splits a graph at its gradient buckets, compiles each piece
# with the backend and then runs the split graph once on fake tensors to
# propagate shapes: the compiled pieces are called with FakeTensors, which
# have no memory for grove to read. AOTAutograd's compiled function of the
# same graph runs on fake tensors, so a call whose first tensor argument is
# fake goes there; real calls run the door's function. Tests:
# DoorFunctionTest.test_fake_calls_go_to_aotautograds_function
# (door_function_test.py, sim) and GpuDdpDoorTest's *_with_the_doors_own_function
# cases (gpu_ddp_door_test.py, torch.compile of a DDP model).
def real_calls_only(own, fallback):
    """`own` (the door's function) for calls on real tensors, `fallback`
    (AOTAutograd's compiled function) for calls on fake ones (Note [Fake
    calls of the door's function]); one frame where `own` is the door's
    call (Note [The door's call in one frame])."""
    FakeTensor = _fake_tensor_type()
    if FakeTensor is None:  # no fake tensors in this PyTorch: every call is real
        return own
    with_fallback = getattr(own, "with_fallback", None)
    if with_fallback is not None:
        return with_fallback(fallback)

    def call(*args):
        for value in args:
            if isinstance(value, torch.Tensor):
                if isinstance(value, FakeTensor):
                    return fallback(*args)
                break
        return own(*args)
    return call


def _fake_tensor_type():
    """FakeTensor, or None in a PyTorch without fake tensors."""
    try:
        from torch._subclasses.fake_tensor import FakeTensor
    except ImportError:
        return None
    return FakeTensor


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
