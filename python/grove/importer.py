"""The ATen importer: a torch.fx graph at the ATen level (what make_fx or
AOTAutograd produce) becomes grove JSON programs, with what grove cannot take
left to PyTorch.

    plan = import_graph(graph_module, example_inputs, static_inputs={0, 1})
    runner = plan.compile(backend="cudagraphs", device="sim")
    outputs = runner(*inputs)

See Note [Splitting a graph] below.
"""

import logging
import os

import torch
import torch.fx

from grove import aten_any_all_ops  # noqa: F401 (adds any and all)
from grove import aten_argmax_ops  # noqa: F401 (adds argmax, argmin, max/min with indices)
from grove import aten_backward_ops  # noqa: F401 (adds the backward ops to CONVERTERS)
from grove import aten_batch_norm_ops  # noqa: F401 (adds batch norm and its backward)
from grove import aten_conv3d_ops  # noqa: F401 (adds 3-d convolution and its backward)
from grove import aten_conv_backward_ops  # noqa: F401 (adds the image ops' backwards)
from grove import aten_conv_ops  # noqa: F401 (adds convolution and pooling)
from grove import aten_conv_transpose_ops  # noqa: F401 (adds transposed convolution)
from grove import aten_fused_ops  # noqa: F401 (adds the fused encoder layer to CONVERTERS)
from grove import aten_grid_sample_ops  # noqa: F401 (adds grid_sampler_2d and its backward)
from grove import aten_group_norm_ops  # noqa: F401 (adds group norm)
from grove import aten_grouped_mm_ops  # noqa: F401 (adds histc and grouped products)
from grove import aten_index_ops  # noqa: F401 (adds gather, index, index_select)
from grove import aten_index_put_ops  # noqa: F401 (adds index_put, index_copy, index_add)
from grove import aten_layout_ops  # noqa: F401 (adds padding, nearest upsampling, cumsum)
from grove import aten_loss_ops  # noqa: F401 (adds the losses and their backwards)
from grove import aten_math_ops  # noqa: F401 (adds erf, hyperbolic and inverse trigonometry)
from grove import aten_nonfinite_ops  # noqa: F401 (adds isnan, isinf, nan_to_num, fmax)
from grove import aten_norm_ops  # noqa: F401 (adds vector norms, logsumexp, std, var_mean)
from grove import aten_pointwise_ops  # noqa: F401 (adds trigonometry, rounding, bitwise ops)
from grove import aten_resample_ops  # noqa: F401 (adds antialiased resampling)
from grove import aten_sort_ops  # noqa: F401 (adds sort and argsort)
from grove import aten_special_ops  # noqa: F401 (adds logit, xlogy, amin, shrinkage)
from grove import aten_triangle_ops  # noqa: F401 (adds tril and triu)
from grove import aten_unfold_ops  # noqa: F401 (adds Tensor.unfold and its backward)
from grove import aten_weight_norm_ops  # noqa: F401 (adds weight normalization)
from grove.aten_ops import CONVERTERS, _Converter
from grove.fx_common import (  # noqa: F401 (part of this module's interface)
    StorageOutsideOperandError,
    StrictModeError,
    Unsupported,
    draws_random_numbers,
    dtype_name,
    laid_out,
    node_arguments,
    op_name,
    strided_window_ids,
)
from grove.inplace import functionalize_inplace, mutates_first_argument, storage_key
from grove import input_writes, random_draws, value_kinds
from grove.input_writes import write_backs
from grove.runner import GraphRunner
from grove.segments import Segment, segment_program  # noqa: F401 (part of this module's interface)


# Ops whose result depends only on their tensor argument's shape, dtype and
# device (a causal mask made with query.new_ones(...).tril(), say): folded
# into constants like ops without inputs.
_METADATA_ONLY = {"aten.new_ones", "aten.new_zeros", "aten.new_full", "aten.ones_like",
                  "aten.zeros_like", "aten.full_like"}

log = logging.getLogger("grove")
if os.environ.get("GROVE_LOG", "").lower() in ("info", "debug") and not log.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("grove: %(message)s"))
    log.addHandler(_handler)
    log.setLevel(logging.DEBUG if os.environ["GROVE_LOG"].lower() == "debug" else logging.INFO)


