"""AOTAutograd's forward and backward graphs compiled by grove as the tree's
forward and backward stages (StepCompiler, Note [Saved activations stay in
the pool] below), the dynamo backend for graphs that need gradients
(aot_backend) and attention written out in grove ops. grove.training
(compile_module, PyTorch 1.13) and grove.torch (PyTorch 2.x) build on it;
it imports neither.
"""

import operator
import os
import threading
import weakref

import torch

import grove
from grove import gradient_reduce, handoff, importer, parameter_views
from grove.runner import StaticInputMovedError

log = importer.log

# Note [Saved activations stay in the pool]: the forward graph returns the
# user's outputs first and then the activations it saves for the backward
# (where the forward is one grove segment, they stay inside grove behind one
# token instead: Note [Saved values kept in grove], capi/kept_values.cc).
# Only the backward reads the saved ones, within the same step (the tree keeps
# a forward's generation open until its backward has run), so they are handed
# over uncopied even where PyTorch has no storage hook (Note [Kept outputs
# through DLPack], grove/outputs.py), and a backward that reads an activation a
# later replay overwrote fails with grove's stale-input message instead of
# reading new data. The user's outputs (the model's output, a loss) are
# copied out of a graph backend's memory: a training loop keeps them across
# steps (losses.append(loss.detach())), and PyTorch's storage hook poisons only
# the tensor grove returned, never a detached alias of it, which a later
# replay would overwrite silently (TrainingTest.test_sgd_steps_reach_torch_losses). The backward's
# outputs (gradients) leave a graph backend's memory uncopied where they land
# in a parameter's .grad (Note [Gradients handed out of the pool],
# grove/gradients.py); any other is copied. Guarded by TrainingTest.test_micro_batches_keep_saved_activations
# and TrainingTest.test_backward_after_a_replay_overwrote_its_activations_raises
# (tests/python/training_test.py).

_MODES = ("cudagraphs", "eager")


class StepContext:
    """What a graph backend's forward tells its backward.

    Its trees: Note [Trees of another thread] (cudagraph_trees/tree_manager.h):
    on CUDA, autograd runs the backward on its own device thread, whose calls
    would land in a tree of that thread's; the backward must run in the
    forward's tree (to read the saved activations in place and end the
    forward's pending backward, or the forward never leaves warm-up). The
    forward notes its thread's trees; a backward on another thread enters
    them. Guarded by TrainingTest.test_backward_on_another_thread_replays_in_the_forwards_tree.

    Its parameters: the backward's gradients land in them uncopied
    (Note [Gradients handed out of the pool], grove/gradients.py)."""

    def __init__(self):
        self.trees = None
        self.parameters = None  # weak references to the forward's leaf inputs, by position
        self.parameter_pointers = frozenset()  # their data pointers (Note [Saved parameters])

    # Note [Saved parameters]: the backward graph may receive a weight the
    # forward read (the weight, or a transpose the forward made of it) as an
    # input that is not a Parameter, which grove would copy into the graph's
    # input memory at every replay. An input of the backward at the address
    # of a parameter of the forward is bound instead, as the forward binds the
    # parameter: read in place, its address checked at every call; a permuted
    # view is bound as its contiguous base with the permutation written into
    # the graph (grove/parameter_views.py). This holds for a weight's
    # transpose the forward kept in grove (a token's value, Note [Saved
    # values kept in grove], handoff.py: bound as a param, it is no segment
    # input, and its token is not checked, the forward checked the weight) and
    # for a constant the forward folded and saves (a causal mask: the same
    # tensor at every call). These were the 16 of 17 (mlp16x512) and 32 of
    # 33 (gpt4x256) input copies per door step on an H100; the backward now
    # copies the loss's gradient and the batch only. Only the forward's bound
    # inputs count: a batch that needs a gradient (an input-gradient or
    # adversarial step) is a leaf too, and taking its address for a
    # parameter's bound the backward's saved batch, which then "moved" at the
    # next step's new batch (StaticInputMovedError; training fuzz seed 3).
    # Guarded by SavedParameterTest (tests/python/handout_test.py),
    # TrainingFuzzTest (tests/python/training_fuzz_test.py) and
    # TrainingTest.test_the_backward_copies_only_the_loss_gradient_and_the_batch
    # (tests/python/training_test.py).
    def parameter_aliases(self, args):
        """Positions among `args` (a backward's inputs) of tensors at the
        address of one of the forward's parameters (the weight or a view of
        it: parameter_views.bound_as_bases binds those it can)."""
        pointers = self.parameter_pointers
        return [index for index, value in enumerate(args)
                if isinstance(value, torch.Tensor) and value.numel() > 0
                and value.data_ptr() in pointers]

    def forward_called(self, args):
        self.note_parameters(args)
        trees = self.trees
        if trees is None or trees.thread != threading.get_ident():
            self.trees = grove.thread_trees()

    def note_parameters(self, args):
        """Notes the forward's leaf inputs (its parameters), once."""
        if self.parameters is None:
            # AOTAutograd's backward returns one gradient per forward input.
            self.parameters = [weakref.ref(value) if isinstance(value, torch.Tensor)
                               and value.is_leaf and value.requires_grad else None
                               for value in args]
            # Bound inputs only (static_positions): a user's input that needs
            # a gradient is a leaf too, but new at every step (Note [Saved
            # parameters]).
            self.parameter_pointers = frozenset(
                value.data_ptr() for value in args if _bound_input(value)
                and value.is_leaf and value.requires_grad and value.numel() > 0)

    def run(self, call, args):
        trees = self.trees
        if trees is None or trees.thread == threading.get_ident():
            return call(*args)
        with trees:
            return call(*args)


