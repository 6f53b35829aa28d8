"""Where a batch-1 call through torch.compile(backend="grove") spends its
time, per zoo model, timed the zoo's way (issue 33: grove <= 0.5x
reduce-overhead at batch 1).

    python3 benchmarks/door_split.py --zoo gpt2,bert,llama,transformer_decoder [--batch 1]
        [--turns 8] [--out DIR] [--door-env LABEL:NAME=VALUE[+NAME=VALUE],...]
        [--reduce-overhead] [--no-trace]

Per model every variant below is compiled side by side (dynamo's cache
entries are guarded on the backend object, so each compiles through a
backend function of its own) and then timed in turns: one block of 20 calls
each per turn, the order rotated every turn, each block ended by a device
synchronization, the figure the median of its blocks (Note [A row's variants
timed in turns], torch_zoo.py). The variants (Note [The door's time split]):
  floor         dynamo alone: a backend whose graph returns the outputs of one
                eager run, the same tensors every call (guards, dynamo's
                bytecode and wrappers, nn.Module calls)
  floor_detach  the same, with a new tensor object per output per call (the
                least any backend that hands out tensors pays)
  door          backend="grove", as the zoo times it
  door_LABEL    the same compiled with --door-env's variables set (A/B of a
                switch in one process; the variables stay set while it runs)
  door_nogc     the door with Python's garbage collector off during its blocks
  door_static_torch  the door with GROVE_DOOR_STATIC_CHECK=torch (PyTorch's check)
  door_no_static_check  the door with no static-input check: a diagnostic of
                the check's cost inside a call, never a product path
  door_layers   the door calling its model through call_torch, not in one frame
                (GROVE_DOOR_CALL=layers: Note [The door's model call in one frame])
  graph         grove's CompiledGraph called on the arguments dynamo passes it
                (a new dynamo generation each call): grove's whole share
  call_torch    grove.Model.call_torch on the segment's inputs: grove's C call
                and the outputs' hand-out, with their ctypes and Python
  model_call    the same through Model.door_caller (Note [The door's model call
                in one frame], grove/model.py)
  both          floor, then graph: the two shares one after the other
  graph_gap, call_torch_gap  graph and call_torch each followed by 150 us of
                spinning (the device idle at every launch, as in the door),
                the spin taken off
  cxx           the same compiled model called from C++ (grove_model_time_runs,
                20 calls a block): what the device needs, no Python
  cxx_host, cxx_idle  the same calls' host time to each return, the device busy
                or idle before each call (grove_model_time_runs_split), and
                (*_launch) the graph launches' share of it (Note [The launch clock])
  reduce_overhead  mode="reduce-overhead" (--reduce-overhead; compiles slowly)
  *_host        floor, door, graph, call_torch and reduce_overhead timed to the
                last call's return of a block, before its synchronization: the
                host's own share where the device runs behind
  torch_graph_gap, torch_graph_host  PyTorch's CUDAGraph.replay() of the eager
                module captured whole (after the turns), device idle / host share
Then, untimed: grove's kernels and their GPU time per call (torch.profiler),
the guard check of the door's cache entry alone where this PyTorch exposes it,
and (unless --no-trace) the Python and C functions one floor call and one door
call make (sys.setprofile), as counts and their difference, in
DIR/door_split_trace.txt. The table goes to stdout and DIR/door_split.json.
Skips without CUDA or dynamo.
"""
import argparse
import collections
import copy
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, os.path.join(here, "..", "python"))
sys.path.insert(0, here)

from torch_backend import BLOCK, environment  # noqa: E402 (benchmarks/, after the path)