# Note [Splitting a graph]: the nodes are taken in the graph's order. A run of
# nodes grove can take becomes one grove program (a segment); a node it cannot
# take runs in PyTorch eagerly between segments, with its operands read from the
# values computed so far and its result available to later segments as an
# input. Because segments follow the graph's topological order, each value is
# computed before its first use whichever side computes it. Nodes that depend on
# no input at all (torch.ones, arange, a causal mask) are computed once at import
# time and bound to the program as constants. Params (get_attr nodes and the
# inputs the caller marks static) are bound to the caller's tensors, never
# copied. Guarded by ImporterTest.test_unsupported_op_splits_the_graph_and_matches_torch
# (tests/python/importer_test.py).


# Note [A converter that fails leaves its node to PyTorch]: a converter meets
# arguments its author did not foresee (a convolution of another rank, a
# shape it unpacks as two sizes) with a Python error, not Unsupported. Such an
# error is taken as Unsupported naming it (plan.unsupported, a warning in the
# log; strict mode raises StrictModeError with it): the node runs in PyTorch
# and the model still gives PyTorch's result, where before torch.compile
# failed with BackendCompilerFailed (Whisper's conv1d, session 25). Test:
# ImporterTest.test_a_converter_that_fails_leaves_its_node_to_pytorch
# (tests/python/importer_test.py).
_CONVERTER_ERRORS = (ValueError, IndexError, KeyError, TypeError, AttributeError,
                     ZeroDivisionError)


# Note [Random draws are never constants]: a node that depends on no input
# is computed once, at import, and bound as a constant (Note [Splitting a
# graph]). A random draw (torch.rand, randn, randint, bernoulli, an in-place
# uniform_ or normal_: ATen tags them nondeterministic_seeded) depends on no
# input either, but must draw anew at every call: ViT-MAE's masking noise,
# a diffusion sampler's noise, Gumbel sampling. Folded, every call returned
# the import run's numbers. They count as input-dependent now, so they run
# (in PyTorch, where grove has no converter) at every call, and so does what
# they feed. fx_common.draws_random_numbers tells such nodes. Test:
# ImporterTest.test_random_draws_are_drawn_at_every_call
# (tests/python/importer_test.py).


# Note [Random draws nobody reads]: HF wav2vec2 draws torch.rand([]) for
# LayerDrop before every layer, in eval too, and reads it only when training.
# grove has no converter for the draw, so in inference it split the graph
# (three replays a call). A functional draw whose result nothing reads is left
# out of the program, as Inductor's dead-code elimination does: no value
# changes, only PyTorch's generator advances less than in eager (grove's
# draws come from streams of its own anyway: Note [Random draws are never
# constants]). An in-place draw (uniform_, bernoulli_) writes a tensor and
# stays. Test: ImporterTest.test_a_random_draw_nobody_reads_is_left_out
# (tests/python/importer_test.py).
def _unread_draw(node):
    return draws_random_numbers(node) and not mutates_first_argument(node)


# Note [Layouts a PyTorch step reads]: grove's values have no layout, and a
# segment's output may come back in other strides than PyTorch's kernels gave
# the same value (a transposed result laid out as grove computed it). Ops
# that reach memory through explicit strides (as_strided: HF Longformer's
# overlapping chunks, written with strides read off the traced tensor) then
# read other elements than in PyTorch, silently. Each such step left to
# PyTorch keeps, per tensor argument, the strides and storage offset that
# argument had in the import run (the traced layout,
# Note [The import run follows the traced strides]); the runner hands it a
# copy laid out that way where the value it has differs. A copy holds the
# value's elements only: an as_strided step whose window reaches other memory
# around a value grove computes (a slice's neighbours in its base) cannot be
# given it, and the import raises StorageOutsideOperandError (dynamo's graph
# then runs in PyTorch whole, Note [Graphs that read values as numbers run in
# PyTorch], dynamo_backend.py) instead of reading other memory. A random
# draw over a tensor (native_dropout, bernoulli, rand_like) reads its layout
# too: the mask follows memory order, so a transposed operand handed over
# contiguous drew another mask than eager PyTorch under the same seed (up to
# 8.8 off on a dropout of a transpose). A traced layout may hold one element
# for many positions (an expand's stride 0: HF's attention masks under
# dynamic shapes); the copy then writes each shared element once
# (fx_common.laid_out). Tests:
# ImporterTest.test_as_strided_in_pytorch_reads_the_traced_layout,
# test_a_pytorch_step_reads_an_expanded_layout,
# test_as_strided_past_a_grove_value_is_refused (tests/python/importer_test.py)
# and RandomDrawsTest.test_a_transposed_operand_keeps_its_dropout_and_the_draws_after_it
# (tests/python/random_draws_test.py).
_READS_LAYOUT = {"aten.as_strided", "aten.as_strided_scatter", "aten.view"}


