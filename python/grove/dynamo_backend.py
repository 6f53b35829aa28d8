"""The torch.compile backend's work behind grove.torch (which registers it
and re-exports these names): dynamo's graphs traced to ATen, imported and run
through grove (compile_graph), per concrete shape where sizes are symbolic
(PerShapeGraph), and graphs that need gradients handed to AOTAutograd with
grove's stage compilers (training_steps.py). grove.training and grove.ddp
build on this module, never on grove.torch, so that grove.torch may re-export
them without an import cycle.
"""

import gc
import operator
import os
import weakref

import torch

import grove
from grove import _capi
from grove import aliased_writes
from grove import importer
from grove import input_writes
from grove import kept_attention
from grove import parameter_views
from grove.runner import StaticInputMovedError

log = importer.log

_MODES = {"cudagraphs": "cudagraphs", "eager": "eager"}
_OPTIONS = ("mode", "strict", "device", "verify", "reuse_state")
_live_runners = weakref.WeakSet()
_compiled = []  # weak references to every CompiledGraph, oldest first


def compiled_graphs():
    """The graphs this backend compiled that are still alive, oldest first."""
    alive = [reference() for reference in _compiled]
    _compiled[:] = [reference for reference, graph in zip(list(_compiled), alive)
                    if graph is not None]
    return [graph for graph in alive if graph is not None]


# Note [Dynamo's generation names an invocation only for dynamo's calls]
# Entering a torch.compile'd function advances dynamo's generation counter
# (torch._dynamo.mutation_guard.GenerationTracker), so the graphs one
# top-level call runs share a generation and the next call starts a new one.
# Nothing else advances it: a graph called directly (compile_graph, as
# grove.training and the tests call it) would read the same number at every
# call and run all its calls as one invocation, each call recorded as a child
# of the previous one (a decode loop: a tree node per step, never a replay).
# So only the graphs the backend compiled for dynamo (grove_backend) key
# their calls by it; a direct call opens an invocation of its own, with or
# without dynamo in the PyTorch build.
# Test: StaticCacheDecodeTest (tests/python/static_cache_decode_test.py: one
# recording per graph on PyTorch 2.x, where dynamo exists) and
# DynamoBackendTest.test_dynamo_calls_share_an_invocation_only_from_the_backend
# (tests/python/importer_test.py).
def _dynamo_invocation_key():
    """A key naming dynamo's current top-level compiled call (its generation
    counter, which PyTorch's cudagraph trees use the same way), or None
    without dynamo. Only for graphs dynamo calls (Note [Dynamo's generation
    names an invocation only for dynamo's calls])."""
    global _GENERATION_TRACKER
    if _GENERATION_TRACKER is None:
        try:
            from torch._dynamo.mutation_guard import GenerationTracker
        except ImportError:
            GenerationTracker = False
        _GENERATION_TRACKER = GenerationTracker
    if not _GENERATION_TRACKER:
        return None
    generation = getattr(_GENERATION_TRACKER, "generation", None)
    return None if generation is None else 1 + (int(generation) & 0x3FFFFFFFFFFFFFFF)


_GENERATION_TRACKER = None


def _in_dynamos_invocation(invoked, call, args):
    """call(args), inside dynamo's current invocation where `invoked` (a graph
    dynamo calls) and dynamo exists: Note [Invocations of several models],
    dynamo's graphs of one top-level call (around a graph break) share one
    generation, as in PyTorch's cudagraph trees."""
    key = _dynamo_invocation_key() if invoked else None
    if key is None:
        return call(args)
    with grove.invocation(key):
        return call(args)


def mark_step_begin():
    """Starts a new step for every graph grove compiled: outputs of earlier
    calls may be overwritten by later ones (torch.compiler.cudagraph_mark_step_begin)."""
    for runner in list(_live_runners):
        runner.mark_step_begin()


def _static_positions(example_inputs):
    positions = []
    for index, value in enumerate(example_inputs):
        if isinstance(value, torch.nn.Parameter) or getattr(
                value, "_dynamo_static_input_type", None) is not None:
            positions.append(index)
    return positions


# Note [Static inputs that move]
# A static input (a parameter, buffer or mark_static_address tensor: bound as
# a param, never copied) that comes at another address than at compilation (a
# cache HF's generate makes again for each sequence, grove's own copy of a
# cache made inside a graph, Note [State outputs leave the pool]) is demoted:
# the graph is traced, imported and compiled once more with that input bound
# per call, logged. A per-call input is one of the graph tree's copied inputs:
# read where it lies when the tree can patch the kernels (Note [Zero-copy
# inputs], zero_copy.h), else copied in; one the graph writes is written in
# the caller's tensor, directly when zero-copied, else by the tree's copy-back
# after each replay (Note [Writes into graph inputs]). On sim every graph is
# patchable; a CUDA graph with library (cuBLAS) nodes is not (Note [Zero-copy
# inputs], rule 1), so there a demoted cache is copied in and back whole at
# every replay: cheap for a small model's cache, a cost that grows with the
# cache (the open part of issue 33, part 4). Every input that moved
# is demoted at once and a demoted input never moves again, so a graph
# compiles at most once more per static input and later sequences cost no
# compilation and meet no limit (PyTorch's cudagraph trees record again at
# every move instead, up to a limit).
# Tests: DynamoBackendTest.test_a_static_input_that_moves_is_demoted_once
# (tests/python/importer_test.py, sim, a written cache moved twelve times:
# no recording, copy in or copy-back after the demotion) and
# GpuDecodeTest (tests/python/gpu_decode_test.py, ten generate calls).
# Note [Graphs that read values as numbers run in PyTorch]
# A dynamo graph can use a tensor's value as a Python number where dynamo
# kept it a tensor (HF Longformer's query.view(4, n // 8, 8, 32), n a 0-d
# tensor): tracing it to ATen ops with make_fx stops at the value
# (aten._local_scalar_dense of a tracing tensor). Such a graph is left to
# PyTorch whole, with a warning that says why, and is listed among the
# compiled graphs with that reason as its one op left to PyTorch, instead of
# failing the user's torch.compile (BackendCompilerFailed, the survey's
# Longformer on an H200). strict=True still raises. Test:
# DynamoBackendTest.test_a_graph_reading_a_value_as_a_number_runs_in_pytorch
# (tests/python/importer_test.py).
def _reads_a_value_as_a_number(error):
    text = str(error)
    return "_local_scalar_dense" in text or "data-dependent" in text