# Note [The door's time split]: a zoo row's grove figure is dynamo's own
# per-call work (floor), grove's Python and C call (graph), and, where the
# host is faster than the device, the device's time (cxx). door - floor -
# graph is what neither share timed alone accounts for: the two sharing a
# call (caches, the device queue) or something dynamo does around grove's
# graph only; `both` (floor then graph, no dynamo around grove) separates the
# two. The floor is what reduce-overhead pays too, so grove's levers are its
# own share and anything it adds to dynamo's. r1 of session 20 (H100,
# benchmarks/session20_logs/wt-door/r1/README.md): the floor is half guards;
# `both` costs what the door does; grove's C call with the device idle takes
# 45-72 us on BERT, LLaMA and nn.TransformerDecoder (its one CUDA call,
# cudaGraphLaunch) against 14 us on GPT-2.
MIN_TURNS = 5


def parse_door_env(text):
    """{"door_LABEL": {NAME: VALUE}} of a --door-env argument (torch_zoo's
    parser of --grove-env, another prefix)."""
    import torch_zoo  # benchmarks/, this script's folder

    return torch_zoo.parse_env_variants(text, "door_", "door_split: --door-env")


def floor_backend(detach):
    """A backend whose graph does no work: the outputs of one eager run,
    the same tensors (or, with detach, new tensor objects over them) every call."""
    def backend(gm, example_inputs):
        with torch.no_grad():
            results = gm(*example_inputs)
        if not detach:
            return lambda *args: results
        if isinstance(results, torch.Tensor):
            return lambda *args: results.detach()
        kind = type(results)
        return lambda *args: kind(value.detach() if isinstance(value, torch.Tensor) else value
                                  for value in results)
    return backend


def grove_backend_function():
    """A backend function of its own for one grove variant (dynamo's cache
    entries are guarded on the backend object)."""
    grove_backend = torch._dynamo.lookup_backend("grove")

    def backend(gm, example_inputs):
        return grove_backend(gm, example_inputs)
    return backend


def time_in_turns(blocks_of, turns):
    """{variant: [us per call of each block]}: `blocks_of` maps a variant to
    a function timing one block (returns us per call)."""
    order = list(blocks_of)
    times = {variant: [] for variant in order}
    for turn in range(max(MIN_TURNS, turns)):
        shift = turn % len(order)
        for variant in order[shift:] + order[:shift]:
            times[variant].append(blocks_of[variant]())
    return times


def block_timer(function, settings=None):
    """A function timing one block of BLOCK calls of function() (wall time
    to the device's synchronization, us per call), under `settings`' variables."""
    def block():
        with environment(settings or {}):
            start = time.perf_counter()
            for _ in range(BLOCK):
                function()
            torch.cuda.synchronize()
            return (time.perf_counter() - start) / BLOCK * 1e6
    return block


def host_timer(function, settings=None):
    """A function timing one block of BLOCK calls of function() to the last
    call's return, before the device's synchronization (us per call), under
    `settings`' variables: the host's own share where the device runs behind
    (Note [Host time of a call in the zoo], torch_zoo.py)."""
    def block():
        with environment(settings or {}):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(BLOCK):
                function()
            host = (time.perf_counter() - start) / BLOCK * 1e6
            torch.cuda.synchronize()
            return host
    return block


def cxx_split_timer(model, inputs, stream, idle, launches):
    """A function timing one block of BLOCK calls of `model` from C++
    (Model.time_runs_split): returns the host us per call and appends the
    graph launches' us per call to `launches`."""
    def block():
        host, launch, _ = model.time_runs_split(*inputs, calls=BLOCK, stream=stream, idle=idle)
        launches.append(launch * 1e6)
        return host * 1e6
    return block


# The *_gap variants follow each call by GAP_US of spinning on the clock, so
# the device (under 100 us of work per call at batch 1) is idle at every
# launch, as it is in the door, but no other Python runs between the calls
# (Note [The door's time split]); GAP_US is taken off their figures.
GAP_US = 150.0


def with_gap(function):
    """function() followed by GAP_US of spinning."""
    gap = GAP_US / 1e6
    clock = time.perf_counter

    def call():
        function()
        end = clock() + gap
        while clock() < end:
            pass
    return call


