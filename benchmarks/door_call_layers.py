"""Host time of one inference call through torch.compile(backend="grove"),
layer by layer, on one GPU: where the door's per-call cost goes (issue 33).

    python3 benchmarks/door_call_layers.py [--out DIR] [--calls 400] [--models mlp16x512_b1,...]
    python3 benchmarks/door_call_layers.py --zoo gpt2,llama,bert --batch 1 --no-listings \
        [--kernels 8]

--zoo takes torch_zoo.py's models (at --batch) instead of gpu_models' cases;
--kernels N prints, per model, grove's kernels per call, their GPU time and
the N that take most of it (torch.profiler: is the call GPU-bound?).
--floor-variants object,fresh,dlpack,... times dynamo floors one step closer
to grove's graph each (Note [Floor variants]). The door rows include
door_dlpack and door_cached (Note [Outputs over cached storage]).

Each layer is called `calls` times in blocks of 20, each block ended by a
device synchronization; "host" is the median time per call of a block before
its synchronization (the host's own cost while the GPU runs behind), "wall"
with it; "_idle" rows time single calls with the device idle (Note [Idle
rows]). First the dynamo floor (the module compiled by a backend whose graph does
no work). Then the layers, outermost first (each includes those below it):
  door        the torch.compile'd module (dynamo's guards and wrappers)
  door_events the same with GROVE_LEGACY_STREAM_ORDER=events (four event calls
              order grove's stream with the legacy stream, not a blocking stream),
              then door_again, the default once more
  door_side_stream  the same, called on a side stream (no legacy-stream ordering)
  graph       grove's CompiledGraph.__call__ on the arguments dynamo passes
              (the invocation key and scope, GraphRunner)
  door_layered  door without Note [One Python call per door call]
  runner      GraphRunner.__call__ (static input check, stream, outputs picked)
  call_torch  grove.Model.call_torch (descriptions, the C call, DLPack outputs)
  c_dlpack    the C call (grove_model_run_dlpack) and DLPack outputs alone
  torch_graph PyTorch's CUDAGraph.replay() of the eager module captured whole
  cxx         the same compiled model called from C++ (grove_model_time_runs)
and pieces: the invocation key and its C begin/end pair, the static-input
check, the stream query, torch's from_dlpack of a CUDA capsule, call_torch on
a side stream. Then a cProfile listing of the door calls and a torch.profiler
table (CPU and CUDA runtime calls) in DIR. Skips without CUDA or dynamo.
"""
import argparse
import copy
import cProfile
import ctypes
import gc
import io
import os
import pstats
import statistics
import sys
import time
import traceback

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, os.path.join(here, "..", "python"))
sys.path.insert(0, here)

BLOCK = 20