# Note [A graph grove's compiler refuses runs in PyTorch]: the importer
# leaves each op it cannot take to PyTorch, but grove's compiler may still
# refuse the program it imported (a combination of shapes or dtypes a
# converter let through). Under dynamo such a graph runs in PyTorch whole,
# with a warning naming the compiler's message, as a graph that reads values
# as numbers does, instead of failing the user's torch.compile
# (BackendCompilerFailed); strict=True and grove.torch.compile_graph's direct
# callers still get the error. Test:
# DynamoBackendTest.test_a_graph_grove_cannot_compile_runs_in_pytorch
# (tests/python/importer_test.py).
class GraphInPyTorch:
    """A dynamo graph grove leaves to PyTorch whole (Note [Graphs that read
    values as numbers run in PyTorch])."""

    def __init__(self, gm, reason):
        log.warning("grove: a graph runs in PyTorch: %s", reason)
        self.gm = gm
        self.unsupported = [("graph", "the whole graph", reason)]
        _compiled.append(weakref.ref(self))

    def __call__(self, *args):
        return self.gm(*args)


# Note [Outputs taken back after their generation]: under torch.compile every
# top-level compiled call starts a new generation of the CUDA graph tree, as
# in PyTorch's reduce-overhead mode, and the pool memory of the previous
# generation's outputs is reclaimed. A program that keeps such an output and
# passes it to a later call (Hugging Face's default, growing KV cache: each
# step's keys are the concatenation a compiled call returned) gets grove's
# StaleOutputError once it replays a length it met before (a first generate
# meets each length in a warm-up, whose outputs leave the pool), where
# reduce-overhead raises its "accessing tensor output of CUDAGraphs that has
# been overwritten" at once. The door adds what to do to the
# message: a static cache (Hugging Face's cache_implementation="static"),
# which the graphs write in place, or a clone of the output.
# Test: GpuUserScenariosTest.test_a_growing_cache_is_refused_naming_the_static_cache
# (tests/python/gpu_user_scenarios_test.py).
_RECLAIMED = "lies in pool memory that no live output owns"
_TAKEN_BACK = (". Under torch.compile each top-level call is a new generation, as in "
               "PyTorch's reduce-overhead mode: a tensor one call returned and a later call "
               "takes back (a growing KV cache) must be cloned first; for Hugging Face's "
               "generate, use a static cache (cache_implementation=\"static\"), which the "
               "graphs update in place")


def _with_what_to_do(error):
    """Note [Outputs taken back after their generation]: the error, with the
    door's advice where an input was an output of an ended generation."""
    if _RECLAIMED not in str(error):
        return error
    return _capi.StaleOutputError(error.status, str(error) + _TAKEN_BACK)


class CompiledGraph:
    """What the backend returns to dynamo: a callable over the graph's inputs
    (Note [Static inputs that move])."""

    def __init__(self, runner, rebuild=None, from_dynamo=False, guarded=frozenset(),
                 in_pytorch=None):
        # Note [Dynamo's generation names an invocation only for dynamo's calls]
        self.from_dynamo = from_dynamo
        self.rebuild = rebuild  # (args, demoted positions) -> a runner
        self.rebuilds = 0
        self.demoted = set()  # positions of static inputs bound per call since they moved
        # Note [Parameters checked by dynamo's guards]: positions dynamo checks.
        self.guarded = frozenset(guarded)
        # The graph run in PyTorch, for the calls whose inputs overlap a
        # written one (Note [Inputs that share memory with a written input]).
        self.in_pytorch = in_pytorch
        self._overlap_warned = False
        self._use_runner(runner)
        _compiled.append(weakref.ref(self))

    def _use_runner(self, runner):
        previous = getattr(self, "runner", None)
        if previous is not None and not runner.host_positions:
            # A rebuild (Note [Static inputs that move]) is traced from the
            # arguments already on the device (Note [Host tensors passed to a
            # device graph]): the positions stay the first build's.
            runner.host_positions = previous.host_positions
        self.runner = runner
        written = runner.written_positions
        self._overlap = (aliased_writes.WrittenInputOverlap(
            written, [position for position, _ in runner.bound_positions()])
            if written and self.in_pytorch is not None else None)
        runner.leave_checks_to_guards(self.guarded)
        _live_runners.add(runner)
        # Note [One Python call per door call] (runner.py): made once the
        # runner's verified calls are done; None until then, or for good.
        self.door = None
        self._door_pending = True
        # Note [Dynamo's generation names an invocation only for dynamo's calls]
        self._invoked = self.from_dynamo and runner.backend != "eager"

    def __call__(self, *args):
        if self._overlap is not None:
            overlapping = self._overlap(args)
            if overlapping is not None:
                return self._run_in_pytorch(args, overlapping)
        host = self.runner.host_positions
        if host:  # Note [Host tensors passed to a device graph]
            args = _on_device(args, host, self.runner.device)
        door = self.door
        if door is not None:
            try:
                return door(args, _dynamo_invocation_key() if self._invoked else None)
            except StaticInputMovedError:
                pass  # nothing ran: the layered call below rebuilds
            except _capi.StaleOutputError as error:
                raise _with_what_to_do(error) from None
        try:
            return self._layered_call(args)
        except _capi.StaleOutputError as error:
            raise _with_what_to_do(error) from None
        finally:
            if self._door_pending and (self.runner.verified_calls
                                       >= self.runner.calls_to_verify):
                self._door_pending = False
                self.door = self.runner.door_call()

    def _run_in_pytorch(self, args, overlapping):
        """Note [Inputs that share memory with a written input]."""
        if not self._overlap_warned:
            self._overlap_warned = True
            log.warning("grove: input(s) %s share memory with an input the graph writes in "
                        "place; such calls run the graph in PyTorch (Note [Inputs that share "
                        "memory with a written input])", ", ".join(map(str, overlapping)))
        return self.in_pytorch(*args)

    def _layered_call(self, args):
        return _in_dynamos_invocation(self._invoked, self._call, args)

    def _call(self, args):
        try:
            return self._run(args)
        except StaticInputMovedError:
            moved = set(self.runner.moved_static_positions(args)) - self.demoted
            if self.rebuild is None or not moved:
                raise
            self.rebuilds += 1
            self.demoted |= moved
            log.warning("grove: static input(s) %s moved (data pointer changed since "
                        "compilation): bound per call from now on; the graph compiles once "
                        "more, never again for their moves",
                        ", ".join("%d %s" % (position, list(args[position].shape))
                                  for position in sorted(moved)))
            self._use_runner(self.rebuild(args, self.demoted))
            return self._run(args)

    def _run(self, args):
        if self.runner._fast is not None:
            return self.runner(*args)  # grove alone: no autograd to switch off
        with torch.no_grad():
            return self.runner(*args)

    @property
    def unsupported(self):
        return self.runner.unsupported