class _Recorder(torch.fx.Interpreter):
    """Runs the graph once on the example inputs and keeps every node's value
    (shapes and dtypes for the importer; constants for folding)."""

    def __init__(self, module, written_attributes=()):
        super().__init__(module)
        self.values = {}
        self.before_write = {}  # node -> its value before an in-place op wrote its storage
        self.written_attributes = set(written_attributes)

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        if target in self.written_attributes and isinstance(value, torch.Tensor):
            return value.clone()  # Note [The import run leaves the inputs alone]
        return value

    def run_node(self, node):
        written = None
        if mutates_first_argument(node) and isinstance(node.args[0], torch.fx.Node):
            # Every value in the written storage keeps a copy from before the
            # write, for folding it as a constant (Note [In-place ops on intermediates]).
            written = node.args[0]
            key = storage_key(self.values.get(written))
            for other, value in self.values.items():
                if key is not None and other not in self.before_write and \
                        storage_key(value) == key:
                    self.before_write[other] = value.clone()
        layout = _layout(self.values.get(written))
        value = _with_traced_strides(node, super().run_node(node))
        if layout is not None and _layout(self.values[written]) != layout:
            # Note [In-place view ops keep their argument's shape].
            self.values[written] = self.values[written].as_strided(*layout)
        self.values[node] = value
        return value


# Note [In-place view ops keep their argument's shape]: an in-place view op
# (squeeze_, unsqueeze_, t_, transpose_, as_strided_) changes the sizes of the
# tensor object it is given, not only of the value it returns, and the
# recorder's run keeps both as that one object. PyTorch's matmul of a 1-D
# operand is `x.unsqueeze(0).mm(w).squeeze_(0)`, and the squeeze_ stays in a
# plain make_fx trace and in PyTorch 2.11's functionalized one (1.13's
# functionalization made it a squeeze): the mm node's recorded value was
# squeezed, so its converter saw [D] for an [1, D] product and the squeeze_
# looked like a no-op; the segment returned [1, D] where PyTorch has [D]
# (door fuzz seeds 92796 and 1035 on PyTorch 2.11). The recorder keeps the
# argument's value as a view with its sizes from before the op. Tests:
# InPlaceTest.test_an_in_place_view_op_leaves_its_argument_shape
# (tests/python/importer_ops_test.py), DoorFuzzTest's plain traces.
# Note [The import run follows the traced strides]
# A graph traced with fake tensors (PyTorch 2.x: dynamo, AOTAutograd) records
# each op's result strides from its meta function, and later ops were traced
# against those: a `view` of a transpose is valid there because the meta
# function said the result was channels-last. The real kernel may lay its
# result out otherwise (a CUDA depthwise convolution returns NCHW where the
# meta function follows its channels-last input), and the recorder's run of
# the graph then failed at that view ("view size is not compatible with input
# tensor's size and stride": HF SegFormer's Mix-FFN through the training
# door on an H100). The recorder gives the result of an op that creates new
# memory (no alias in its schema) the strides its traced value has, copying
# it when the kernel chose others: same values, and the later ops see the
# layout they were traced with. Views and in-place results keep their
# storage. So does a graph input nothing writes in place: AOTAutograd traces
# a backward's gradient with the layout the forward's output had (channels-last
# in HF ConvNeXtV2), and autograd may hand it over contiguous. Tests:
# ImporterTest.test_the_import_run_follows_the_traced_strides and
# ImporterTest.test_the_import_run_follows_an_inputs_traced_strides
# (tests/python/importer_test.py).
def _with_traced_strides(node, value):
    """`value` (a node's result in the recorder's run, or a graph input's
    example that nothing writes in place), or a copy of it with the strides of
    the node's traced value where they differ."""
    if node.op == "placeholder":
        if any(mutates_first_argument(user) for user in node.users):
            return value
        return _restrided(value, node.meta.get("val"))
    traced = node.meta.get("val") if node.op == "call_function" else None
    schema = getattr(node.target, "_schema", None)
    if traced is None or schema is None or any(
            result.alias_info is not None for result in schema.returns):
        return value
    if isinstance(value, (tuple, list)) and isinstance(traced, (tuple, list)) and \
            len(value) == len(traced):
        return type(value)(_restrided(item, like) for item, like in zip(value, traced))
    return _restrided(value, traced)


