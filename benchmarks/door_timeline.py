"""Where one training step through the torch door spends its time, on a GPU,
by torch.profiler (no nsys on the GPU host): the step's stages (zero_grad,
the compiled model's call, the loss, backward(), optimizer.step()) as
record_function ranges, and inside each range every profiled CPU event of
any thread (the autograd engine's nodes run on its device thread: AccumulateGrad,
the loss's backward, the door's backward node) summed by name as self time;
the rest of a range is Python the profiler does not see. Then the kernels of
the step and the GPU's busy span, and the step's wall time without the
profiler (median over blocks of 20 steps).

    python3 benchmarks/door_timeline.py [--model mlp16x512_b32]
        [--variants grove,grove+direct] [--then gpt4x256_b8_t32=grove_step,cuda_graph]
        [--rounds 10] [--steps 5] [--optimizer fused_adamw|adamw|sgd]
        [--profile all|none|LIST] [--kernels N] [--cprofile N] [--out DIR]
        [--compile-deadline-s S] [--deadline-s S]

Variants: door_stages.py's (grove, grove_fn, grove_optim,
torch_reduce_overhead, and the whole step in one call: grove_step,
cuda_graph), each with optional switches: "+direct"
(GROVE_DOOR_GRADIENTS=direct) or "+VAR=VALUE", set while that variant
compiles. Every variant compiles first; then --rounds rounds each time one
block of every variant in turn (interleaved, so drift reaches all alike),
and the medians are compared with the first variant's (before that, the
losses of every variant's warm-up steps against its variant without switches,
bitwise, or the first variant's, within f32 tolerance); then each profiled
variant runs --steps steps under torch.profiler. --out writes each one's
middle step's timeline (every CPU event of depth <= 3 on its thread, in
order) and the profiler's table. Skips (exit 0, says so) without CUDA or
torch._dynamo.
"""
import argparse
import collections
import os
import statistics
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, os.path.join(here, "..", "python"))

WARMUP = 30
BLOCK = 20
STAGE = "stage:"


def wall_time(step, blocks=10):
    """Median µs per step over `blocks` blocks of BLOCK steps, each block
    ended by a device synchronization."""
    per_step = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(BLOCK):
            step()
        torch.cuda.synchronize()
        per_step.append((time.perf_counter() - start) / BLOCK * 1e6)
    return statistics.median(per_step)


def _is_kernel(event):
    return str(getattr(event, "device_type", "")).endswith("CUDA")


def _depth(event):
    depth = 0
    while event.cpu_parent is not None:
        event = event.cpu_parent
        depth += 1
    return depth