# Note [Host tensors passed to a device graph]
# PyTorch takes a CPU scalar tensor beside CUDA tensors (x * torch.tensor(2.0),
# a step count or temperature kept on the host), and dynamo passes it to the
# graph as an input. grove's programs take their inputs on the graph's
# device, so such a call failed ("expects a tensor on cuda:0, found one on
# cpu"), where reduce-overhead runs the graph without CUDA graphs. A CPU
# tensor input of a CUDA graph that the graph does not write and does not
# bind (not a static input) is now copied to the device at each call (a few
# bytes for a scalar) and the graph compiled for it there; one the graph
# writes in place keeps the clear error, since a copy would lose the write.
# A rebuild keeps the first build's positions (its arguments are on the
# device already). Tests: GpuTorchBackendTest.test_a_cpu_scalar_tensor_beside_cuda_inputs
# (tests/python/gpu_torch_backend_test.py), HostTensorsTest (importer_test.py, sim).
def _host_positions(graph, examples, static, device):
    if not str(device).startswith("cuda"):
        return ()
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    written = input_writes.mutated_placeholders(graph)  # write-backs (copy_) included
    return tuple(position for position, value in enumerate(examples)
                 if isinstance(value, torch.Tensor) and value.device.type == "cpu"
                 and position not in static and position < len(placeholders)
                 and placeholders[position] not in written)


def _on_device(args, positions, device):
    if not positions:
        return args
    moved = list(args)
    for position in positions:
        moved[position] = moved[position].to(device)
    return type(args)(moved) if isinstance(args, tuple) else moved


def compile_graph(gm, example_inputs, mode="cudagraphs", strict=False, device=None, verify=None,
                  reuse_state=False):
    """Compiles an fx GraphModule (or any function make_fx can trace) for its
    example inputs, to be called directly: each call is an invocation of its
    own (grove.invocation groups several). reuse_state: Note [Reused state
    copies] (runner.py)."""
    return _compile_graph(gm, example_inputs, False, mode, strict, device, verify, reuse_state)