def _restrided(value, like):
    if not isinstance(value, torch.Tensor) or not isinstance(like, torch.Tensor) or \
            value.layout != torch.strided:
        return value
    shape, strides = tuple(like.shape), tuple(like.stride())
    if not all(type(number) is int for number in shape + strides) or \
            shape != tuple(value.shape) or strides == tuple(value.stride()) or \
            any(stride == 0 and size > 1 for size, stride in zip(shape, strides)):
        return value
    return laid_out(value, strides)


def _lifted_constant(node):
    """Whether `node` is a constant tracing lifted from the traced code (a
    get_attr _tensor_constant<i>: Note [Host tensors among a device graph's
    params])."""
    return node.op == "get_attr" and str(node.target).startswith("_tensor_constant")


def _layout(value):
    """(sizes, strides, storage offset) of a tensor value, else None."""
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return None
    return (tuple(value.shape), tuple(value.stride()), value.storage_offset())


# Note [The import run leaves the inputs alone]: the importer runs the graph
# once on the example inputs (the caller's own tensors: parameters, a KV
# cache) to learn every value's shape and dtype and to fold constants. A graph
# that updates an input in place (a static cache's index_copy_, a position
# counter's add_) would apply that update at import time too, and every later
# call would start from state advanced once more (HF's static-cache decode:
# wrong tokens in both modes). So inputs an in-place op writes (through any
# chain of views) are cloned for that run; the caller's tensors stay as they
# were, and params still bind the caller's tensors. Likewise PyTorch's random
# state: a random op the run executes (a dropout mask PyTorch draws between
# segments) would advance it, and the call that follows would draw another
# mask than eager PyTorch under the same seed (PyTorch 2.x's AOTAutograd
# imports a training graph on its first real call, outside its own
# preserve_rng_state), so the run forks it. Tests:
# ImporterTest.test_importing_a_graph_that_updates_an_input_in_place_leaves_it_alone,
# ImporterTest.test_the_import_run_leaves_the_random_state_alone.
mutated_placeholders = input_writes.mutated_placeholders


class Plan:
    """The import of one graph: segments and PyTorch nodes in graph order."""

    def __init__(self, module, steps, placeholders, static_positions, unsupported, output_arg,
                 name):
        self.module = module
        self.steps = steps  # ("grove", Segment) or ("torch", node)
        self.placeholders = placeholders
        self.static_positions = static_positions
        self.unsupported = unsupported  # [(node name, op name, reason)]
        self.output_arg = output_arg
        self.name = name

    def programs(self):
        return [segment_program(self.name, step) for kind, step in self.steps if kind == "grove"]

    def compile(self, backend="eager", device="sim", **options):
        return GraphRunner(self, backend=backend, device=device, **options)


_SKIPPED_CHECKS = {"aten._assert_tensor_metadata", "aten._assert_async", "aten._assert_scalar",
                   "aten.sym_constrain_range_for_size"}
# Queries of metadata with no effect (autograd's as_strided backward asks
# is_same_size and ignores the answer in the trace): left out where unread.
_UNREAD_QUERIES = {"aten.is_same_size"}
def supported_ops():
    return sorted(CONVERTERS)