class GradientHandout:
    """Note [Gradients handed out of the pool] (grove/gradients.py) for one
    backward graph: each gradient of a parameter is handed over uncopied, any
    other is copied. Planned on its first call: a graph's outputs keep their
    kinds and shapes from call to call, so later calls follow the plan with
    no Python per gradient."""

    def __init__(self, step):
        self.step = step
        self.copied = None  # positions of gradients copied (no parameter takes them)
        self.pick = None  # gradients -> the handed ones, in order
        self.references = ()  # weak references to the parameters taking them

    def _plan(self, gradients):
        parameters = self.step.parameters
        matched = parameters is not None and len(parameters) == len(gradients)
        copied, handed, references = [], [], []
        for index, gradient in enumerate(gradients):
            if not isinstance(gradient, torch.Tensor):
                continue
            parameter = parameters[index]() if matched and parameters[index] else None
            if parameter is None or parameter.shape != gradient.shape:
                copied.append(index)
            else:
                handed.append(index)
                references.append(parameters[index])
        self.copied = copied
        self.references = tuple(references)
        if len(handed) > 1:
            self.pick = operator.itemgetter(*handed)
        else:
            self.pick = lambda values: tuple(values[index] for index in handed)

    def __call__(self, gradients):
        if self.copied is None:
            self._plan(gradients)
        for index in self.copied:
            gradients[index] = gradients[index].clone()
        if self.references:
            grove.hand_out_gradients(self.references,
                                     list(map(_DATA_POINTER, self.pick(gradients))))
        return gradients


_DATA_POINTER = torch.Tensor.data_ptr


def _boxed(runner, check_saved=None, labels=None, step=None, forward=False):
    """AOTAutograd's calling convention: one list of arguments, a list back.
    check_saved: the graph's name, to check its inputs first (a backward's);
    labels: names of the graph's inputs for messages (parameter names);
    step: the StepContext of graph backends (forward: whether this is the forward)."""
    handout = GradientHandout(step) if step is not None and not forward else None

    def call(args):
        if check_saved is not None:
            _check_saved_activations(args, runner, check_saved)
        try:
            if step is None:
                result = runner(*args)
            elif forward:
                step.forward_called(args)
                result = runner(*args)
            else:
                result = handout(list(step.run(runner, args)))
        except StaticInputMovedError as error:
            label = labels[error.position] if labels and error.position < len(labels) else None
            if label is None:
                raise
            raise StaticInputMovedError(error.position, (
                "grove: parameter '%s' was replaced outside the training step (its memory "
                "moved since grove compiled the step, which binds parameters and never "
                "copies them); update parameters in place (param.data.copy_(...), "
                "optimizer steps) or compile the module again" % label)) from None
        return list(result) if isinstance(result, (tuple, list)) else [result]

    call._boxed_call = True
    call.runner = runner

    def stage_call():
        """The same call in one frame (Note [The door's stages in one
        frame], handoff.py), or None; made after a first call."""
        make = getattr(runner, "stage_call", None)
        if make is None or check_saved is not None or step is None:
            return None
        if forward:
            return make(step, call)
        return make(step, handout, call)

    call.stage_call = stage_call
    return call