def _compile_graph(gm, example_inputs, from_dynamo, mode="cudagraphs", strict=False, device=None,
                   verify=None, reuse_state=False, defer_out_of_memory=True):
    """compile_graph's work; from_dynamo: the graph is dynamo's, called from
    its compiled frames (Note [Dynamo's generation names an invocation only
    for dynamo's calls]). defer_out_of_memory: Note [Out of memory while
    compiling waits for the first call]."""
    if mode not in _MODES:
        raise ValueError("grove: option mode=%r; use 'cudagraphs' or 'eager'" % (mode,))
    if not all(isinstance(value, torch.Tensor) for value in example_inputs) or \
            host_scalar_positions(gm, example_inputs):
        # Symbolic sizes (dynamic=True, or dynamo's automatic dynamic shapes):
        # one grove compilation per concrete shape, on first use; and per
        # value of the host scalars the graph reads (Note [Host scalars
        # specialized per value]).
        return PerShapeGraph(gm, mode, strict, device, verify, reuse_state, from_dynamo)
    if torch.is_grad_enabled() and any(value.requires_grad for value in example_inputs):
        return _training_graph(gm, example_inputs, mode, strict, device, from_dynamo)
    if device is None:
        cuda = [value for value in example_inputs if value.is_cuda]
        device = "cuda:%d" % (cuda[0].device.index or 0) if cuda else "sim"
    # Note [Attention kept whole through tracing] (kept_attention.py).
    kept_attention.keep_attention(gm)

    def build(examples, demoted=()):
        # Note [Writes into graph inputs]: a graph that updates its inputs is
        # traced functionalized; the tensors it writes and returns are state.
        aten, state_positions = input_writes.aten_graph(gm, examples)
        # Which inputs it writes (Note [Inputs that share memory with a written
        # input], aliased_writes.py).
        mutated = input_writes.mutated_placeholders(aten.graph)
        written = [position for position, node in enumerate(
            node for node in aten.graph.nodes if node.op == "placeholder") if node in mutated]
        # Note [Static inputs that move]: the demoted inputs are bound per call.
        static = [position for position in _static_positions(examples)
                  if position not in demoted]
        host = _host_positions(aten.graph, examples, static, device)
        examples = _on_device(examples, host, device)
        # Note [Static inputs in a permuted layout] (parameter_views.py).
        aten, examples, static = parameter_views.bound_as_bases(aten, examples, static)
        plan = importer.import_graph(aten, examples, static_inputs=static, strict=strict,
                                     name="torch_graph")
        options = {}
        if demoted and "GROVE_SMALL_M_GEMM" not in os.environ:
            # Note [Patchable graphs for inputs that moved]: this compile's own choice.
            options["small_m_gemm"] = "on"
        runner = plan.compile(
            backend=_MODES[mode], device=device, verify=verify, reuse_state=reuse_state,
            state_outputs=input_writes.output_nodes_at(aten.graph, state_positions),
            # See Note [Warm-up outputs leave the pool] and Note [Outputs that alias inputs].
            warm_up_outputs_leave_pool=True, input_aliases=True, **options)
        runner.host_positions = host
        runner.written_positions = written
        return runner

    try:
        runner = build(list(example_inputs))
    except _out_of_memory_errors() as error:
        # Note [Out of memory while compiling waits for the first call]
        if not from_dynamo or not defer_out_of_memory:
            raise
        log.warning("grove: out of memory while compiling a graph (%s); it compiles at its first "
                    "call instead", str(error).splitlines()[0][:200])
        return PerShapeGraph(gm, mode, strict, device, verify, reuse_state, from_dynamo)
    except importer.StorageOutsideOperandError as error:
        if not from_dynamo or strict:
            raise
        return GraphInPyTorch(gm, str(error))
    except _capi.GroveError as error:
        # Note [A graph grove's compiler refuses runs in PyTorch]
        if not from_dynamo or strict or not str(error).startswith("grove_compile"):
            raise
        return GraphInPyTorch(gm, "grove's compiler refused it (%s)" % str(error)[:300])
    except RuntimeError as error:
        if not from_dynamo or strict or not _reads_a_value_as_a_number(error):
            raise
        return GraphInPyTorch(gm, "tracing it to ATen read a tensor's value as a Python "
                              "number (%s)" % str(error).splitlines()[0][:200])
    guarded = _guard_bound_parameters(gm, example_inputs, runner) if from_dynamo else ()
    return CompiledGraph(runner, rebuild=lambda args, demoted: build(list(args), demoted),
                         from_dynamo=from_dynamo, guarded=guarded, in_pytorch=gm)


# Note [Parameters checked by dynamo's guards]
# Every door call checks that the static inputs the graph binds are still at
# their compiled addresses (Note [Static inputs that move], Note [Static
# input check by one map], runner.py). Inside a door call that check took
# 9-17 us for BERT's 39, LLaMA's 22 and GPT-2's 28 bound inputs (session 23,
# r1, H200: door_split's door_no_static_check), a tenth of the call: a
# Python call of Tensor.data_ptr per parameter, each reaching memory that
# dynamo's own work had pushed out of the caches. Dynamo checks every frame
# input with its guards in C++ anyway, and it has a guard for exactly this
# question, DATA_PTR_MATCH (what mark_static_address(guard=True) installs).
# So a graph compiled for dynamo installs that guard on each bound input
# that is an nn.Parameter with a source dynamo knows, while dynamo's
# tracing context is open (the guards of a frame are built after its
# backend returns), and leaves those inputs out of its own check. A
# parameter that moves (a `.data` swap, a second instance of the model)
# then fails its frame's guards and dynamo compiles the frame again, grove
# binding the new addresses, as for any other guard (a parameter given new
# storage at every call would compile again until dynamo's recompile limit,
# where grove's check demotes it once); other static inputs
# (buffers, caches marked static: HF's generate makes new ones for every
# sequence) stay in grove's check and are demoted when they move. Where
# no guard can be installed (no tracing context: PerShapeGraph compiles at
# its first call; a PyTorch without these names) grove checks them all, as
# before. Opt-in (GROVE_DOOR_STATIC_CHECK=guards, read at compilation) until
# it is shown a win on the GPU: its session 23 r2 run installed no guard on
# PyTorch 2.11 (the first version imported install_guard, which that PyTorch
# may keep elsewhere; it now adds to the tracing context's guards directly).
# Test: DoorCallTest.test_bound_parameters_are_checked_by_dynamos_guards
# (tests/python/door_call_test.py, PyTorch 2.x).
def data_pointer_guards():
    """(GuardBuilder, TracingContext) of this PyTorch's dynamo, or None."""
    try:
        from torch._dynamo.guards import GuardBuilder
        from torch._guards import TracingContext
    except ImportError:
        return None
    if not hasattr(GuardBuilder, "DATA_PTR_MATCH") or not hasattr(TracingContext, "try_get"):
        return None
    return GuardBuilder, TracingContext