def analyse(events, steps):
    """(per-stage summary lines, timeline lines of the middle step)."""
    cpu = [event for event in events if not _is_kernel(event)]
    kernels = sorted((event for event in events if _is_kernel(event)),
                     key=lambda event: event.time_range.start)
    step_ranges = sorted((event for event in cpu if event.name == "step"),
                         key=lambda event: event.time_range.start)
    stages = [event for event in cpu if event.name.startswith(STAGE)]
    others = [event for event in cpu if event.name != "step" and not event.name.startswith(STAGE)]
    per_stage = collections.defaultdict(lambda: collections.defaultdict(float))
    per_stage_calls = collections.defaultdict(collections.Counter)
    stage_time = collections.defaultdict(float)
    for stage in stages:
        name = stage.name[len(STAGE):]
        start, end = stage.time_range.start, stage.time_range.end
        stage_time[name] += end - start
        for event in others:
            if start <= event.time_range.start < end:
                per_stage[name][event.name] += event.self_cpu_time_total
                per_stage_calls[name][event.name] += 1
    lines = []
    count = max(1, len(step_ranges))
    step_us = statistics.mean(event.time_range.end - event.time_range.start
                              for event in step_ranges) if step_ranges else 0.0
    lines.append("profiled step: %.1f us host (mean of %d, profiler on)" % (step_us, count))
    for name in ("zero_grad", "model", "loss", "backward", "optimizer"):
        if name not in stage_time:
            continue
        total = stage_time[name] / count
        seen = sum(per_stage[name].values()) / count
        lines.append("  %-10s %8.1f us: %7.1f in profiled ops (self, all threads), %7.1f "
                     "unseen (Python, waits)" % (name, total, seen, total - seen))
        top = sorted(per_stage[name].items(), key=lambda item: -item[1])[:12]
        for op, self_us in top:
            calls = per_stage_calls[name][op] / count
            lines.append("      %8.1f us  %5.1f calls  %s" % (self_us / count, calls, op[:100]))
    for index, step in enumerate(step_ranges):
        start, end = step.time_range.start, step.time_range.end
        inside = [kernel for kernel in kernels if start <= kernel.time_range.start < end + 5000]
        if index + 1 < len(step_ranges):
            inside = [kernel for kernel in inside
                      if kernel.time_range.start < step_ranges[index + 1].time_range.start]
        if inside:
            busy = sum(kernel.time_range.end - kernel.time_range.start for kernel in inside)
            span = inside[-1].time_range.end - inside[0].time_range.start
            lines.append("step %d: %d kernels, %.1f us of kernel time, GPU span %.1f us, first "
                         "kernel %.1f us after the step began" % (
                             index, len(inside), busy, span, inside[0].time_range.start - start))
    timeline = []
    if step_ranges:
        middle = step_ranges[len(step_ranges) // 2]
        start, end = middle.time_range.start, middle.time_range.end
        for event in sorted(cpu, key=lambda event: event.time_range.start):
            if start <= event.time_range.start < end and _depth(event) <= 3:
                timeline.append("%9.1f %8.1f  thread %-6s %s%s" % (
                    event.time_range.start - start, event.time_range.end - event.time_range.start,
                    event.thread, "  " * _depth(event), event.name[:110]))
    return lines, timeline


def configuration(name):
    """(door_stages variant, {environment switch: value}) of a --variants
    entry: a variant, then "+direct" (GROVE_DOOR_GRADIENTS=direct) or
    "+VAR=VALUE" for any other switch read as the step compiles."""
    variant, *switches = name.split("+")
    settings = {}
    for switch in switches:
        if switch == "direct":
            settings["GROVE_DOOR_GRADIENTS"] = "direct"
        elif "=" in switch:
            key, value = switch.split("=", 1)
            settings[key] = value
        else:
            raise SystemExit("door_timeline: unknown switch %r in %r (direct, or VAR=VALUE)"
                             % (switch, name))
    return variant, settings


def compiled_step(step_of, module, inputs, loss_of, name, untimed, first,
                  optimizer_name="fused_adamw"):
    """A --variants entry's step, compiled and warmed up with its switches
    set; dynamo's caches are reset before the first only, so the steps
    compiled earlier stay compiled (each model behind a code object of its
    own: Note [One code object per compiled variant], door_stages.py)."""
    variant, settings = configuration(name)
    previous = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    losses = []
    try:
        if first:
            torch._dynamo.reset()
        # Every variant behind a code object of its own (Note [One code object
        # per compiled variant], door_stages.py), the first too, alike.
        step = step_of(module, inputs, loss_of, variant, reset=False,
                       optimizer_name=optimizer_name)
        for _ in range(WARMUP):
            # A copy: a hand-captured graph returns the same loss tensor each time.
            losses.append(step(untimed).detach().clone())
        torch.cuda.synchronize()
    finally:
        for key, value in previous.items():
            if value is None:
                del os.environ[key]
            else:
                os.environ[key] = value
    return step, torch.stack(losses).float().cpu()


def python_profile(step, untimed, steps=300):
    """cProfile's listing of `steps` steps: functions by own time, then by
    cumulative time (the host's Python, which torch.profiler leaves unseen)."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step(untimed)
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(40)
    return text.getvalue()


def exactness(names, losses):
    """Lines comparing the warm-up steps' losses (every variant starts from
    the same weights and batch): a variant with switches against the same
    variant without them bitwise (the same graphs, so the same numbers),
    any other against the first variant within f32 tolerance."""
    lines = []
    for name in names[1:]:
        variant, _ = configuration(name)
        base = variant if variant in losses and variant != name else names[0]
        mine, theirs = losses[name], losses[base]
        if base == variant:
            verdict = "bitwise equal" if torch.equal(mine, theirs) else "DIFFER"
        else:
            close = torch.allclose(mine, theirs, rtol=2e-3, atol=2e-4)
            verdict = "within rtol 2e-3" if close else "DIFFER beyond rtol 2e-3"
        lines.append("losses of %d warm-up steps, %s vs %s: %s (largest difference %.3g)" % (
            len(mine), name, base, verdict, (mine - theirs).abs().max().item()))
    return "\n".join(lines)


class GarbageCollections:
    """Python's garbage collections (gc.callbacks) during each variant's
    timed blocks: how many per 100 steps, by generation, and their time,
    which a step that allocates more Python objects pays more often."""

    def __init__(self):
        import gc

        self.current = None
        self.counts = collections.defaultdict(collections.Counter)
        self.seconds = collections.defaultdict(float)
        self._started = None
        gc.callbacks.append(self._callback)

    def _callback(self, phase, info):
        if self.current is None:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.counts[self.current][info["generation"]] += 1
            self.seconds[self.current] += time.perf_counter() - self._started
            self._started = None

    def during(self, name):
        import contextlib

        @contextlib.contextmanager
        def scope():
            self.current = name
            try:
                yield
            finally:
                self.current = None
        return scope()

    def summary(self, name, steps):
        counts = self.counts[name]
        per_100 = "/".join("%.1f" % (100.0 * counts[generation] / max(steps, 1))
                           for generation in range(3))
        return "gc per 100 steps (gen 0/1/2) %s, %.1f us per step" % (
            per_100, self.seconds[name] / max(steps, 1) * 1e6)

    def close(self):
        import gc

        gc.callbacks.remove(self._callback)


def _door_functions():
    """The door's own autograd functions made so far, in all and by kind."""
    from grove import door_function

    return "door functions so far: %d, %d setting .grad directly, %d updating in backward" % (
        door_function.taken, door_function.direct_taken,
        getattr(door_function, "in_backward_taken", 0))