def static_check_swapped(fast, block, mode):
    """`block` run with the door's static-input check made by
    GROVE_DOOR_STATIC_CHECK=mode (Note [Static input check by one map],
    grove/runner.py), or, for mode None, with no check at all (a diagnostic
    of what the check costs inside a door call; never a product path)."""
    def run():
        fast.pop("static_check", None)
        if mode is None:
            fast["static_check"] = lambda args: True
        try:
            with environment({"GROVE_DOOR_STATIC_CHECK": mode} if mode else {}):
                return block()
        finally:
            fast.pop("static_check", None)
    return run


def gc_off(block):
    """`block` run with Python's garbage collector off."""
    def run():
        gc.disable()
        try:
            return block()
        finally:
            gc.enable()
    return run


def listing(function, calls=100):
    """cProfile's 25 functions of most own time over `calls` calls."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        function()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    return text.getvalue()


def runtime_calls(function, calls=20):
    """torch.profiler's CUDA runtime and driver calls over `calls` calls of
    function() (counts are exact; durations carry the profiler's overhead)."""
    try:
        from torch.profiler import ProfilerActivity, profile

        function()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                function()
            torch.cuda.synchronize()
        lines = ["%6.2f per call  %8.2f us avg  %s" % (event.count / calls,
                                                      event.cpu_time_total / event.count,
                                                      event.key)
                 for event in prof.key_averages() if event.key.startswith(("cu", "Torch"))]
        return "\n".join(sorted(lines, key=lambda line: line[30:])) + "\n"
    except Exception as error:  # a diagnostic: the timing stands without it
        return "profiler failed: %s: %s\n" % (type(error).__name__, error)


def call_trace(function):
    """Counts of (event, function) over one call of function(): Python
    functions by file:line name, C functions by name."""
    counts = collections.Counter()

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            counts["py " + "%s:%d %s" % (os.path.basename(code.co_filename),
                                          code.co_firstlineno, code.co_name)] += 1
        elif event == "c_call":
            counts["c  " + getattr(arg, "__qualname__", getattr(arg, "__name__", repr(arg)))] += 1
    sys.setprofile(profile)
    try:
        function()
    finally:
        sys.setprofile(None)
    return counts


def guard_check_timer(module, inputs):
    """(a function timing one block of the guard check of a cache entry
    dynamo made for the module's call, us per check, or None; a note)."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    except ImportError as error:
        return None, "no _debug_get_cache_entry_list: %s" % error
    frame_locals = {"self": module, "args": tuple(inputs), "kwargs": {}}
    codes = [("forward", type(module).forward.__code__),
             ("_call_impl", torch.nn.Module._call_impl.__code__),
             ("_wrapped_call_impl", torch.nn.Module._wrapped_call_impl.__code__)]
    found = []
    for where, code in codes:
        entries = _debug_get_cache_entry_list(code)
        found.append("%s %d" % (where, len(entries)))
        for entry in entries:
            check = getattr(getattr(entry, "guard_manager", None), "check", None)
            if check is None:
                continue
            try:
                passed = check(frame_locals)
            except Exception as error:  # noqa: BLE001 (a diagnostic)
                found.append("check raised %s" % type(error).__name__)
                continue
            if not passed:
                continue

            def block(check=check):
                start = time.perf_counter()
                for _ in range(BLOCK):
                    check(frame_locals)
                return (time.perf_counter() - start) / BLOCK * 1e6
            return block, "guards of a %s entry (cache entries: %s)" % (where, ", ".join(found))
    return None, "no cache entry passed its guard check here (cache entries: %s)" % (
        ", ".join(found))


def split_model(name, module, inputs, args, door_env):
    """The row of one model: {variant: median us, ...} and notes."""
    import grove.torch  # noqa: F401 (registers the backend)
    import door_call_layers
    import torch_zoo

    row = {"model": name}
    torch._dynamo.reset()
    runs = {}
    backends = {}
    with torch.no_grad():
        for label, detach in (("floor", False), ("floor_detach", True)):
            run = torch.compile(copy.deepcopy(module), backend=floor_backend(detach),
                                dynamic=False)
            run(*inputs)
            runs[label] = run
        for label, settings in [("door", {})] + list(door_env.items()):
            with environment(settings):
                backends[label] = grove_backend_function()
                run = torch.compile(copy.deepcopy(module), backend=backends[label],
                                    dynamic=False)
                start = time.perf_counter()
                for _ in range(5):
                    run(*inputs)
                torch.cuda.synchronize()
                row[label + "_first_calls_s"] = time.perf_counter() - start
                runs[label] = run
        if args.reduce_overhead:
            run = torch.compile(copy.deepcopy(module), mode="reduce-overhead", dynamic=False)
            for _ in range(5):
                run(*inputs)
            runs["reduce_overhead"] = run
        graph, graph_args = door_call_layers.captured_arguments(runs["door"], inputs)
        expected = module(*inputs)
        got = runs["door"](*inputs)
        row["door_vs_eager"] = ((got - expected).abs().max() / expected.abs().max()).item()
    gc.collect()

    from grove import dynamo_backend
    dynamo_backend._dynamo_invocation_key()
    tracker = dynamo_backend._GENERATION_TRACKER

    def graph_call():
        tracker.generation += 1
        return graph(*graph_args)

    floor = runs["floor"]
    # Note [The door's model call in one frame] (grove/model.py): the door
    # through call_torch instead, its closure swapped in for its blocks.
    one_frame_door = graph.door
    layers_door = graph.runner.door_call(one_frame=False)

    def door_layers_block():
        graph.door = layers_door
        try:
            return door_block()
        finally:
            graph.door = one_frame_door
    launches = {}  # cxx_host, cxx_idle -> launch us per call of each block
    timers = {label: block_timer(lambda run=run: run(*inputs), door_env.get(label))
              for label, run in runs.items()}
    door_block = block_timer(lambda: runs["door"](*inputs))
    if layers_door is not None and one_frame_door is not None:
        timers["door_layers"] = door_layers_block
    timers["door_nogc"] = gc_off(block_timer(lambda: runs["door"](*inputs)))
    fast = graph.runner._fast
    if fast is not None and fast["checks"]:
        timers["door_static_torch"] = static_check_swapped(fast, door_block, "torch")
        timers["door_no_static_check"] = static_check_swapped(fast, door_block, None)
    for label in ("floor", "door", "reduce_overhead") + tuple(door_env):
        if label in runs:  # *_host: the host's share alone (host_timer)
            timers[label + "_host"] = host_timer(lambda run=runs[label]: run(*inputs),
                                                 door_env.get(label))
    timers["graph_host"] = host_timer(graph_call)
    timers["graph"] = block_timer(graph_call)
    timers["graph_gap"] = block_timer(with_gap(graph_call))
    timers["both"] = block_timer(lambda: (floor(*inputs), graph_call()))
    if fast is not None:
        model = fast["model"]
        model_inputs = [graph_args[position] for position in fast["inputs"]]
        stream = torch.cuda.current_stream().cuda_stream or None
        timers["call_torch"] = block_timer(lambda: model.call_torch(model_inputs, stream))
        timers["call_torch_gap"] = block_timer(with_gap(
            lambda: model.call_torch(model_inputs, stream)))
        timers["call_torch_host"] = host_timer(lambda: model.call_torch(model_inputs, stream))
        caller = model.door_caller(fast["inputs"])
        if caller is not None:  # Note [The door's model call in one frame]
            timers["model_call"] = block_timer(lambda: caller(graph_args, stream, None))
        timers["cxx"] = lambda: model.time_runs(*model_inputs, calls=BLOCK, stream=stream) * 1e6
        # Note [The launch clock] (runtime/launch_clock.h): the C++ call's host
        # time, busy and with the device idle, and the launches' share of it.
        for label, idle in (("cxx_host", False), ("cxx_idle", True)):
            timers[label] = cxx_split_timer(model, model_inputs, stream, idle,
                                            launches.setdefault(label, []))
        row["bound_static_inputs"] = len(fast["checks"])
    row["graph_args"] = len(graph_args)
    try:  # a diagnostic: the rows stand without it
        with torch.no_grad():  # as dynamo's calls here (its guards check grad mode)
            guard_block, row["guard_note"] = guard_check_timer(module_of(runs["door"]), inputs)
    except Exception as error:  # noqa: BLE001
        guard_block, row["guard_note"] = None, "guard check: %s: %s" % (type(error).__name__,
                                                                        error)
    if guard_block is not None:
        timers["guards"] = guard_block
    with torch.no_grad():
        for timer in timers.values():  # warm
            timer()
        times = time_in_turns(timers, args.turns)
    for label, blocks in launches.items():
        row[label + "_launch"] = statistics.median(blocks)
    for label, blocks in times.items():
        if label.endswith("_gap"):
            blocks = [value - GAP_US for value in blocks]
        row[label] = statistics.median(blocks)
        row[label + "_blocks"] = [round(value, 2) for value in blocks]
    profile = torch_zoo.kernel_profile(runs["door"], inputs)
    row["gpu_us"] = profile.get("gpu_us_per_call")
    row["kernels"] = profile.get("kernels_per_call")
    traces = None
    if not args.no_trace:
        with torch.no_grad():
            traces = {label: call_trace(lambda run=runs[label]: run(*inputs))
                      for label in ("floor", "floor_detach", "door")}
            traces["graph"] = call_trace(graph_call)
            traces["profiles"] = {"cProfile of 100 %s calls" % label:
                                  listing(lambda run=runs[label]: run(*inputs))
                                  for label in ("floor", "door")}
            traces["profiles"]["door runtime calls"] = runtime_calls(
                lambda: runs["door"](*inputs))
            if "reduce_overhead" in runs:
                traces["profiles"]["cProfile of 100 reduce_overhead calls"] = listing(
                    lambda: runs["reduce_overhead"](*inputs))
                traces["profiles"]["reduce_overhead runtime calls"] = runtime_calls(
                    lambda: runs["reduce_overhead"](*inputs))
    # PyTorch's CUDAGraph.replay() of the eager module captured whole, the
    # device idle at each launch: what launching a graph of the eager
    # module's kernels costs the host (door_call_layers' Note [Idle rows]).
    # Last: a capture that fails may leave the device unusable.
    replayed = None
    try:
        replayed = door_call_layers.torch_graph(module, inputs)
        graph_timers = {"torch_graph_gap": block_timer(with_gap(replayed.replay)),
                        "torch_graph_host": host_timer(replayed.replay)}
        for label, blocks in time_in_turns(graph_timers, args.turns).items():
            if label.endswith("_gap"):
                blocks = [value - GAP_US for value in blocks]
            row[label] = statistics.median(blocks)
        if traces is not None:
            traces["profiles"]["torch_graph runtime calls"] = runtime_calls(replayed.replay)
    except Exception as error:  # noqa: BLE001 (a module PyTorch cannot capture whole)
        row["torch_graph_note"] = "not captured: %s" % str(error)[:200]
    return row, traces


def module_of(compiled):
    """The module torch.compile wrapped (OptimizedModule._orig_mod)."""
    return getattr(compiled, "_orig_mod", compiled)


def write_traces(out, name, traces):
    floor, door = traces["floor"], traces["door"]
    out.write("== %s: calls per call: %s\n" % (name, ", ".join(
        "%s %d" % (label, sum(counts.values())) for label, counts in traces.items()
        if label != "profiles")))
    out.write("-- door minus floor (count difference, function)\n")
    for key in sorted(set(floor) | set(door), key=lambda k: (door[k] - floor[k], k)):
        if door[key] != floor[key]:
            out.write("%+4d  %s\n" % (door[key] - floor[key], key))
    out.write("-- floor (count, function)\n")
    for key, count in sorted(floor.items(), key=lambda item: (-item[1], item[0])):
        out.write("%4d  %s\n" % (count, key))
    out.write("-- graph (count, function)\n")
    for key, count in sorted(traces["graph"].items(), key=lambda item: (-item[1], item[0])):
        out.write("%4d  %s\n" % (count, key))
    for label, text in traces["profiles"].items():
        out.write("-- %s\n%s" % (label, text))


COLUMNS = ("floor", "floor_detach", "door", "door_layers", "door_nogc", "door_static_torch",
           "door_no_static_check", "graph", "graph_gap",
           "call_torch", "model_call", "call_torch_gap", "both", "cxx", "guards", "gpu_us",
           "floor_host", "door_host", "graph_host", "call_torch_host", "reduce_overhead_host",
           "torch_graph_gap", "torch_graph_host", "cxx_host", "cxx_host_launch", "cxx_idle",
           "cxx_idle_launch")


def print_row(row, door_env):
    cells = ["%-20s" % row["model"]]
    for column in COLUMNS + tuple(door_env) + tuple(label + "_host" for label in door_env) + (
            "reduce_overhead",):
        if row.get(column) is not None:
            cells.append("%s %.1f" % (column, row[column]))
    print("  ".join(cells), flush=True)
    if row.get("door") and row.get("floor") and row.get("graph"):
        print("%-20s  door - floor - graph = %.1f us; both - floor - graph = %.1f us; "
              "door - cxx = %.1f us; |door - eager| %.1e; %s" % (
                  "", row["door"] - row["floor"] - row["graph"],
                  row.get("both", 0) - row["floor"] - row["graph"],
                  row["door"] - row.get("cxx", 0), row["door_vs_eager"],
                  row.get("guard_note", "")), flush=True)
    for label in tuple(door_env) + ("door_layers", "door_static_torch", "door_no_static_check"):
        if row.get(label) and row.get("door"):
            blocks = zip(row["door_blocks"], row[label + "_blocks"])
            print("%-20s  %s - door: median of turns %+.1f us" % (
                "", label, statistics.median(b - a for a, b in blocks)), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", default="gpt2,bert,llama,transformer_decoder")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--out", default=".")
    parser.add_argument("--door-env", default="",
                        help="LABEL:NAME=VALUE[+NAME=VALUE],...: a door variant per LABEL")
    parser.add_argument("--reduce-overhead", action="store_true")
    parser.add_argument("--no-trace", action="store_true")
    args = parser.parse_args()
    from torch_backend import skipped_without_cuda_or_dynamo

    if skipped_without_cuda_or_dynamo("door_split"):
        return 0
    import door_call_layers

    torch.backends.cuda.matmul.allow_tf32 = False
    door_env = parse_door_env(args.door_env)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    with open(os.path.join(args.out, "door_split_trace.txt"), "w") as trace_file:
        for name, module, inputs in door_call_layers.zoo_cases(args.zoo.split(","), args.batch):
            start = time.perf_counter()
            try:
                row, traces = split_model(name, module, inputs, args, door_env)
            except Exception as error:  # one model failing leaves the others' rows
                import traceback

                traceback.print_exc()
                rows.append({"model": name, "error": "%s: %s" % (type(error).__name__, error)})
                continue
            row["seconds"] = time.perf_counter() - start
            rows.append(row)
            print_row(row, door_env)
            if traces is not None:
                write_traces(trace_file, name, traces)
                trace_file.flush()
            with open(os.path.join(args.out, "door_split.json"), "w") as out:
                json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