def _guard_bound_parameters(gm, example_inputs, runner):
    """The positions of the bound parameters dynamo now checks with a
    DATA_PTR_MATCH guard (Note [Parameters checked by dynamo's guards])."""
    if os.environ.get("GROVE_DOOR_STATIC_CHECK") != "guards":
        return frozenset()
    api = data_pointer_guards()
    if api is None:
        log.info("grove: GROVE_DOOR_STATIC_CHECK=guards, but this PyTorch lacks the dynamo "
                 "names it needs; grove checks the bound inputs itself")
        return frozenset()
    guard_builder, tracing_context = api
    context = tracing_context.try_get()
    if context is None:
        return frozenset()
    graph = getattr(gm, "graph", None)
    placeholders = [node for node in graph.nodes if node.op == "placeholder"] if graph else []
    if len(placeholders) != len(example_inputs):
        return frozenset()
    guarded = set()
    for position in sorted({position for position, _ in runner.bound_positions()}):
        node = placeholders[position]
        source = getattr(node.meta.get("grapharg"), "source", None)
        if source is None:
            source = getattr(node, "_dynamo_source", None)
        if source is None or not isinstance(example_inputs[position], torch.nn.Parameter):
            continue
        try:
            guard = source.make_guard(guard_builder.DATA_PTR_MATCH)
            context.guards_context.dynamo_guards.add(guard)
        except Exception as error:  # noqa: BLE001 (grove's own check stays)
            log.info("grove: no data pointer guard for input %d (%s); grove checks it",
                     position, error)
            continue
        guarded.add(position)
    return frozenset(guarded)


# Note [Patchable graphs for inputs that moved]: a graph rebuilt because
# static inputs moved binds them per call (Note [Static inputs that move]). A
# CUDA graph whose nodes are all grove kernels reads such an input where it
# lies, patched once per move (Note [Zero-copy inputs], zero_copy.h); a
# single library (cuBLAS) node makes the tree copy it in, and back when
# written, at every replay: a decode step's whole KV cache, twice per token.
# The GEMMs of a decode step have a row or a few (M <= 32), which grove's
# small-M kernel computes (attention is grove's own kernel: Note [Fused
# attention in the importer]), so the rebuild compiles with
# the compile option small_m_gemm="on" (that graph's models alone: the
# process's environment is never changed) unless the user set
# GROVE_SMALL_M_GEMM, which then decides. Results stay within
# the tests' tolerances of PyTorch's (the small-M kernel is what auto picks
# for most such GEMMs anyway). Tests: GpuDecodeTest and torch_zoo's decode
# rows (zero-copy inputs, input copies), DynamoBackendTest.
# test_a_static_input_that_moves_is_demoted_once (the rebuilt graph's GEMM).


def _training_graph(gm, example_inputs, mode, strict, device, from_dynamo=False):
    """A graph that needs gradients: AOTAutograd partitions it and grove
    compiles the forward and the backward as the tree's stages
    (grove.training). Without AOTAutograd (PyTorch 1.13's dynamo-less build)
    the graph runs in PyTorch, or strict raises."""
    try:
        from grove import training_steps

        backend, compiler = training_steps.aot_backend(mode, strict, device)
    except ImportError as error:
        if strict:
            raise importer.StrictModeError(
                "grove (strict): the graph needs gradients and this PyTorch has no "
                "AOTAutograd for dynamo (%s); use grove.training.compile_module" % error) from None
        log.info("graph runs in PyTorch: it needs gradients and AOTAutograd is missing")
        return getattr(gm, "forward", gm)
    gm = _as_graph_module(gm, example_inputs)
    # PyTorch's fused attention kernels (and their backwards) are not grove
    # ops; written out, attention trains in grove.
    training_steps.write_out_attention(gm)
    output = _single_value_output(gm)
    if output is not None:
        # AOTAutograd takes graphs that return a tuple (dynamo's always do).
        output.args = ((output.args[0],),)
        gm.recompile()
    single = output is not None

    made = [(backend, compiler)]  # the first compile's; each later one makes its own

    def compile_for_these_parameters(arguments=example_inputs):
        # Note [Training graphs per parameter set]: a later compile traces the
        # arguments of its own call.
        arguments = list(arguments)
        backend, compiler = (made.pop() if made
                             else training_steps.aot_backend(mode, strict, device))
        compiler.on_runner = _live_runners.add  # mark_step_begin reaches them
        compiled = backend(gm, arguments)
        aot = compiled if not single else (lambda *args: compiled(*args)[0])
        return _door_function(gm, arguments, compiler, aot, single=single)

    # Note [Training graphs per parameter set]
    return TrainingGraphs(compile_for_these_parameters(), compile_for_these_parameters,
                          invoked=from_dynamo and mode != "eager",
                          parameters=_static_positions(example_inputs), example=example_inputs)