def _graphs_compiled():
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp16x512_b32")
    parser.add_argument("--variants", default="grove",
                        help="comma-separated: door_stages variants, each optionally with "
                        "+direct or +VAR=VALUE switches (grove,grove+direct)")
    parser.add_argument("--then", action="append", default=[],
                        help="MODEL=VARIANT,VARIANT: after --model's variants are timed and "
                        "profiled, the same for this model's (repeatable; one process, so one "
                        "start-up; these compile only before --compile-deadline-s)")
    parser.add_argument("--steps", type=int, default=5, help="profiled steps per variant")
    parser.add_argument("--optimizer", default="fused_adamw",
                        help="PyTorch's optimizer of the per-stage variants (door_stages.py's "
                        "--optimizer: fused_adamw, adamw, sgd)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="timing rounds; each times one block of every variant in turn")
    parser.add_argument("--profile", default="all",
                        help="comma-separated variants to profile (default all, none: none)")
    parser.add_argument("--out", default=None, help="a folder for the timelines and tables")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="seconds from the start after which no more timing rounds (after "
                        "the third) or profiles begin, so a time-limited run still prints")
    parser.add_argument("--compile-deadline-s", type=float, default=None,
                        help="seconds from the start after which no more variants compile "
                        "(the first always does); those left out are said so")
    parser.add_argument("--kernels", type=int, default=0,
                        help="print the N kernel names of most GPU time per step of each "
                             "profiled variant (torch.profiler's kernel events)")
    parser.add_argument("--cprofile", type=int, default=0,
                        help="also cProfile 300 steps of each profiled variant and print this "
                        "many functions by own time (the Python torch.profiler does not see)")
    args = parser.parse_args()
    began = time.perf_counter()

    def past_deadline():
        return args.deadline_s is not None and time.perf_counter() - began > args.deadline_s

    from door_stages import step_of, zoo_cases
    from torch_backend import skipped_without_cuda_or_dynamo, training_cases

    if skipped_without_cuda_or_dynamo("door_timeline"):
        return 0
    import grove.torch  # noqa: F401 (registers the backend)
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.backends.cuda.matmul.allow_tf32 = False
    cases = {name: (module, inputs, loss_of) for name, module, inputs, loss_of in
             training_cases()}

    def run_model(model, variants, first_model):
        """Compiles, checks, times and profiles `variants` of `model`."""
        if model not in cases:  # the zoo's (benchmarks/zoo_training.py) only where asked
            cases.update((name, (module, inputs, loss_of)) for name, module, inputs, loss_of in
                         zoo_cases({model}))
        if model not in cases:
            raise SystemExit("door_timeline: unknown model %s (known: %s)"
                             % (model, ",".join(cases)))
        module, inputs, loss_of = cases[model]

        def untimed(name, function, *call_args):
            return function(*call_args)

        def labelled(name, function, *call_args):
            with record_function(STAGE + name):
                return function(*call_args)

        names = list(variants)
        for name in names:
            configuration(name)  # an unknown switch is refused before anything compiles
        # Dynamo's cache limit per code object (8 by default) bounds the variants.
        if len(names) > 8:
            raise SystemExit("door_timeline: at most 8 variants in one process")
        steps, losses = {}, {}
        for index, name in enumerate(list(names)):
            if ((index > 0 or not first_model) and args.compile_deadline_s is not None
                    and time.perf_counter() - began > args.compile_deadline_s):
                print("%s: not compiled (past --compile-deadline-s)" % name, flush=True)
                names.remove(name)
                continue
            compiled_at = time.perf_counter()
            try:
                steps[name], losses[name] = compiled_step(step_of, module, inputs, loss_of, name,
                                                          untimed,
                                                          first=index == 0 and first_model,
                                                          optimizer_name=args.optimizer)
            except Exception:  # one variant failing leaves the others' numbers
                import traceback

                traceback.print_exc()
                print("%s: failed to compile or warm up (traceback above); left out" % name,
                      flush=True)
                names.remove(name)
                if not names:
                    return 1
                continue
            print("compiled and warmed %s in %.1f s (%s)" % (
                name, time.perf_counter() - compiled_at, _door_functions()), flush=True)
        if not names:
            print("%s: no variant compiled" % model, flush=True)
            return 0
        print(exactness(names, losses), flush=True)
        graphs = _graphs_compiled()
        # Interleaved: round by round one block of each variant, so drift over
        # the process's life (Note [Training variants measured apart],
        # torch_backend.py) reaches every variant alike.
        samples = {name: [] for name in names}
        collections_seen = GarbageCollections()
        for round_index in range(args.rounds):
            if round_index >= 3 and past_deadline():
                break
            for name in names:
                with collections_seen.during(name):
                    samples[name].append(wall_time(lambda: steps[name](untimed), blocks=1))
        collections_seen.close()
        if _graphs_compiled() != graphs:  # a variant recompiled: its switches were unset then
            print("door_timeline: dynamo compiled %s graphs during the timing; the timings are not "
                  "of the variants as compiled" % (_graphs_compiled() - graphs))
        base = statistics.median(samples[names[0]])
        print("%s: us per step, no profiler (median of %d interleaved blocks of %d steps)"
              % (model, len(samples[names[0]]), BLOCK))
        for name in names:
            median = statistics.median(samples[name])
            print("  %-36s %9.1f us  (min %.1f, max %.1f)  %.3fx of %s  %s" % (
                name, median, min(samples[name]), max(samples[name]), median / base, names[0],
                collections_seen.summary(name, len(samples[name]) * BLOCK)), flush=True)
        profiled = [] if args.profile == "none" else (
            names if args.profile == "all" else args.profile.split(","))
        for name in profiled:
            if name not in steps:
                continue
            if past_deadline():
                print("== %s: not profiled (past --deadline-s)" % name)
                continue
            step = steps[name]
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
                for _ in range(args.steps):
                    with record_function("step"):
                        step(labelled)
                torch.cuda.synchronize()
            lines, timeline = analyse(profiler.events(), args.steps)
            print("== %s %s (torch.profiler)" % (model, name))
            print("\n".join(lines), flush=True)
            if args.kernels:
                from step_kernels import kernel_table  # this folder

                launches, total, table = kernel_table(
                    [event for event in profiler.events() if _is_kernel(event)], args.steps,
                    args.kernels)
                print("-- kernels: %.1f launches and %.1f us of kernel time per step"
                      % (launches / args.steps, total / args.steps))
                print("\n".join(table), flush=True)
            python_table = python_profile(step, untimed) if args.cprofile else ""
            if python_table:
                print("-- cProfile, 300 steps, by own time:")
                print("\n".join(python_table.splitlines()[:args.cprofile + 9]), flush=True)
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                stem = os.path.join(args.out, "%s_%s" % (model, name.replace("+", "_")))
                with open(stem + "_timeline.txt", "w") as out:
                    out.write("# offset_us duration_us thread name (the middle profiled step)\n")
                    out.write("\n".join(timeline) + "\n\n")
                    out.write(profiler.key_averages().table(sort_by="self_cpu_time_total",
                                                            row_limit=50))
                    out.write("\n\n" + python_table)
        return 0

    runs = [(args.model, args.variants.split(","))]
    for extra in args.then:
        model, _, variants = extra.partition("=")
        if not variants:
            raise SystemExit("door_timeline: --then %r: write MODEL=VARIANT,VARIANT" % extra)
        runs.append((model, variants.split(",")))
    for _, variants in runs:  # unknown switches are refused before anything compiles
        for name in variants:
            configuration(name)
    for index, (model, variants) in enumerate(runs):
        status = run_model(model, variants, index == 0)
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