def _check_saved_activations(args, runner, graph):
    """Note [Saved activations stay in the pool]: a saved activation that a
    later replay overwrote is refused, naming it."""
    for node, value in zip(runner.plan.placeholders, args):
        if getattr(value, "_grove_output", None) is not None:
            grove.check_not_overwritten(
                value, "the %s graph reads saved activation '%s', which a later forward "
                "overwrote; run each backward before the next step's forward "
                "(mark_step_begin ends a step)" % (graph, node.name))


def _bound_input(value):
    """Whether a graph input is a parameter (or an input dynamo marked
    static): bound, never copied."""
    return (isinstance(value, torch.nn.Parameter)
            or getattr(value, "_dynamo_static_input_type", None) is not None)


def static_positions(example_inputs):
    """Positions of the parameters among a graph's inputs (bound, never copied)."""
    return [index for index, value in enumerate(example_inputs) if _bound_input(value)]


class StepCompiler:
    """AOTAutograd's partition, forward and backward compilers for grove."""

    def __init__(self, mode="cudagraphs", strict=False, device=None, name="train", lazy=False):
        """lazy: import each graph on its first call, from the real arguments
        (PyTorch 2.x hands the compilers fake tensors; parameters are bound
        to the real ones)."""
        if mode not in _MODES:
            raise ValueError("grove: option mode=%r; use 'cudagraphs' or 'eager'" % (mode,))
        self.mode = mode
        self.strict = strict
        self.device = device
        self.name = name
        self.lazy = lazy
        self.user_outputs = None  # how many of the forward's outputs are the user's
        self.input_labels = None  # names of the forward's first inputs (parameters)
        self.forwards = []
        self.backwards = []
        self.inferences = []
        self.on_runner = None  # called with each GraphRunner made (grove.torch tracks them)
        # Note [Saved values kept in grove] (capi/kept_values.cc, handoff.py):
        # the forwards that keep their saved activations in grove, and the
        # backwards (each finds its forward by the token it receives).
        self.keep_saved = os.environ.get("GROVE_KEEP_SAVED", "1") != "0"
        self.kept_forwards = []
        self.kept_backwards = []
        # The forward's parameters (Note [Saved parameters]), noted in both
        # modes so that both compile the same backward graph; the step's
        # trees and gradient handout in a graph backend only.
        self.saved_parameters = StepContext()
        self.step = self.saved_parameters if mode != "eager" else None
        # Note [Gradient all-reduce in the door's backward] (gradient_reduce.py)
        self.all_reduce = gradient_reduce.current()
        if self.all_reduce is not None:
            gradient_reduce.note_compiler(self)
        self.reduced_positions = None  # forward inputs whose gradients are all-reduced
        self.partitioned = None  # the last partition's (forward, backward) modules
        self.compiled_forward = None  # (the last forward module compiled, AOTAutograd's metadata)
        self.reductions = []  # gradient_reduce.BackwardReduction per backward graph

    def partition(self, joint, joint_inputs, **kwargs):
        """The default partition, noting how many forward outputs are the user's."""
        try:
            from torch._functorch.partitioners import default_partition
        except ImportError:  # PyTorch 1.13: functorch
            from functorch.compile import default_partition
        if "num_fwd_outputs" in kwargs:
            self.user_outputs = kwargs["num_fwd_outputs"]
        else:
            outputs = joint_inputs[1]
            self.user_outputs = len(outputs) if isinstance(outputs, (tuple, list)) else 1
        self.partitioned = default_partition(joint, joint_inputs, **kwargs)
        return self.partitioned

    def _device(self, example_inputs):
        if self.device is not None:
            return self.device
        cuda = [v for v in example_inputs if isinstance(v, torch.Tensor) and v.is_cuda]
        return "cuda:%d" % (cuda[0].device.index or 0) if cuda else "sim"

    def forward(self, graph_module, example_inputs):
        user_outputs = self.user_outputs  # of this graph's partition, noted just before
        # Note [The door's own autograd function] (door_function.py): the
        # graph AOTAutograd compiles and what it knows of its calling convention.
        self.compiled_forward = (graph_module, _aot_metadata())
        if self.lazy:
            return _Lazy(lambda args: self._forward(graph_module, args, user_outputs))
        return self._forward(graph_module, example_inputs, user_outputs)

    def backward(self, graph_module, example_inputs):
        if self.lazy:
            return _Lazy(lambda args: self._backward(graph_module, args))
        return self._backward(graph_module, example_inputs)

    def inference(self, graph_module, example_inputs):
        """AOTAutograd's inference compiler (no input needs gradients)."""
        if self.lazy:
            return _Lazy(lambda args: self._inference(graph_module, args))
        return self._inference(graph_module, example_inputs)

    def _inference(self, graph_module, example_inputs):
        # Note [Static inputs in a permuted layout] (parameter_views.py).
        graph_module, example_inputs, static = parameter_views.bound_as_bases(
            graph_module, example_inputs, static_positions(example_inputs))
        plan = importer.import_graph(graph_module, list(example_inputs),
                                     static_inputs=static,
                                     strict=self.strict, name="%s_inference" % self.name)
        # Note [Warm-up outputs leave the pool] (runner.py): a graph of the
        # step without gradients may build state the module keeps.
        runner = plan.compile(backend=self.mode, device=self._device(example_inputs),
                              warm_up_outputs_leave_pool=True)
        self._made(self.inferences, runner)
        return _boxed(runner)

    def _forward(self, graph_module, example_inputs, user_outputs):
        example_inputs = list(example_inputs)
        if self.step is None:  # a graph backend's step notes them on the first call
            self.saved_parameters.note_parameters(example_inputs)
        if self.all_reduce is not None:
            self.reduced_positions = gradient_reduce.parameter_positions(example_inputs)
        # Note [Static inputs in a permuted layout] (parameter_views.py).
        graph_module, example_inputs, static = parameter_views.bound_as_bases(
            graph_module, example_inputs, static_positions(example_inputs))
        plan = importer.import_graph(graph_module, example_inputs,
                                     static_inputs=static,
                                     strict=self.strict, name="%s_forward" % self.name)
        output = plan.output_arg
        items = list(output) if isinstance(output, (tuple, list)) else [output]
        count = user_outputs if user_outputs is not None else len(items)
        user = {item for item in items[:count] if isinstance(item, torch.fx.Node)}
        saved = {item for item in items[count:] if isinstance(item, torch.fx.Node)}

        copy_user = self.mode != "eager"

        def copies(node):  # Note [Saved activations stay in the pool]
            if node in user:
                return copy_user
            if node in saved:
                return False
            return None

        runner = plan.compile(backend=self.mode, device=self._device(example_inputs),
                              stage="forward", output_copies=copies)
        self._made(self.forwards, runner)
        self._log(plan, "forward")
        if self.keep_saved and handoff.applicable(runner):
            kept = handoff.KeptForward(runner, count)
            self.kept_forwards.append(kept)
            return _boxed(kept, labels=self.input_labels, step=self.step, forward=True)
        return _boxed(runner, labels=self.input_labels, step=self.step, forward=True)

    def _backward(self, graph_module, example_inputs):
        # Compiled from a first call's arguments: the activations a forward
        # kept in grove arrive as its token (Note [Saved values kept in grove]).
        forward, tokens = handoff.find_tokens(example_inputs, self.kept_forwards)
        example_inputs = handoff.materialized(example_inputs, forward, tokens)
        static = static_positions(example_inputs)
        # Note [Saved parameters]: kept values among them (the weight's
        # transpose the forward saved), and the forward's folded constants.
        aliases = set(self.saved_parameters.parameter_aliases(example_inputs))
        aliases |= set(self._forward_constants(example_inputs))
        # Note [Static inputs in a permuted layout] (parameter_views.py): the
        # parameters themselves too.
        graph_module, example_inputs, static = parameter_views.bound_as_bases(
            graph_module, example_inputs, aliases | set(static))
        plan = importer.import_graph(graph_module, example_inputs, static_inputs=static,
                                     strict=self.strict, name="%s_backward" % self.name)
        graph_outputs = set(n for n in _output_nodes(plan.output_arg))

        def copies(node):  # Note [Gradients handed out of the pool] (GradientHandout)
            return False if node in graph_outputs else None

        reduction = None
        if self.all_reduce is not None and self.reduced_positions:
            items = plan.output_arg if isinstance(plan.output_arg, (tuple, list)) else [
                plan.output_arg]
            reduction = gradient_reduce.BackwardReduction(self.all_reduce,
                                                          self.reduced_positions, items)
            self.reductions.append(reduction)
        # Verify mode's eager twin would compare reduced gradients with this
        # rank's own: off for a reducing backward.
        runner = plan.compile(backend=self.mode, device=self._device(example_inputs),
                              stage="backward", output_copies=copies,
                              gradient_all_reduce=reduction and reduction.segment_option,
                              verify=False if reduction is not None else None)
        self._made(self.backwards, runner)
        self._log(plan, "backward")
        graph = "%s_backward" % self.name
        if self.kept_forwards:
            kept = handoff.KeptBackward(
                runner, self.kept_forwards, graph,
                lambda args: _check_saved_activations(args, runner, graph))
            self.kept_backwards.append(kept)
            call = _boxed(kept, step=self.step)
        else:
            call = _boxed(runner, check_saved=graph, step=self.step)
        left = reduction.left_to_torch() if reduction is not None else []
        return gradient_reduce.reduced_after(call, left) if left else call

    def _forward_constants(self, args):
        """Positions among `args` (a backward's inputs) of the constants the
        forwards folded and return as saved values (a causal mask, an
        arange): the same tensors at every call (Note [Saved parameters])."""
        constants = {id(value) for runner in self.forwards
                     for value in getattr(runner, "constants", {}).values()
                     if isinstance(value, torch.Tensor)}
        return [index for index, value in enumerate(args)
                if id(value) in constants and value.numel() > 0]

    def _made(self, runners, runner):
        runners.append(runner)
        if self.on_runner is not None:
            self.on_runner(runner)

    def _log(self, plan, what):
        if plan.unsupported:
            log.info("%s graph: %d op(s) run in PyTorch: %s", what, len(plan.unsupported),
                     ", ".join("%s (%s)" % (op, node) for node, op, _ in plan.unsupported))

    def runners(self):
        return self.forwards + self.backwards + self.inferences

    def mark_step_begin(self):
        for runner in self.runners():
            runner.mark_step_begin()