# Note [Training graphs per parameter set]
# A training graph binds its parameters: read in place, never copied, their
# addresses checked at every call (Note [Saved parameters], training_steps.py).
# Dynamo hands one compiled graph to every module whose code and guards match,
# and on PyTorch 2.x parameters are the graph's inputs: a second instance of
# the same model class (a sweep, a fresh model in one process), or the next of
# a model's identical layers where a graph break cuts each (timm's
# Sequencer2D: an LSTM per block, 18 blocks; an MoE's experts), reaches the
# graph with other parameters, and the forward refuses them
# (StaticInputMovedError) before anything runs. TrainingGraphs then compiles
# the graph once more, bound to the new parameters (PyTorch's cudagraph trees
# record a new graph there too), and finds a call's graph by the addresses of
# its parameters (one dict lookup; the graph that ran last is tried first,
# without one), so layers called in turn each keep theirs at no search cost.
# A graph whose parameters are all gone (freed: replaced, not updated in
# place) is dropped when the next set compiles; past MOST_REPLACED such sets,
# or past MOST_PARAMETER_SETS live ones (PyTorch re-records a function up to
# 128 times, cudagraph_unexpected_rerecord_limit), the refusal is raised as it
# is, so parameters replaced at every step do not compile at every step. A
# bound input that is not among the parameters (the key) is found by trying
# the graphs in turn, as before the lookup. A later compile traces the
# arguments of the call that needs it: the first call's may be outputs of
# graphs whose memory the tree has reclaimed since (HF DeepSeek-V3's experts
# share one graph, and an expert first routed tokens at a later step compiled
# from a stale tensor). A graph compiled from fake tensors (the pieces of
# dynamo's DDP optimizer, Note [Fake calls of the door's function]) enters
# the lookup at its first refusal, not from its example, whose tensors have
# no addresses (PyTorch 2.11's data_ptr raises: torch.compile of a DDP model
# failed). Tests:
# DynamoBackendTest.test_training_graphs_are_found_by_their_parameters
# (tests/python/importer_test.py, no GPU: twelve sets in turn),
# GpuTorchTrainingTest.test_two_instances_of_one_model_train_apart,
# test_a_later_parameter_set_compiles_from_its_own_call
# (tests/python/gpu_torch_training_test.py; PyTorch 2.x: dynamo).
class TrainingGraphs:
    """One training graph per set of bound parameters (Note [Training graphs
    per parameter set]); called as the graph is."""

    MOST_PARAMETER_SETS = 128
    MOST_REPLACED = 8

    def __init__(self, first, compile_again, invoked=False, parameters=(), example=()):
        """parameters: the positions of the parameters among the graph's
        arguments; example: the first graph's arguments."""
        self.parameters = list(parameters)
        self.last = first
        self.graphs = [first]
        # key -> (graph, weak references to its parameters)
        self.by_parameters = {}
        if self.parameters and not _any_fake(example):
            self.by_parameters[self._key(example)] = (first, self._held(example))
        self.replaced = 0
        self.compile_again = compile_again
        # Note [A training step begins with its named invocation]
        # (cudagraph_trees/generations.h): the forward runs in dynamo's
        # invocation, beside the graphs before it that feed it.
        self.invoked = invoked

    def _held(self, args):
        return [weakref.ref(args[position]) for position in self.parameters
                if isinstance(args[position], torch.Tensor)]

    @property
    def count(self):
        return len(self.graphs)

    def _drop_replaced(self):
        """Forgets the graphs whose parameters are all freed (replaced). Run
        only before a compilation: a collection first, as a refused call's
        traceback holds its arguments in a cycle."""
        gc.collect()
        for key, (graph, held) in list(self.by_parameters.items()):
            if held and all(reference() is None for reference in held):
                del self.by_parameters[key]
                self.graphs = [kept for kept in self.graphs if kept is not graph]
                self.replaced += 1

    def _found(self, args, key):
        """The graph bound to these arguments (Note [Training graphs per
        parameter set]) and its result, or (None, the last refusal)."""
        moved = None
        candidates = [self.by_parameters.get(key, (None,))[0]] + self.graphs
        tried = {id(self.last)}
        for graph in candidates:
            if graph is None or id(graph) in tried:
                continue
            tried.add(id(graph))
            try:
                result = graph(*args)
            except StaticInputMovedError as refusal:
                moved = refusal
                continue
            self.last = graph
            if key is not None:
                self.by_parameters[key] = (graph, self._held(args))
            return graph, result
        return None, moved

    def _key(self, args):
        return tuple(args[position].data_ptr() if isinstance(args[position], torch.Tensor)
                     else None for position in self.parameters)

    def __call__(self, *args):
        return _in_dynamos_invocation(self.invoked, self._call, args)

    def _call(self, args):
        try:
            return self.last(*args)
        except StaticInputMovedError as refusal:
            moved = refusal
        key = self._key(args) if self.parameters else None
        graph, outcome = self._found(args, key)
        if graph is not None:
            return outcome
        moved = outcome or moved
        self._drop_replaced()
        if self.replaced >= self.MOST_REPLACED:
            raise StaticInputMovedError(moved.position, "%s (the parameters of %d of this "
                                        "training graph's compilations were freed: they are "
                                        "replaced, not updated in place; grove compiles no "
                                        "more)" % (moved, self.replaced)) from None
        if self.count >= self.MOST_PARAMETER_SETS:
            raise StaticInputMovedError(moved.position, "%s (grove compiled this training graph "
                                        "for %d sets of parameters already and compiles no "
                                        "more)" % (moved, self.count)) from None
        (log.warning if self.count == 1 else log.info)(
            "grove: this training graph is called with other parameters than it was compiled "
            "for (%s); compiling it for them too (%d graphs now)", moved, self.count + 1)
        graph = self.compile_again(args)
        self.graphs.append(graph)
        if key is not None:
            self.by_parameters[key] = (graph, self._held(args))
        self.last = graph
        return graph(*args)


def _as_graph_module(gm, example_inputs):
    """compile_graph takes plain functions too; AOTAutograd and the attention
    rewrite need an fx GraphModule. A function becomes one by symbolic
    tracing (a torch-level graph, as dynamo's), or by make_fx where symbolic
    tracing cannot follow it (Python control flow on sizes). Test:
    InputWritesTest.test_batch_norm_running_statistics_in_training_mode
    (torch 2.x)."""
    if isinstance(gm, torch.fx.GraphModule):
        return gm
    try:
        return torch.fx.symbolic_trace(gm)
    except Exception:  # noqa: BLE001 (any tracing failure: try make_fx instead)
        from torch.fx.experimental.proxy_tensor import make_fx

        return make_fx(gm)(*example_inputs)


def _any_fake(values):
    """Whether a tensor among values is a FakeTensor (no memory behind it)."""
    from grove import door_function

    fake = door_function._fake_tensor_type()
    return fake is not None and any(isinstance(value, fake) for value in values)