def per_call(function, calls):
    """(median host us, median wall us) per call of function()."""
    for _ in range(BLOCK):
        function()
    torch.cuda.synchronize()
    host, wall = [], []
    for _ in range(max(1, calls // BLOCK)):
        start = time.perf_counter_ns()
        for _ in range(BLOCK):
            function()
        queued = time.perf_counter_ns()
        torch.cuda.synchronize()
        done = time.perf_counter_ns()
        host.append((queued - start) / BLOCK / 1e3)
        wall.append((done - start) / BLOCK / 1e3)
    return statistics.median(host), statistics.median(wall)


def per_call_idle(function, calls):
    """(median host us, None) of single calls of function() each made with
    the device idle (synchronized before, untimed): the host's cost of one
    call with no queue ahead of it (Note [Idle rows])."""
    for _ in range(5):
        function()
    times = []
    for _ in range(max(1, calls // 2)):
        torch.cuda.synchronize()
        start = time.perf_counter_ns()
        function()
        times.append((time.perf_counter_ns() - start) / 1e3)
    torch.cuda.synchronize()
    return statistics.median(times), None


# Note [Idle rows]: a "host" time of a block of calls can include waiting
# for the device when the GPU runs behind (a launch into a full queue
# blocks). The *_idle rows time each call alone after a synchronization, so
# they are the host's own cost of that layer; torch_graph is PyTorch's
# CUDAGraph.replay() of the eager module captured whole (what
# reduce-overhead launches), the floor of any graph launch of that many
# kernels.
def torch_graph(module, inputs):
    """The eager module captured into one torch.cuda.CUDAGraph: its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            module(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        module(*inputs)
    torch.cuda.synchronize()
    return graph


def warm_door(module, inputs, reset=True):
    """(compiled, graph, args): torch.compile(module, backend="grove") warmed
    by five calls, its CompiledGraph and the arguments dynamo passes it
    (captured_arguments). Dynamo is reset first unless reset=False (a floor
    compiled just before must stay compiled)."""
    if reset:
        torch._dynamo.reset()
    compiled = torch.compile(module, backend="grove", dynamic=False)
    with torch.no_grad():
        for _ in range(5):
            compiled(*inputs)
    graph, args = captured_arguments(compiled, inputs)
    return compiled, graph, args


def captured_arguments(compiled, inputs):
    """The arguments dynamo passes grove's CompiledGraph in one call."""
    from grove import dynamo_backend

    seen = []
    original = dynamo_backend.CompiledGraph.__call__

    def recording(self, *args):
        seen.append((self, args))
        return original(self, *args)

    dynamo_backend.CompiledGraph.__call__ = recording
    try:
        with torch.no_grad():
            compiled(*inputs)
    finally:
        dynamo_backend.CompiledGraph.__call__ = original
    if not seen:
        raise RuntimeError("no grove graph ran in a call")
    if len(seen) > 1:
        # A graph break: dynamo runs Python between the graphs. The lower
        # layers time the graph with the most arguments.
        print("%d grove graphs per call (args: %s; one grove segment: %s)" % (
            len(seen), [len(args) for _, args in seen],
            [graph.runner._fast is not None for graph, _ in seen]), flush=True)
    return max(seen, key=lambda item: len(item[1]))


TREE_COUNTERS = ("replays", "recordings", "warmups", "eager_calls", "input_copies",
                 "input_patches", "zero_copy_inputs", "outputs_poisoned", "outputs_cloned",
                 "rerecords", "copy_back_inputs")


def tree_counters(runner):
    """The tree's counters of the runner's models, summed, and the C API's
    copies of borrowed inputs."""
    from grove import _capi

    totals = {}
    for model in runner.models():
        tree = model.stats().get("tree", {})
        for key in TREE_COUNTERS:
            totals[key] = totals.get(key, 0) + tree.get(key, 0)
        copies = ctypes.c_int64()
        _capi.library().grove_model_borrowed_copies(model._handle, ctypes.byref(copies))
        totals["borrowed_copies"] = totals.get("borrowed_copies", 0) + copies.value
    return totals


class _ObjectFloor:
    """A floor graph that is a callable object, as grove's CompiledGraph is."""

    def __init__(self, results):
        self.results = results

    def __call__(self, *args):
        return self.results


def _dlpack_copy(value):
    """A new tensor over the same memory through DLPack, as grove hands out
    its outputs (freed through a DLPack deleter)."""
    if isinstance(value, torch.Tensor):
        return torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(value))
    if isinstance(value, (tuple, list)):
        return type(value)(_dlpack_copy(item) for item in value)
    return value


def _fresh_views(value):
    """A new tensor object over the same memory (no DLPack, no GPU work)."""
    if isinstance(value, torch.Tensor):
        return value.view_as(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_fresh_views(item) for item in value)
    return value


def _c_dlpack_copy(value):
    """_dlpack_copy through PyTorch's C functions alone (no Python frame of
    torch.utils.dlpack)."""
    if isinstance(value, torch.Tensor):
        return torch._C._from_dlpack(torch._C._to_dlpack(value))
    if isinstance(value, (tuple, list)):
        return type(value)(_c_dlpack_copy(item) for item in value)
    return value


def _detached(value):
    """A new tensor object over the same storage by Tensor.detach (Note
    [Outputs over cached storage]: what grove's cached hand-out makes per output)."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(item) for item in value)
    return value


def _from_data_pointer(value):
    """A new tensor over a new non-owning storage made from the data pointer
    (PyTorch's own cudagraph trees hand out replay outputs this way)."""
    if isinstance(value, torch.Tensor):
        storage = torch._C._construct_storage_from_data_pointer(
            value.data_ptr(), value.device, value.untyped_storage().nbytes())
        return torch.empty(0, dtype=value.dtype, device=value.device).set_(
            storage, 0, value.shape, value.stride())
    if isinstance(value, (tuple, list)):
        return type(value)(_from_data_pointer(item) for item in value)
    return value


def _frames(results, depth=10):
    """`results` through `depth` nested Python calls (as many frames as
    grove's call path has), no new tensor."""
    return results if depth == 0 else _frames(results, depth - 1)


# Note [Floor variants]: r1 (session 17, H100) found the door's host time
# above the dynamo floor plus grove's own layer (the graph row) by 19-31 us
# on GPT-2, LLaMA, BERT and nn.TransformerDecoder at batch 1; r1 (session 18)
# found a tensor made through torch.utils.dlpack per call doubling GPT-2's
# floor (54.8 -> 109.1 us). The variants change one thing each from the
# floor towards grove's graph: a callable object instead of a function
# (object), a new tensor object per call over the same memory (fresh), a
# tensor made through DLPack per call, freed through its deleter, by
# torch.utils.dlpack's Python functions (dlpack) or PyTorch's C functions
# alone (cdlpack), and ten nested Python calls (frames); detach and dataptr
# are ways to make an output without DLPack: Tensor.detach of a cached
# tensor (Note [Outputs over cached storage], capi/handout.cc) and a new
# storage from the data pointer with set_ (PyTorch's cudagraph trees);
# dlpack_detach is grove's cached hand-out: one tensor made through DLPack
# once, detached per call. r1 of session 19 (an H200, GPT-2 b1, in this
# order): floor 87.3, fresh 94.2, detach 93.5, dlpack_detach 97.4, dataptr
# 106.5, cdlpack 56.3 us host. A DLPack tensor per call (cdlpack) was the
# cheapest floor, so session 18's doubling is not reproduced; the spread is
# the machine's drift over the run (Note [Interleaved A/B of the door]).
FLOOR_VARIANTS = {
    "function": lambda results: (lambda *args: results),
    "object": _ObjectFloor,
    "fresh": lambda results: (lambda *args: _fresh_views(results)),
    "dlpack": lambda results: (lambda *args: _dlpack_copy(results)),
    "cdlpack": lambda results: (lambda *args: _c_dlpack_copy(results)),
    "frames": lambda results: (lambda *args: _frames(results)),
    "detach": lambda results: (lambda *args: _detached(results)),
    "dataptr": lambda results: (lambda *args: _from_data_pointer(results)),
    "dlpack_detach": lambda results: (lambda cached: (lambda *args: _detached(cached)))(
        _c_dlpack_copy(results)),
}


def dynamo_floor(module, inputs, variant="function"):
    """The module compiled by a backend whose graph does no work: it returns
    the outputs of one eager run of the graph, every call (dynamo's guards
    and wrappers, nothing else); `variant`: Note [Floor variants]."""
    def backend(gm, example_inputs):
        with torch.no_grad():
            results = gm(*example_inputs)
        return FLOOR_VARIANTS[variant](results)

    torch._dynamo.reset()
    compiled = torch.compile(module, backend=backend, dynamic=False)
    with torch.no_grad():
        compiled(*inputs)
    gc.collect()  # the compilation's garbage is collected before, not during, the timing
    return lambda: compiled(*inputs)


def not_inlined(module, inputs, calls):
    """The dynamo floor and the door with inline_inbuilt_nn_modules off: the
    module's parameters reach the graph as attributes (bound as constants),
    not as inputs that dynamo guards and passes one by one."""
    rows = []
    config = torch._dynamo.config
    if not hasattr(config, "inline_inbuilt_nn_modules"):
        return rows
    with config.patch(inline_inbuilt_nn_modules=False):
        floor = dynamo_floor(module, inputs)
        with torch.no_grad():
            rows.append(("floor_not_inlined",) + per_call(floor, calls) + ("",))
        torch._dynamo.reset()
        compiled = torch.compile(module, backend="grove", dynamic=False)
        with torch.no_grad():
            for _ in range(5):
                compiled(*inputs)
            rows.append(("door_not_inlined",) + per_call(lambda: compiled(*inputs), calls)
                        + ("",))
    for label, host, wall, _ in rows:
        print("%-22s %-16s host %8.2f us  wall %8.2f us" % ("", label, host, wall), flush=True)
    torch._dynamo.reset()
    return rows


def layers(name, module, inputs, calls, out_dir, rows, door_only=False, listings=True,
           kernels=0, floor_variants=()):
    """Appends (label, host us, wall us, note) rows to `rows` as it goes."""
    import grove.torch  # noqa: F401 (registers the backend)
    from grove import _capi
    from grove import dynamo_backend
    from grove import outputs as grove_outputs
    from grove import runner as grove_runner

    def row(label, function, note="", idle=False):
        with torch.no_grad():
            host, wall = per_call(function, calls)
        rows.append((label, host, wall, note))
        print("%-22s %-16s host %8.2f us  wall %8.2f us  %s" % (name, label, host, wall, note),
              flush=True)
        if idle:  # Note [Idle rows]
            with torch.no_grad():
                host, _ = per_call_idle(function, calls)
            rows.append((label + "_idle", host, None, "each call alone, device idle"))
            print("%-22s %-16s host %8.2f us  (each call alone, device idle)" % (
                name, label + "_idle", host), flush=True)

    def rows_with_torch_graph():
        # After grove's rows, as a capture that fails may leave the device unusable.
        try:  # Note [Idle rows]
            replayed = torch_graph(module, inputs)
            row("torch_graph", replayed.replay, "PyTorch's CUDAGraph.replay() of the eager module",
                idle=True)
        except Exception as error:  # a module PyTorch cannot capture whole: the row is optional
            print("%-22s torch_graph: not captured: %s" % (name, str(error)[:200]), flush=True)
        return rows

    # First: it compiles with dynamo of its own (reset before grove's compilation).
    row("dynamo_floor", dynamo_floor(module, inputs),
        "dynamo alone: a backend whose graph returns a tensor made once", idle=True)
    for variant in floor_variants:
        row("floor_" + variant, dynamo_floor(module, inputs, variant),
            "Note [Floor variants]")
    compiled, graph, args = warm_door(module, inputs)
    runner = graph.runner
    fast = runner._fast
    gc.collect()  # as after the floor's compilation

    counters = tree_counters(runner)
    row("door", lambda: compiled(*inputs), "%d args to grove%s" % (
        len(args), "" if fast is not None else ", not one grove segment"), idle=True)
    after = tree_counters(runner)
    door_calls = BLOCK + BLOCK * max(1, calls // BLOCK)  # per_call: warm-up and blocks
    print("%-22s tree per door call: %s" % (name, ", ".join(
        "%s %.2f" % (key, (after[key] - counters.get(key, 0)) / door_calls)
        for key in sorted(after) if after[key] != counters.get(key, 0))), flush=True)
    # Note [Calls from the legacy default stream] (capi/grove.cc): the same
    # door call with the legacy stream ordered by four event calls instead of
    # the thread's blocking stream (the mode is read at each call).
    os.environ["GROVE_LEGACY_STREAM_ORDER"] = "events"
    try:
        row("door_events", lambda: compiled(*inputs), "GROVE_LEGACY_STREAM_ORDER=events")
    finally:
        os.environ.pop("GROVE_LEGACY_STREAM_ORDER", None)
    row("door_again", lambda: compiled(*inputs), "the default again (blocking stream)")
    # Note [Outputs over cached storage] (capi/handout.cc): the door with the
    # DLPack hand-out (GROVE_DOOR_OUTPUTS=dlpack), then the default again.
    cached_models = [model for model in runner.models() if model._cached_outputs]
    if cached_models:
        for model in cached_models:
            model.use_cached_outputs(False)
        try:
            row("door_dlpack", lambda: compiled(*inputs), "outputs through DLPack per call",
                idle=True)
        finally:
            for model in cached_models:
                model.use_cached_outputs(True)
        row("door_cached", lambda: compiled(*inputs), "outputs over cached storage (default)",
            idle=True)
    else:
        print("%-22s outputs through DLPack (no cached hand-out here)" % name, flush=True)
    # The caller on a stream of its own: grove runs on it, with no event
    # ordering against the legacy default stream (Note [Calls from the legacy
    # default stream], capi/grove.cc).
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        side_inputs = [value.clone() if isinstance(value, torch.Tensor) else value
                       for value in inputs]
        row("door_side_stream", lambda: compiled(*side_inputs), "the caller on a side stream")
    torch.cuda.synchronize()
    if fast is not None and fast["checks"]:
        # Note [Static input check by one map] (grove/runner.py): the door with
        # PyTorch's check, then with the default again.
        os.environ["GROVE_DOOR_STATIC_CHECK"] = "torch"
        fast.pop("static_check", None)
        try:
            row("door_static_torch", lambda: compiled(*inputs), "GROVE_DOOR_STATIC_CHECK=torch",
                idle=True)
        finally:
            os.environ.pop("GROVE_DOOR_STATIC_CHECK", None)
            fast.pop("static_check", None)
        row("door_static_map", lambda: compiled(*inputs), "the default again (one map)",
            idle=True)
    if kernels:
        print_kernels(name, compiled, inputs, kernels)
    if door_only:
        return rows
    # As dynamo calls it: each call a new generation (one invocation per call).
    dynamo_backend._dynamo_invocation_key()
    tracker = dynamo_backend._GENERATION_TRACKER

    def graph_call():
        tracker.generation += 1
        return graph(*args)

    row("graph", graph_call, idle=True)
    if getattr(graph, "door", None) is not None:
        # Note [One Python call per door call] off: the layered call.
        door = graph.door
        graph.door, graph._door_pending = None, False
        row("door_layered", lambda: compiled(*inputs), "without the one-closure call")
        graph.door = door
    row("runner", lambda: runner(*args))
    if fast is None:
        print("%s: the graph is not one grove segment; no lower layers" % name)
        return rows
    model = fast["model"]
    model_inputs = [args[position] for position in fast["inputs"]]
    stream = grove_runner._stream_of(model_inputs[0]) if model_inputs else None
    row("call_torch", lambda: model.call_torch(model_inputs, stream),
        "%d inputs, %d outputs, stream %s" % (len(model_inputs), model.output_count, stream))
    state = model._gate.state()
    run = model._run_dlpack
    count = model.describe_borrowed(state, model_inputs)

    def c_dlpack():
        status = run(model._handle, state.descs, model._input_counts[count],
                     ctypes.c_void_p(stream) if stream else None, state.managed,
                     model._output_capacity, state.produced_ref)
        _capi.check(status)
        return grove_outputs.tensors_from_dlpack(state.managed, state.produced.value)

    model.use_cached_outputs(model._cached_outputs)  # nothing of call_torch's left held
    row("c_dlpack", c_dlpack, idle=True)
    if model._cached_outputs:
        model.use_cached_outputs(False)
        try:
            row("call_torch_dlpack", lambda: model.call_torch(model_inputs, stream),
                "GROVE_DOOR_OUTPUTS=dlpack")
        finally:
            model.use_cached_outputs(True)
        row("call_torch_cached", lambda: model.call_torch(model_inputs, stream),
            "the default again")
    rows.append(("cxx", model.time_runs(*model_inputs, calls=BLOCK, stream=stream) * 1e6, None,
                 ""))
    samples = sorted(model.time_runs(*model_inputs, calls=BLOCK, stream=stream) * 1e6
                     for _ in range(10))
    rows[-1] = ("cxx", statistics.median(samples), None, "time_runs, %d calls" % BLOCK)
    print("%-22s %-16s %8.2f us" % (name, "cxx", rows[-1][1]), flush=True)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        side_inputs = [value.clone() for value in model_inputs]
        torch.cuda.synchronize()
        row("call_torch_side", lambda: model.call_torch(side_inputs, side.cuda_stream),
            "on a side stream")
        samples = sorted(model.time_runs(*side_inputs, calls=BLOCK, stream=side.cuda_stream)
                         * 1e6 for _ in range(10))
        rows.append(("cxx_side", statistics.median(samples), None, "time_runs on a side stream"))
        print("%-22s %-16s %8.2f us" % (name, "cxx_side", rows[-1][1]), flush=True)
    torch.cuda.synchronize()
    # Pieces.
    fast_library = _capi.fast_library()
    row("invocation_key", dynamo_backend._dynamo_invocation_key)

    def begin_end():
        fast_library.grove_invocation_begin(12345)
        fast_library.grove_invocation_end()

    row("invocation_c", begin_end)
    if fast["checks"]:
        # Note [Static input check by one map] (grove/runner.py): the default,
        # then PyTorch's check.
        row("static_check", lambda: grove_runner._static_inputs_in_place(args, fast),
            "%d bound, one map (default)" % len(fast["checks"]))
        os.environ["GROVE_DOOR_STATIC_CHECK"] = "torch"
        fast.pop("static_check", None)
        try:
            row("static_check_torch", lambda: grove_runner._static_inputs_in_place(args, fast),
                "GROVE_DOOR_STATIC_CHECK=torch")
        finally:
            os.environ.pop("GROVE_DOOR_STATIC_CHECK", None)
            fast.pop("static_check", None)
    if model_inputs:
        row("stream_of", lambda: grove_runner._stream_of(model_inputs[0]))
        row("describe", lambda: model.describe_borrowed(state, model_inputs))
    probe = torch.randn(256, device="cuda")
    from_dlpack = grove_outputs._from_dlpack()
    row("to+from_dlpack", lambda: from_dlpack(torch.utils.dlpack.to_dlpack(probe)),
        "torch's own capsule of a CUDA tensor")
    row("to_dlpack", lambda: torch.utils.dlpack.to_dlpack(probe))
    row("empty_like", lambda: torch.empty_like(probe))
    # Note [Outputs over cached storage]: the cached hand-out's pieces.
    row("detach", probe.detach, "a new tensor over the cached storage")
    row("view_as", lambda: probe.view_as(probe))
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    if use_count is not None:
        cdata = probe.untyped_storage()._cdata
        row("storage_use_count", lambda: use_count(cdata))
    rows_with_torch_graph()
    if not listings:
        return rows
    # Listings of the door calls.
    profiler = cProfile.Profile()
    with torch.no_grad():
        profiler.enable()
        for _ in range(200):
            compiled(*inputs)
        profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(40)
    with open(os.path.join(out_dir, "%s_cprofile.txt" % name), "w") as out:
        out.write(text.getvalue())
    try:
        from torch.profiler import ProfilerActivity, profile

        with torch.no_grad():
            for _ in range(BLOCK):
                compiled(*inputs)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(BLOCK):
                    compiled(*inputs)
                torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
        with open(os.path.join(out_dir, "%s_torch_profiler.txt" % name), "w") as out:
            out.write(table)
    except Exception as error:  # the listing is optional; the rows above are the result
        print("%s: torch.profiler failed: %s" % (name, error))
    return rows


# Note [Interleaved A/B of the door]: r1 of session 19 (an H200) measured the
# same door call from 141 to 193 us host depending on when in the run it was
# timed, more than the difference between the variants compared. --ab times
# the variants in turns, one block of BLOCK calls each per round, and reports
# each one's median block and the median of the paired differences, so that
# a drift of the machine shifts both alike.
AB_VARIANTS = {
    # name: (set up, tear down) around a block, on the door's grove models
    "cached": (lambda models: [model.use_cached_outputs(True) for model in models],
               lambda models: None),
    "dlpack": (lambda models: [model.use_cached_outputs(False) for model in models],
               lambda models: [model.use_cached_outputs(True) for model in models]),
}


def interleaved_ab(name, module, inputs, rounds, variants):
    """Rows (label, host us, wall us, note) of the door under each of
    `variants` (AB_VARIANTS) timed in turns (Note [Interleaved A/B of the door])."""
    import grove.torch  # noqa: F401 (registers the backend)

    compiled, graph, _ = warm_door(module, inputs)
    models = graph.runner.models()
    gc.collect()
    times = {variant: ([], []) for variant in variants}
    with torch.no_grad():
        for _ in range(rounds):
            for variant in variants:
                set_up, tear_down = AB_VARIANTS[variant]
                set_up(models)
                for _ in range(3):
                    compiled(*inputs)
                torch.cuda.synchronize()
                start = time.perf_counter_ns()
                for _ in range(BLOCK):
                    compiled(*inputs)
                queued = time.perf_counter_ns()
                torch.cuda.synchronize()
                done = time.perf_counter_ns()
                tear_down(models)
                times[variant][0].append((queued - start) / BLOCK / 1e3)
                times[variant][1].append((done - start) / BLOCK / 1e3)
    rows = []
    first = variants[0]
    for variant in variants:
        host, wall = times[variant]
        note = "%d rounds" % rounds
        if variant != first:
            paired = [b - a for a, b in zip(times[first][0], host)]
            note += ", host minus %s: median %+.2f us" % (first, statistics.median(paired))
        rows.append(("ab_" + variant, statistics.median(host), statistics.median(wall), note))
        print("%-22s %-16s host %8.2f us  wall %8.2f us  %s" % (name, "ab_" + variant,
                                                               rows[-1][1], rows[-1][2], note),
              flush=True)
    return rows


# Note [Pairs of floor and graph]: the door's host time is above the dynamo
# floor plus grove's graph call timed alone (r1 of session 19: 141-193 us
# against 56-106 plus 27). --pairs times, in turns, the floor alone, grove's
# graph call alone (CompiledGraph on the arguments dynamo passes), the two
# one after the other, and the door, to tell whether grove's call is slower
# after dynamo's work (caches) or only inside dynamo's call.
def interleaved_pairs(name, module, inputs, rounds):
    import grove.torch  # noqa: F401 (registers the backend)
    from grove import dynamo_backend

    floor = dynamo_floor(copy.deepcopy(module), inputs)
    compiled, graph, args = warm_door(module, inputs, reset=False)  # the floor stays compiled
    dynamo_backend._dynamo_invocation_key()
    tracker = dynamo_backend._GENERATION_TRACKER

    def graph_call():
        tracker.generation += 1
        return graph(*args)

    def both():
        floor()
        return graph_call()

    variants = [("pair_floor", floor), ("pair_graph", graph_call), ("pair_both", both),
                ("pair_door", lambda: compiled(*inputs))]
    gc.collect()
    times = {label: [] for label, _ in variants}
    with torch.no_grad():
        for _ in range(rounds):
            for label, function in variants:
                for _ in range(3):
                    function()
                torch.cuda.synchronize()
                start = time.perf_counter_ns()
                for _ in range(BLOCK):
                    function()
                queued = time.perf_counter_ns()
                torch.cuda.synchronize()
                times[label].append((queued - start) / BLOCK / 1e3)
    rows = []
    for label, _ in variants:
        rows.append((label, statistics.median(times[label]), None, "%d rounds, host" % rounds))
        print("%-22s %-16s host %8.2f us  (in turns)" % (name, label, rows[-1][1]), flush=True)
    return rows


def print_kernels(name, compiled, inputs, top):
    """grove's kernels per call, their GPU time per call and the `top` that
    take most of it (torch_zoo.kernel_profile)."""
    import torch_zoo

    profile = torch_zoo.kernel_profile(compiled, inputs)
    if "error" in profile:
        print("%-22s kernels: %s" % (name, profile["error"]), flush=True)
        return
    print("%-22s kernels %.1f per call, %.1f us GPU per call" % (
        name, profile["kernels_per_call"], profile["gpu_us_per_call"]), flush=True)
    for kernel, count, us in profile["top"][:top]:
        print("%-22s   x%-4.0f %7.1f us  %s" % ("", count, us, kernel[:80]), flush=True)


def zoo_cases(names, batch):
    """(name, module, inputs) of torch_zoo.py's models named, on cuda."""
    import importlib

    import torch_zoo

    makers = {name: (make, library) for name, make, library in torch_zoo.MODELS}
    for name in names:
        make, library = makers[name]
        try:
            importlib.import_module(library)
        except ImportError:
            print("%s: %s is not installed" % (name, library))
            continue
        torch.manual_seed(0)
        module, inputs = make(batch)
        yield ("%s_b%d" % (name, batch), module.cuda().eval(),
               tuple(value.cuda() for value in inputs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--models", default="mlp16x512_b1,gpt4x256_b1_t32")
    parser.add_argument("--not-inlined", default="",
                        help="comma-separated models to time also with dynamo's "
                        "inline_inbuilt_nn_modules off (parameters as attributes, not inputs)")
    parser.add_argument("--door-only", action="store_true",
                        help="time the dynamo floor and the door only (no lower layers, listings)")
    parser.add_argument("--reduce-overhead", default="",
                        help="comma-separated models to time under mode=\"reduce-overhead\" too")
    parser.add_argument("--zoo", default="",
                        help="comma-separated torch_zoo.py models to time instead of --models")
    parser.add_argument("--batch", type=int, default=1, help="--zoo: the batch size")
    parser.add_argument("--no-listings", action="store_true",
                        help="no cProfile and torch.profiler files in --out")
    parser.add_argument("--floor-variants", default="",
                        help="comma-separated dynamo floors to time too (Note [Floor variants]): "
                             "object, fresh, dlpack, cdlpack, frames, detach, dataptr, "
                             "dlpack_detach")
    parser.add_argument("--ab", default="",
                        help="comma-separated door variants to time in turns instead of the "
                             "layers (Note [Interleaved A/B of the door]): cached, dlpack")
    parser.add_argument("--ab-rounds", type=int, default=30)
    parser.add_argument("--pairs", action="store_true",
                        help="time the floor, grove's graph call, both and the door in turns "
                             "(Note [Pairs of floor and graph]) instead of the layers")
    parser.add_argument("--kernels", type=int, default=0,
                        help="print grove's kernels per call and the N longest")
    args = parser.parse_args()
    from torch_backend import skipped_without_cuda_or_dynamo

    if skipped_without_cuda_or_dynamo("door_call_layers"):
        return 0
    import gpu_models

    torch.backends.cuda.matmul.allow_tf32 = False
    wanted = args.models.split(",")
    os.makedirs(args.out, exist_ok=True)
    summary = []
    cases = (zoo_cases(args.zoo.split(","), args.batch) if args.zoo else
             ((name, module, inputs) for name, module, inputs in gpu_models.cases("cuda")
              if name in wanted))
    for name, module, inputs in cases:
        start = time.perf_counter()
        rows = []
        try:  # one model failing leaves the others' rows
            if args.ab or args.pairs:
                if args.ab:
                    rows.extend(interleaved_ab(name, module, inputs, args.ab_rounds,
                                               args.ab.split(",")))
                if args.pairs:
                    rows.extend(interleaved_pairs(name, module, inputs, args.ab_rounds))
                summary.extend((name,) + row for row in rows)
                print("%s: %.1f s" % (name, time.perf_counter() - start), flush=True)
                continue
            layers(name, module, inputs, args.calls, args.out, rows, args.door_only,
                   not args.no_listings, args.kernels,
                   [v for v in args.floor_variants.split(",") if v])
            if name in args.not_inlined.split(","):
                rows.extend(not_inlined(module, inputs, args.calls))
            if name in args.reduce_overhead.split(","):
                torch._dynamo.reset()
                reduce_overhead = torch.compile(module, mode="reduce-overhead", dynamic=False)
                with torch.no_grad():
                    for _ in range(5):  # warm-up and recording
                        reduce_overhead(*inputs)
                    host, wall = per_call(lambda: reduce_overhead(*inputs), args.calls)
                    idle, _ = per_call_idle(lambda: reduce_overhead(*inputs), args.calls)
                rows.append(("reduce_overhead", host, wall, "PyTorch's"))
                rows.append(("reduce_overhead_idle", idle, None, "each call alone, device idle"))
                print("%-22s %-16s host %8.2f us  wall %8.2f us" % (name, "reduce_overhead", host,
                                                                      wall), flush=True)
                print("%-22s %-16s host %8.2f us  (each call alone, device idle)" % (
                    name, "reduce_overhead_idle", idle), flush=True)
        except Exception:
            traceback.print_exc()
        summary.extend((name,) + row for row in rows)
        print("%s: %.1f s" % (name, time.perf_counter() - start), flush=True)
    print("%-22s %-16s %10s %10s" % ("model", "layer", "host us", "wall us"))
    for name, label, host, wall, note in summary:
        print("%-22s %-16s %10.2f %10s  %s" % (name, label, host,
                                               "-" if wall is None else "%.2f" % wall, note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