def _aot_metadata():
    """AOTAutograd's metadata of the graph it compiles now (its
    ViewAndMutationMeta, which it notes in the tracing context before it
    calls the forward compiler), or None."""
    try:
        from torch._guards import TracingContext
    except ImportError:
        return None
    context = TracingContext.try_get()
    return getattr(context, "fw_metadata", None) if context is not None else None


class _Lazy:
    """A boxed callable compiled on its first call, from that call's arguments."""

    _boxed_call = True

    def __init__(self, build):
        self.build = build
        self.compiled = None

    def __call__(self, *args):
        # Boxed (one list of tensors) as AOTAutograd calls a compiler's result,
        # or unboxed where PyTorch 2.x wraps it and drops `_boxed_call` (the
        # backward behind dynamo's disable wrapper).
        boxed = list(args[0]) if len(args) == 1 and isinstance(args[0], list) else list(args)
        if self.compiled is None:
            self.compiled = self.build(list(boxed))
        return self.compiled(boxed)


def aot_backend(mode="cudagraphs", strict=False, device=None):
    """PyTorch 2.x: a dynamo backend that hands the graph to AOTAutograd with
    grove's compilers (torch.compile(model, backend="grove") uses it for
    graphs that need gradients). Returns (backend, StepCompiler)."""
    from torch._dynamo.backends.common import aot_autograd

    compiler = StepCompiler(mode, strict, device, name="torch_graph", lazy=True)
    backend = aot_autograd(fw_compiler=compiler.forward, bw_compiler=compiler.backward,
                           inference_compiler=compiler.inference,
                           partition_fn=compiler.partition)
    return backend, compiler