class _Importer:
    def __init__(self, module, example_inputs, static_positions, strict, name, has_erf):
        self.module = module
        self.graph = module.graph
        self.strict = strict
        self.name = name
        self.has_erf = has_erf
        # Note [Writes into graph inputs] (input_writes.py).
        self.write_backs = write_backs(module.graph)
        written_attributes = {base for node in module.graph.nodes
                              for base in map(input_writes.view_base,
                                              input_writes.written_arguments(node))
                              if isinstance(base, torch.fx.Node) and base.op == "get_attr"}
        recorder = _Recorder(module, {node.target for node in written_attributes})
        # Note [The import run leaves the inputs alone].
        mutated = mutated_placeholders(module.graph)
        placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
        run_inputs = [value.clone() if node in mutated and isinstance(value, torch.Tensor)
                      else value for node, value in zip(placeholders, example_inputs)]
        with torch.no_grad(), input_writes.random_state_kept(example_inputs):
            recorder.run(*run_inputs)
        self.values = recorder.values
        for node, value in zip(placeholders, example_inputs):
            self.values[node] = value  # params bind the caller's tensors, not the copies
        for node in written_attributes:
            self.values[node] = _attribute(module, node.target)
        self.before_write = recorder.before_write
        # See Note [Random draws run first] (random_draws.py).
        if random_draws.draws_first(self.graph, self.values, draws_random_numbers) and \
                hasattr(module, "recompile"):
            module.recompile()
        self.placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        devices = [value.device for value in example_inputs if isinstance(value, torch.Tensor)]
        # A host tensor among device inputs (HF's cache counter before its
        # first move to the GPU) does not decide where constants live.
        accelerated = [device for device in devices if device.type != "cpu"]
        self.device = (accelerated or devices or [torch.device("cpu")])[0]
        self.static_positions = set(static_positions)
        self.static_nodes = {self.placeholders[i] for i in self.static_positions}
        self.dynamic = set()  # nodes that depend on a per-call input or a param
        self.torch_nodes = set()
        self.owner = {}  # fx node -> the Segment that computes it
        self.constants = {}  # fx node -> folded tensor
        self.host_constants = {}  # Note [Host tensors among a device graph's params]
        self.functional, self.in_torch = functionalize_inplace(self.graph, self.values,
                                                               CONVERTERS, self.write_backs)
        # Note [Writes into storage no input reaches]: folded, whatever they read.
        self.folded_writes = self._constant_storages(self.in_torch)
        self.in_torch -= self.folded_writes
        if self.functional and hasattr(module, "recompile"):
            module.recompile()  # its code follows the rewired reads

    def is_torch_node(self, node):
        return node in self.torch_nodes

    def constant(self, segment, tensor):
        segment.counter += 1
        name = "const.%d" % segment.counter
        segment.params[name] = (tensor, None)
        return name

    def name_in_segment(self, segment, node, position=None):
        if not isinstance(node, torch.fx.Node):
            raise Unsupported("a non-tensor operand %r" % (node,))
        key = (node, position)
        if key in segment.names:
            return segment.names[key]
        value = self.values[node] if position is None else self.values[node][position]
        if not isinstance(value, torch.Tensor):
            raise Unsupported("operand %s is not a tensor" % node.name)
        # Note [Values of dtypes grove does not hold]: an image of uint8, an
        # int8 or int16 tensor: the node reading it runs in PyTorch (a cast
        # to float, typically), and grove takes over from its result.
        dtype_name(value.dtype)
        grove_name = "v%d.%s" % (len(segment.names), node.name)
        if node.op == "get_attr" or node in self.static_nodes:
            if value.device != self.device:
                # Note [Host tensors among a device graph's params]
                segment.params[grove_name] = (self._lifted_host_constant(node, value), None)
            else:
                segment.params[grove_name] = (value, node)
        elif node in self.constants:
            constant = self.constants[node]
            if constant.device != self.device:
                # A constant PyTorch made on the host (a 0-d scalar tensor, say)
                # joins the graph's device: the importer owns it, so moving it
                # copies nothing of the caller's.
                constant = constant.to(self.device)
                self.constants[node] = constant
            if not constant.is_contiguous():
                # A folded view (an expanded ones_like, say): grove binds
                # contiguous memory, and the importer owns this copy.
                constant = constant.contiguous()
                self.constants[node] = constant
            segment.params[grove_name] = (constant, None)
        else:
            if position is not None:
                raise Unsupported("an element of a tuple made outside the segment")
            node.meta["grove_value"] = value
            segment.inputs.append((grove_name, node))
        segment.names[key] = grove_name
        return grove_name

    # Note [Host tensors among a device graph's params]: a graph on the GPU
    # may hold a tensor on the host: a constant the model makes in its forward
    # (DeBERTa's torch.tensor(scale), torchvision Swin's masks' fill value),
    # which tracing lifts as a get_attr named _tensor_constant<i>, and which
    # PyTorch reads as a scalar. grove binds params by address, and a device
    # program cannot read host memory, so such a lifted constant is copied to
    # the graph's device once, at import: the importer owns the copy, and
    # nothing else can write the original (it belongs to the traced graph,
    # which makes it afresh with lift_fresh_copy). Any other host tensor among
    # a device graph's params (a module's buffer left on the host, a static
    # input there) stays the caller's: binding a copy would miss its later
    # writes, so the ops reading it run in PyTorch, which reads it each call.
    # Test: ImporterTest.test_host_tensors_among_device_params (tests/python/
    # importer_test.py) and gpu_zoo_test's host scalar case on cuda.
    def _lifted_host_constant(self, node, value):
        """The device copy of the lifted host constant `node` (Note [Host
        tensors among a device graph's params]); Unsupported for any other
        host tensor."""
        if not _lifted_constant(node):
            raise Unsupported("%s is a tensor on %s in a graph on %s; the ops reading it run "
                              "in PyTorch" % (node.name, value.device, self.device))
        moved = self.host_constants.get(node)
        if moved is None:
            moved = value.to(self.device).contiguous()
            self.host_constants[node] = moved
        return moved

    # Note [Writes into storage no input reaches]: torchvision's Swin builds
    # its shifted-window mask by writing numbers into slices of new_zeros
    # (attn_mask[h0:h1, w0:w1] = count) at every call; each number reaches
    # the trace as a lifted constant (a get_attr _tensor_constant<i> that
    # lift_fresh_copy makes afresh: no input, and nothing writes it). The writes are in place
    # on views, so they ran in PyTorch (nine fill_ kernels, their slices and
    # views: 20 replays a call), yet nothing in that storage depends on an
    # input: the sizes are fixed per compilation. Where no node sharing a
    # written storage depends on an input (and none is an input, a parameter
    # or a lifted attribute), its nodes fold as constants instead, each the
    # value the import run recorded before any later write (Note [In-place
    # ops on intermediates]); a storage an input reaches still runs in
    # PyTorch, so no folded constant is ever written, and so does one the
    # graph returns (the caller gets a new tensor each call, as before). Test:
    # InPlaceTest.test_writes_into_a_mask_no_input_reaches_fold (tests/python/
    # importer_ops_test.py).
    def _constant_storages(self, in_torch):
        """The nodes of `in_torch` whose written storage no input reaches."""
        dynamic = set()
        for node in self.graph.nodes:
            if node.op == "output" or _lifted_constant(node):
                continue
            if node.op != "call_function" or self.depends_on_inputs(node, dynamic):
                dynamic.add(node)
        by_storage = {}
        for node in self.graph.nodes:
            key = storage_key(self.values.get(node))
            if key is not None:
                by_storage.setdefault(key, []).append(node)
        folded = set()
        for key, nodes in by_storage.items():
            if any(node in in_torch for node in nodes) and not any(
                    node in dynamic or any(user.op == "output" for user in node.users)
                    for node in nodes):
                folded.update(node for node in nodes if node in in_torch)
        return folded

    def depends_on_inputs(self, node, dynamic=None):
        """Whether `node` reads a node of `dynamic` (default: the nodes the
        import has found to depend on a per-call input or a param so far)."""
        if draws_random_numbers(node):
            return True  # Note [Random draws are never constants]
        if op_name(node.target) in _METADATA_ONLY:
            return False  # reads its argument's shape, dtype and device, fixed per compilation
        dynamic = self.dynamic if dynamic is None else dynamic
        return any(arg in dynamic for arg in node.all_input_nodes)

    def run(self):
        steps = []
        segment = None
        unsupported = []
        for node in self.graph.nodes:
            if node.op in ("placeholder", "get_attr"):
                self.dynamic.add(node)
                if node.op == "placeholder":
                    node.meta["grove_example"] = self.values.get(node)
                continue
            if node.op == "output":
                break
            if node.op != "call_function":
                reason = "%s nodes are not imported" % node.op
                unsupported.append((node.name, node.op, reason))
                self.torch_nodes.add(node)
                self.dynamic.add(node)
                steps.append(("torch", node))
                segment = None
                continue
            if not node.users and node not in self.write_backs and (
                    op_name(node.target) in CONVERTERS
                                   or op_name(node.target) in _SKIPPED_CHECKS
                                   or op_name(node.target) in _UNREAD_QUERIES
                                   or op_name(node.target) == "getitem"
                                   or _unread_draw(node)):
                # A pure result nobody reads (a layer norm's mean, say), a
                # metadata assertion the compiled program's fixed types make
                # moot, or Note [Random draws nobody reads].
                continue
            if node in self.in_torch:
                # PyTorch writes this storage (Note [In-place ops on intermediates]).
                name = op_name(node.target)
                reason = "its storage is written in place in PyTorch"
                if self.strict:
                    raise StrictModeError("grove (strict): node '%s' (%s) is not supported: %s"
                                          % (node.name, name, reason))
                unsupported.append((node.name, name, reason))
                self.torch_nodes.add(node)
                self.dynamic.add(node)
                steps.append(("torch", node))
                segment = None
                continue
            if value_kinds.no_elements(self.values.get(node)) and node not in self.write_backs:
                self.constants[node] = self.values[node]  # Note [Values with no elements]
                continue
            if node in self.folded_writes or not self.depends_on_inputs(node):
                value = self.before_write.get(node, self.values[node])
                if isinstance(value, torch.Tensor):
                    self.constants[node] = value  # computed once, bound as a constant
                    continue
            self.dynamic.add(node)
            try:
                value_kinds.check_operands(self.values, node)
                if segment is None:
                    segment = Segment(sum(1 for kind, _ in steps if kind == "grove"))
                    steps.append(("grove", segment))
                self.convert(segment, node)
            except (Unsupported, *_CONVERTER_ERRORS) as error:
                reason = error
                if not isinstance(error, Unsupported):
                    # Note [A converter that fails leaves its node to PyTorch]
                    reason = "grove's converter failed (%s: %s)" % (type(error).__name__, error)
                    log.warning("grove: converting node '%s' (%s) failed: %s; it runs in "
                                "PyTorch", node.name, op_name(node.target), reason)
                name = op_name(node.target)
                if self.strict:
                    raise StrictModeError(
                        "grove (strict): node '%s' (%s) is not supported: %s"
                        % (node.name, name, reason)) from None
                unsupported.append((node.name, name, str(reason)))
                log.info("unsupported op %s at node '%s' (%s): runs in PyTorch", name,
                         node.name, reason)
                self.torch_nodes.add(node)
                steps.append(("torch", node))
                segment = None
        steps = [(kind, step) for kind, step in steps
                 if kind == "torch" or step.program_nodes or step.nodes]
        self.finish_segments(steps)
        self.note_layouts_read(steps)
        output = next(n for n in self.graph.nodes if n.op == "output")
        plan = Plan(self.module, steps, self.placeholders, self.static_positions, unsupported,
                    output.args[0], self.name)
        plan.constants = dict(self.constants)
        return plan

    def note_layouts_read(self, steps):
        """Note [Layouts a PyTorch step reads]: each step left to PyTorch whose
        op reads memory by strides keeps the layout its tensor arguments had
        in the import run."""
        for kind, node in steps:
            if kind != "torch" or not (op_name(getattr(node, "target", None)) in _READS_LAYOUT
                                       or draws_random_numbers(node)):
                continue
            layouts = {}
            for arg in node.all_input_nodes:
                value = self.values.get(arg)
                if isinstance(value, torch.Tensor) and value.layout == torch.strided:
                    layouts[arg] = (tuple(value.stride()), int(value.storage_offset()))
            node.meta["grove_layouts_read"] = layouts
            self.check_window_inside(node)

    def check_window_inside(self, node):
        """Note [Layouts a PyTorch step reads]: an as_strided step over a
        value grove computes reads only that value's elements."""
        if op_name(node.target) != "aten.as_strided" or not node.args:
            return
        source = node.args[0]
        value = self.values.get(source)
        if source not in self.owner or not isinstance(value, torch.Tensor):
            return
        a = node_arguments(node)
        if strided_window_ids(value, a["size"], a["stride"], a.get("storage_offset")) is None:
            raise StorageOutsideOperandError(
                "grove: %s (aten.as_strided, left to PyTorch) reads memory outside the elements "
                "of '%s', which grove computes without that memory around it"
                % (node.name, source.name))

    def convert(self, segment, node):
        name = op_name(node.target)
        if name == "getitem":
            source, position = node.args
            if source not in segment.nodes:
                raise Unsupported("getitem of a value made outside the segment")
            picked = segment.names.get((source, position))
            if picked is None:
                raise Unsupported("element %d of %s" % (position, op_name(source.target)))
            segment.names[(node, None)] = picked
            segment.nodes.append(node)
            self.owner[node] = segment
            return
        converter = CONVERTERS.get(name)
        if node in self.write_backs:
            converter = _write_back
        elif node in self.functional:
            converter = CONVERTERS[name[:-1]]  # Note [In-place ops on intermediates]
        if converter is None:
            raise Unsupported("no importer for %s" % name)
        value = self.values[node]
        if isinstance(value, (tuple, list)):
            # Only the elements read need a grove dtype (cudnn_batch_norm's
            # uint8 reserve space is never read).
            read = {user.args[1] for user in node.users
                    if op_name(user.target) == "getitem" and user.users}
            tensors = [item for position, item in enumerate(value) if position in read]
        else:
            tensors = [value]
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor):
                dtype_name(tensor.dtype)
        if isinstance(value, (tuple, list)):
            for user in node.users:
                if op_name(user.target) != "getitem":
                    raise Unsupported("a tuple result used whole")
        # Converters emit into the segment only when they succeed.
        saved = (len(segment.program_nodes), dict(segment.names), list(segment.inputs),
                 dict(segment.params), segment.counter)
        try:
            result = converter(_Converter(self, segment, node), node_arguments(node))
            value_kinds.check_gemm_dtypes(self.values, node, segment.program_nodes[saved[0]:])
        except (Unsupported, *_CONVERTER_ERRORS):
            (count, names, inputs, params, counter) = saved
            del segment.program_nodes[count:]
            segment.names, segment.inputs, segment.params = names, inputs, params
            segment.counter = counter
            raise
        if isinstance(result, tuple):
            wanted = {user.args[1] for user in node.users if user.users}  # live reads
            missing = sorted(p for p in wanted if p >= len(result) or result[p] is None)
            if missing:
                (count, names, inputs, params, counter) = saved
                del segment.program_nodes[count:]
                segment.names, segment.inputs, segment.params = names, inputs, params
                segment.counter = counter
                raise Unsupported("element(s) %s of its result are read" % missing)
            for position, item in enumerate(result):
                if item is not None:
                    segment.names[(node, position)] = item
        else:
            segment.names[(node, None)] = result
        segment.nodes.append(node)
        self.owner[node] = segment

    def finish_segments(self, steps):
        """Each segment returns the values used after it (by later steps or
        the graph's output)."""
        order = {node: i for i, node in enumerate(self.graph.nodes)}
        for kind, segment in steps:
            if kind != "grove":
                continue
            last = max(order[n] for n in segment.nodes)
            outputs = []
            for node in segment.nodes:
                if op_name(node.target) != "getitem" and isinstance(self.values[node], tuple):
                    continue
                if any(order[user] > last or user.op == "output" for user in node.users):
                    outputs.append((node, None))
            # A value that is a program input or param passes through a view.
            for node, position in outputs:
                grove_name = segment.names[(node, position)]
                passthrough = any(grove_name == n for n, _ in segment.inputs) or \
                    grove_name in segment.params
                if passthrough:
                    shape = list(self.values[node].shape)
                    segment.counter += 1
                    new = "%s.out%d" % (node.name, segment.counter)
                    segment.program_nodes.append({"name": new, "op": "reshape",
                                                  "inputs": [grove_name],
                                                  "attrs": {"shape": shape}})
                    segment.names[(node, position)] = new
            segment.outputs = outputs


def _write_back(c, a):
    """aten.copy_ of a whole graph input as grove's copy_into (Note [Writes
    into graph inputs]): in place in a bound static input, else in the
    program's input (copied back by the graph tree)."""
    destination = c.value(a["self"])
    if not destination.is_contiguous():
        raise Unsupported("a write into a non-contiguous input")
    target = c.tensor(a["self"])
    return c.emit("copy_into", [target, c.operand(a["src"], destination.dtype)])


def _attribute(module, target):
    value = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


def import_graph(module, example_inputs, static_inputs=(), strict=False, name="fx",
                 has_erf=True):
    """Imports an fx GraphModule at the ATen level into a Plan. static_inputs:
    positions of placeholders bound as params (never copied, address checked);
    strict: raise StrictModeError naming the first op grove cannot take."""
    return _Importer(module, example_inputs, static_inputs, strict, name, has_erf).run()