def _door_function(gm, example_inputs, compiler, aot, single):
    """The graph AOTAutograd just compiled, as grove's own autograd.Function
    (Note [The door's own autograd function], door_function.py) for calls on
    real tensors, or `aot` (AOTAutograd's compiled function) alone."""
    from grove import door_function

    if not door_function.enabled():
        return aot
    try:
        forward, backward, user_outputs, lifted = door_function.aot_partition(
            gm, example_inputs, compiler)
        values = list(lifted) + list(example_inputs)
        requires_grad = [bool(getattr(value, "requires_grad", False)) for value in values]
        # Note [The optimizer's update inside the door's backward] (opt-in,
        # optim.py), else Note [Gradients set directly by the door's function]
        # (opt-in).
        grove_reduces = compiler.all_reduce is not None
        optimizer, direct = door_function.update_in_backward(values, grove_reduces)
        if optimizer is None and door_function.direct_gradients():
            direct = door_function.direct_positions(values, grove_reduces)
        own = door_function.door_function(forward, backward, user_outputs, requires_grad,
                                          compiler, single=single, lifted=lifted, direct=direct,
                                          optimizer=optimizer)
    except door_function.Unsupported as why:
        log.info("training graph runs under AOTAutograd's runtime: %s", why)
        return aot
    # Note [Fake calls of the door's function] (door_function.py)
    return door_function.real_calls_only(own, aot)


def _single_value_output(gm):
    """The output node of an fx graph that returns one value, not a tuple; else None."""
    graph = getattr(gm, "graph", None)
    if graph is None:
        return None
    outputs = [node for node in graph.nodes if node.op == "output"]
    if len(outputs) == 1 and not isinstance(outputs[0].args[0], (tuple, list)):
        return outputs[0]
    return None


# Note [Host scalars specialized per value]
# Under dynamic=True dynamo passes a Python float of the model's (an
# attention scale, an epsilon: dynamo's specialize_float is off) as a 0-d CPU
# float64 tensor and reads it back with .item() inside the graph. Tracing to
# ATen with make_fx stops at that read (Note [Graphs that read values as
# numbers run in PyTorch]), so every graph of HF LLaMA under dynamic=True ran
# in PyTorch whole (session 31 call J), and so did any graph that reads a 0-d
# host tensor input as a number. Such inputs (0-d CPU tensors the graph reads
# with .item(), int() or float()) are now baked into each compilation as
# constants: PerShapeGraph keys its compilations by their values too (a CPU
# read, no device sync), so a new value compiles once more, and past
# MAX_SCALAR_VALUES values for one shape the graph runs in PyTorch for
# further values, with a warning (where it ran for every value before). A
# host scalar used only in tensor ops stays an input (Note [Host tensors
# passed to a device graph]): a learning rate that changes at every step
# compiles once. On the H200 (session 32 call B) HF LLaMA under dynamic=True
# then left no graph to PyTorch whole. Test:
# DynamoBackendTest.test_a_host_scalar_read_as_a_number_is_compiled_per_value
# (tests/python/importer_test.py).
MAX_SCALAR_VALUES = 8


# Note [Many shapes compile many graphs]: under dynamic sizes (dynamo's
# automatic dynamic shapes after a second size, or dynamic=True) grove
# compiles a static program per concrete shape (PerShapeGraph), where
# PyTorch's inductor compiles once and its trees record per size. A workload
# of many lengths (BERT over 40 lengths: 0.76 s a new length on an H200,
# session 32 call F) then spends its time compiling and keeps every graph.
# The answers stay right; at SHAPES_WARNED_AT shapes of one graph a warning
# says so once and names the remedy (buckets), as PyTorch warns past its
# cudagraph_dynamic_shape_warn_limit. Test:
# TorchBackendTest.test_many_shapes_warn_once (tests/python/importer_test.py).
SHAPES_WARNED_AT = 16


def host_scalar_positions(gm, example_inputs):
    """Positions of the graph's 0-d CPU tensor inputs it reads as Python
    numbers (Note [Host scalars specialized per value])."""
    graph = getattr(gm, "graph", None)
    if graph is None:
        return ()
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    found = []
    for position, (node, value) in enumerate(zip(placeholders, example_inputs)):
        if not (isinstance(value, torch.Tensor) and value.dim() == 0
                and value.device.type == "cpu"):
            continue
        if any(_reads_as_number(user) for user in node.users):
            found.append(position)
    return tuple(found)


def _reads_as_number(node):
    if node.op == "call_method":
        return node.target in ("item", "tolist", "__int__", "__float__")
    return node.op == "call_function" and (
        node.target in (int, float, bool)
        or "_local_scalar_dense" in str(node.target))