def math_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                   scale=None):
    """scaled_dot_product_attention written in matmul, masked_fill and
    softmax, whose forward and backward grove imports whole (PyTorch's fused
    attention kernels and their backwards are not grove ops)."""
    head = query.shape[-1]
    scores = (query @ key.transpose(-2, -1)) * (scale if scale is not None else head ** -0.5)
    if is_causal:
        # Made from the query (new_ones), so that tracing with fake tensors
        # (PyTorch 2.x's AOTAutograd) makes a fake mask too.
        causal = query.new_ones(query.shape[-2], key.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return torch.softmax(scores, dim=-1) @ value


class _attention_written_out:
    """While AOTAutograd traces a module on PyTorch 2.x (the first call),
    torch.nn.functional.scaled_dot_product_attention is math_attention, so that
    modules calling it (nn.MultiheadAttention, nn.TransformerEncoder) trace to
    grove ops instead of a fused attention kernel whose backward grove lacks.
    PyTorch 1.13 traces attention to matmuls already (active=False)."""

    def __init__(self, active):
        self.active = active
        self.saved = None

    def __enter__(self):
        if self.active:
            original = self.saved = torch.nn.functional.scaled_dot_product_attention

            def written_out(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                            scale=None, **options):
                if dropout_p or options:  # dropout, grouped-query: PyTorch's own kernel
                    return original(query, key, value, attn_mask, dropout_p, is_causal,
                                    scale=scale, **options)
                return math_attention(query, key, value, attn_mask, 0.0, is_causal, scale)

            torch.nn.functional.scaled_dot_product_attention = written_out
        return self

    def __exit__(self, *exc):
        if self.active:
            torch.nn.functional.scaled_dot_product_attention = self.saved
        return False


def _attention_targets():
    targets = set()
    for owner in (torch.nn.functional, getattr(torch._C, "_nn", None)):
        function = getattr(owner, "scaled_dot_product_attention", None)
        if function is not None:
            targets.add(function)
    return targets


def multi_head_attention_written_out(*args, **kwargs):
    """torch.nn.functional.multi_head_attention_forward with the attention it
    calls written out (_attention_written_out) while it runs: dynamo keeps
    nn.MultiheadAttention's call whole (torchvision's ViT), and AOTAutograd
    would trace the fused kernel inside it, whose backward grove lacks."""
    active = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    with _attention_written_out(active):
        return torch.nn.functional.multi_head_attention_forward(*args, **kwargs)


def write_out_attention(graph_module, targets=None, multi_head_targets=None):
    """Replaces each call of scaled_dot_product_attention in a torch-level fx
    graph (dynamo's) by math_attention, where it has no dropout and no
    grouped-query option, and each call of multi_head_attention_forward by
    multi_head_attention_written_out; returns how many it replaced."""
    targets = _attention_targets() if targets is None else set(targets)
    multi_head_targets = {torch.nn.functional.multi_head_attention_forward} \
        if multi_head_targets is None else set(multi_head_targets)
    replaced = 0
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and node.target in multi_head_targets:
            node.target = multi_head_attention_written_out
            replaced += 1
            continue
        if node.op != "call_function" or node.target not in targets:
            continue
        dropout = node.args[4] if len(node.args) > 4 else node.kwargs.get("dropout_p", 0.0)
        if dropout or node.kwargs.get("enable_gqa") or len(node.args) > 7:
            continue
        node.target = math_attention
        replaced += 1
    if replaced:
        graph_module.recompile()
    return replaced


def _output_nodes(output):
    items = list(output) if isinstance(output, (tuple, list)) else [output]
    return [item for item in items if isinstance(item, torch.fx.Node)]