class PerShapeGraph:
    """A graph with symbolic sizes, compiled once per concrete set of input
    shapes (and integer arguments) it is called with: each is a static grove
    program, and in cudagraphs mode one graph per shape in the device's tree.
    The integer arguments (the sizes dynamo passes) are baked into each
    compilation."""

    def __init__(self, gm, mode, strict, device, verify=None, reuse_state=False,
                 from_dynamo=False):
        self.gm = gm
        self.options = {"mode": mode, "strict": strict, "device": device, "verify": verify,
                        "reuse_state": reuse_state}
        self.from_dynamo = from_dynamo
        self.compiled = {}
        self._key_plan = None  # (argument types, tensor getter, value getter)
        # Note [Host scalars specialized per value]: their positions among
        # the arguments, found at the first call; values compiled per shape.
        self._scalars = None
        self._values_per_shape = {}

    @staticmethod
    def key(args):
        return tuple((tuple(value.shape), value.stride(), value.dtype, value.device)
                     if isinstance(value, torch.Tensor) else ("value", value) for value in args)

    # Note [Shape keys without Python per tensor]: dynamo passes a graph's
    # arguments with the same kinds at every call, so a call's key is the
    # arguments' types, the values (the sizes dynamo passes) and the tensors'
    # shapes, strides, dtypes and devices, each gathered by one map in C, with
    # no Python per argument; a call whose argument types differ from the
    # first call's takes the full key. Test:
    # TorchBackendTest.test_symbolic_sizes_compile_once_per_concrete_shape.
    def _fast_key(self, args):
        plan = self._key_plan
        if plan is None:
            tensors = [index for index, value in enumerate(args)
                       if isinstance(value, torch.Tensor)]
            values = [index for index, value in enumerate(args)
                      if not isinstance(value, torch.Tensor)]
            plan = self._key_plan = (tuple(map(type, args)), _getter(tensors), _getter(values))
        types, tensors_of, values_of = plan
        if tuple(map(type, args)) != types:
            return self.key(args)
        tensors = tensors_of(args)
        return (values_of(args), tuple(map(_SIZE, tensors)), tuple(map(_STRIDE, tensors)),
                tuple(map(_DTYPE, tensors)), tuple(map(_DEVICE_INDEX, tensors)))

    def __call__(self, *args):
        scalars = self._scalars
        if scalars is None:
            scalars = self._scalars = host_scalar_positions(self.gm, args)
        key = self._fast_key(args)
        if scalars:
            shape = key
            key = (shape, tuple(args[position].item() for position in scalars))
        compiled = self.compiled.get(key)
        if compiled is None and scalars:
            seen = self._values_per_shape.setdefault(shape, set())
            if len(seen) >= MAX_SCALAR_VALUES:
                if len(seen) == MAX_SCALAR_VALUES:
                    seen.add(None)  # warned once
                    log.warning("grove: a graph was compiled for %d values of its host scalars "
                                "(Note [Host scalars specialized per value]); further values "
                                "run it in PyTorch", MAX_SCALAR_VALUES)
                return self.gm(*args)
            seen.add(key[1])
        if compiled is None:
            concrete = [int(value) if isinstance(value, torch.SymInt) else value
                        for value in args] if hasattr(torch, "SymInt") else list(args)
            tensors = [value for i, value in enumerate(concrete)
                       if isinstance(value, torch.Tensor) and i not in scalars]
            positions = [i for i, value in enumerate(concrete)
                         if isinstance(value, torch.Tensor) and i not in scalars]
            values = list(concrete)  # the host scalars stay in it: constants of the trace

            def specialized(*tensor_args):
                for position, value in zip(positions, tensor_args):
                    values[position] = value
                return self.gm(*values)

            log.info("compiling a graph for input shapes %s", [tuple(t.shape) for t in tensors])
            compiled = (positions, _compile_graph(specialized, tensors, self.from_dynamo,
                                                  defer_out_of_memory=False, **self.options))
            self.compiled[key] = compiled
            if len(self.compiled) == SHAPES_WARNED_AT:
                # Note [Many shapes compile many graphs]
                log.warning("grove: a graph with dynamic sizes has now been compiled for %d "
                            "input shapes (%s the latest): grove compiles and records a graph "
                            "per shape, a second or so each, and keeps them all; pad inputs "
                            "to a few sizes (buckets) to bound both", SHAPES_WARNED_AT,
                            [tuple(t.shape) for t in tensors])
        positions, function = compiled
        return function(*[args[position] for position in positions])


_SIZE = operator.attrgetter("shape")
_DTYPE = operator.attrgetter("dtype")
_STRIDE = torch.Tensor.stride
_DEVICE_INDEX = torch.Tensor.get_device


def _getter(positions):
    """args -> a tuple of the arguments at `positions`."""
    if not positions:
        return lambda args: ()
    if len(positions) == 1:
        position = positions[0]
        return lambda args: (args[position],)
    return operator.itemgetter(*positions)


# Note [Out of memory while compiling waits for the first call]
# grove compiles a dynamo graph by tracing it on the example inputs dynamo
# hands its backend, real tensors: a graph whose activations do not fit ran
# out of memory inside dynamo's compile step, which reports any backend
# error as BackendCompilerFailed, so `except torch.cuda.OutOfMemoryError`
# (Note [Out of memory is PyTorch's out of memory], _capi.py) did not see it
# and every later call compiled and failed again the same way (call F of
# session 33, H200: a 1 GiB activation with 512 MiB free). Now an out of
# memory while compiling (PyTorch's or grove's) gives dynamo a graph that
# compiles at its first call (PerShapeGraph, which compiles per shape on
# use): that call raises PyTorch's OutOfMemoryError itself, as eager would,
# and a later call, once memory is free, compiles and runs. Strict mode is
# no exception: the error is the same one, raised a call later. Test:
# DynamoBackendTest.test_out_of_memory_while_compiling_waits_for_the_first_call
# (tests/python/importer_test.py); on an H200, session 33 call G.
def _out_of_memory_errors():
    """The exception classes of running out of memory: PyTorch's and grove's."""
    torch_class = _capi.torch_out_of_memory_class()
    return (_capi.OutOfMemoryError,) + ((torch_class,) if torch_class is not None else ())


def grove_backend(gm, example_inputs, options=None, **kwargs):
    """The dynamo backend "grove" (torch.compile(model, backend="grove", options={...}))."""
    options = dict(options or {})
    options.update(kwargs)
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError("grove: unknown option(s) %s (known: %s)" % (", ".join(unknown),
                                                                      ", ".join(_OPTIONS)))
    return _compile_graph(gm, example_inputs, True, **options)
