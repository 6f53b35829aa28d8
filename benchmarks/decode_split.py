"""Where a generated token's time goes in Hugging Face's static-cache
generate (torch_zoo's hf_llama_static_cache: the small LLaMA, 32 new tokens,
HF's own compilation off) through torch.compile(backend="grove"), against
eager PyTorch (issue 33: grove >= 2x eager's tokens/s).

    python3 benchmarks/decode_split.py [--tokens 32] [--turns 5] [--out DIR]
        [--variants eager,hf_loop,floor,grove] [--door-env LABEL:NAME=VALUE[+...],...]
        [--no-profile] [--profile-variants NAME,...] [--no-guard-skip] [--cprofile VARIANT]

Variants (Note [A decode token's time split]):
  eager    model.forward as it is
  hf_loop  model.forward replaced by a function returning one saved eager
           output: HF's generate loop alone (no model, no dynamo)
  floor    torch.compile with a backend whose graphs return one eager run's
           outputs (door_split's floor): HF's loop and dynamo, no model work
  grove    backend="grove"
  grove_reuse  backend="grove" with options={"reuse_state": True} (Note [Reused
           state copies], grove/runner.py: the cache a prefill makes keeps its
           address from one generate call to the next)
  door_LABEL  backend="grove" compiled and timed with --door-env's variables
  NAME_nogc   variant NAME's model (the same compiled forward) with Python's
           garbage collector off during its calls
Every variant's model is compiled first; then each is timed in turns (one
generate call per variant per turn, the order rotated) and its figure is the
median of its turns, as ms per token and tokens/s, with the forward's own host
time per token (a perf_counter around model.forward) and the rest (HF's
loop, including the waits for the device it makes). Then (unless
--no-profile) one generate call per variant under torch.profiler, with
record_function ranges around model.forward, grove's CompiledGraph call and
HF's per-step pieces: host us per token of each range, of the device waits
(cudaStreamSynchronize, cudaMemcpyAsync, item), the device's kernel time and
kernels per token, and the 12 operations of most own host time. Finally
(unless --no-guard-skip) floor and grove again under
torch.compiler.set_stance(skip_guard_eval_unsafe=True): what dynamo's guard
check costs per token. Tokens are compared with eager's for every variant
(hf_loop and floor return fixed logits: theirs differ by design).
--cprofile VARIANT writes cProfile's listing of one of that variant's generate
calls to DIR/decode_cprofile.txt (most own time, then most cumulative time).
Writes DIR/decode_split.json. Skips without CUDA.
"""
import argparse
import contextlib
import copy
import cProfile
import io
import pstats
import functools
import gc
import importlib
import json
import os
import statistics
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "python"))
sys.path.insert(0, os.path.join(here, "..", "python"))
sys.path.insert(0, here)

from decode_breakdown import small_llama  # noqa: E402 (benchmarks/, after the path)
from door_split import floor_backend  # noqa: E402
from torch_backend import environment  # noqa: E402
from torch_zoo import parse_env_variants, tree_counters, without_hf_compile  # noqa: E402

# Note [A decode token's time split]: a token of HF's generate is HF's own
# loop (hf_loop: logits processors, stopping criteria, input preparation and
# a device wait per step), dynamo's work around the forward (floor - hf_loop:
# guards, frame evaluation, output wrapping) and the backend's share (grove -
# floor: grove's door call, its C call, and any device time the host does
# not hide). Eager's token is hf_loop plus eager's forward. So grove >= 2x
# eager needs grove - floor (and floor itself) small against eager's forward;
# the profile splits each figure into its ranges. Run on a GPU host.
STARTED = time.perf_counter()
PROMPT = 12
DEVICE = "cuda"
RANGES = ("split.forward", "split.grove", "split.prepare_inputs", "split.update_kwargs",
          "split.unfinished", "split.logits_processor", "split.stopping_criteria")
WAITS = ("cudaStreamSynchronize", "cudaMemcpyAsync", "cudaDeviceSynchronize",
         "aten::_local_scalar_dense", "aten::item", "cudaGraphLaunch", "cudaLaunchKernel")


class Forward:
    """model.forward wrapped: its host seconds per call, and a profiler range."""

    def __init__(self, inner):
        self.inner = inner
        self.seconds = []
        self.ranged = False  # the range only under the profiler (it costs host time)

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        if not self.seconds:
            self.first_start = start
        if self.ranged:
            with torch.profiler.record_function("split.forward"):
                result = self.inner(*args, **kwargs)
        else:
            result = self.inner(*args, **kwargs)
        self.last_end = time.perf_counter()
        self.seconds.append(self.last_end - start)
        return result


class Variant:
    def __init__(self, name, make_forward, settings=None):
        self.name = name
        self.gc_off = name.endswith("_nogc")
        self.settings = settings or {}
        self.model = small_llama()
        self.ids = torch.randint(0, 1000, (1, PROMPT),
                                 generator=torch.Generator().manual_seed(0)).to(DEVICE)
        with environment(self.settings):
            inner = make_forward(self.model)
        self.timed = Forward(inner)
        # functools.wraps keeps the forward's signature, which generate reads.
        self.model.forward = functools.wraps(self.model.forward)(
            lambda *a, **k: self.timed(*a, **k))
        self.tokens = None
        self.turns = []  # (seconds of the call, forward seconds in it)
        self.calls = []  # per generate call, the host seconds of each forward call
        self.counters = {}  # grove's tree counters: their growth over this variant's calls
        self.ends = []  # per generate call, (seconds before the first forward, after the last)

    def generate(self, tokens):
        before = tree_counters()
        result = self._generate(tokens)
        after = tree_counters()
        for key, value in after.items():
            if isinstance(value, (int, float)) and isinstance(before.get(key), (int, float)):
                self.counters[key] = self.counters.get(key, 0) + value - before[key]
        return result

    def _generate(self, tokens):
        self.timed.seconds = []
        with environment(self.settings):
            if self.gc_off:
                gc.disable()
            try:
                torch.cuda.synchronize()
                start = time.perf_counter()
                with torch.no_grad():
                    out = self.model.generate(self.ids, max_new_tokens=tokens,
                                              min_new_tokens=tokens, do_sample=False,
                                              cache_implementation="static",
                                              **without_hf_compile())
                torch.cuda.synchronize()
                end = time.perf_counter()
                seconds = end - start
            finally:
                gc.enable()
        if self.tokens is None:
            self.tokens = out
        self.calls.append(list(self.timed.seconds))
        # Before the first forward (generate's set-up, the cache made) and
        # after the last one (its end, the device drained).
        self.ends.append((self.timed.first_start - start, end - self.timed.last_end))
        return seconds, sum(self.timed.seconds)


def saved_output_forward(model, ids):
    """model.forward's decode output of one eager step, returned by a
    function every call (HF's loop alone)."""
    saved = []
    eager = model.forward

    def keep(*args, **kwargs):
        result = eager(*args, **kwargs)
        saved[:] = [result]
        return result

    model.forward = functools.wraps(eager)(keep)
    with torch.no_grad():
        model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False,
                       cache_implementation="static", **without_hf_compile())
    model.forward = eager
    return functools.wraps(eager)(lambda *args, **kwargs: saved[0])


def grove_backend_function(**options):
    """A backend object of its own (dynamo's cache entries are guarded on it)."""
    from grove.dynamo_backend import grove_backend

    return lambda gm, example_inputs: grove_backend(gm, example_inputs, **options)


def make_variants(names, door_env):
    import grove.torch  # noqa: F401 (registers the backend)

    makers = {
        "eager": lambda model: model.forward,
        "hf_loop": lambda model: saved_output_forward(model, torch.randint(
            0, 1000, (1, PROMPT)).to(DEVICE)),
        "floor": lambda model: torch.compile(model.forward, backend=floor_backend(True)),
        "grove": lambda model: torch.compile(model.forward, backend=grove_backend_function()),
        "grove_reuse": lambda model: torch.compile(
            model.forward, backend=grove_backend_function(reuse_state=True)),
    }
    variants = []
    for name in names:
        if name.endswith("_nogc"):
            base = next((v for v in variants if v.name == name[:-len("_nogc")]), None)
            if base is None:
                print("%s: not made: list %s before it" % (name, name[:-len("_nogc")]))
                continue
            shared = copy.copy(base)  # the same model and forward, timed apart
            shared.name, shared.gc_off, shared.tokens, shared.turns = name, True, None, []
            shared.calls, shared.counters, shared.ends = [], {}, []
            variants.append(shared)
            continue
        try:
            variants.append(Variant(name, makers[name]))
        except Exception as error:  # one variant's failure leaves the others
            print("%s: not made: %s: %s" % (name, type(error).__name__, str(error)[:300]))
    for label, settings in door_env.items():
        try:
            variants.append(Variant(label, makers["grove"], settings))
        except Exception as error:
            print("%s: not made: %s: %s" % (label, type(error).__name__, str(error)[:300]))
    return variants


@contextlib.contextmanager
def hf_ranges(model):
    """record_function ranges around HF's per-step pieces, where they exist."""
    restore = []

    def wrap(owner, name, label):
        original = getattr(owner, name, None)
        if original is None:
            return
        inside = owner.__dict__.get(name, None) is not None if isinstance(owner, type) else False

        @functools.wraps(original)
        def ranged(*args, **kwargs):
            with torch.profiler.record_function(label):
                return original(*args, **kwargs)
        if isinstance(owner, type):
            setattr(owner, name, ranged)
            restore.append(lambda: setattr(owner, name, original) if inside
                           else delattr(owner, name))
        else:
            setattr(owner, name, ranged)
            restore.append(lambda: delattr(owner, name))

    wrap(model, "prepare_inputs_for_generation", "split.prepare_inputs")
    wrap(model, "_update_model_kwargs_for_generation", "split.update_kwargs")
    wrap(model, "_has_unfinished_sequences", "split.unfinished")
    try:
        from transformers.generation.logits_process import LogitsProcessorList
        from transformers.generation.stopping_criteria import StoppingCriteriaList

        wrap(LogitsProcessorList, "__call__", "split.logits_processor")
        wrap(StoppingCriteriaList, "__call__", "split.stopping_criteria")
    except ImportError:
        pass
    from grove.dynamo_backend import CompiledGraph

    wrap(CompiledGraph, "__call__", "split.grove")
    try:
        yield
    finally:
        for undo in reversed(restore):
            undo()


def _device_us(event):
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return value
    return 0.0


def profile_split(variant, tokens):
    """One generate call under torch.profiler: host us per token of each
    range and wait, the device's kernel time and count per token, and the
    table of most own host time."""
    from torch.profiler import ProfilerActivity, profile

    variant.timed.ranged = True
    try:
        with hf_ranges(variant.model):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                seconds, _ = variant.generate(tokens)
    finally:
        variant.timed.ranged = False
    averages = prof.key_averages()
    by_name = {event.key: event for event in averages}
    split = {"profiled_ms_per_token": seconds / tokens * 1e3}
    for name in RANGES + WAITS:
        event = by_name.get(name)
        if event is not None:
            split[name] = {"us_per_token": event.cpu_time_total / tokens,
                           "calls_per_token": event.count / tokens}
    kernels = [event for event in prof.events()
               if str(getattr(event, "device_type", "")).endswith("CUDA")]
    split["device_us_per_token"] = sum(_device_us(event) for event in kernels) / tokens
    split["device_events_per_token"] = len(kernels) / tokens
    split["table"] = averages.table(sort_by="self_cpu_time_total", row_limit=12,
                                    max_name_column_width=44)
    return split


def write_cprofile(variant, tokens, path):
    profiler = cProfile.Profile()
    profiler.enable()
    variant.generate(tokens)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    text.write("cProfile of one %s generate call of %d tokens\n" % (variant.name, tokens))
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(45)
    with open(path, "w") as out:
        out.write(text.getvalue())


def time_in_turns(variants, tokens, turns):
    for variant in variants:
        variant.counters = {}
    for turn in range(turns):
        shift = turn % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            if getattr(variant, "error", None):
                continue
            try:
                variant.turns.append(variant.generate(tokens))
            except Exception as error:
                variant.error = "%s: %s" % (type(error).__name__, str(error)[:300])


def summary(variant, tokens):
    totals = [seconds for seconds, _ in variant.turns]
    forwards = [forward for _, forward in variant.turns]
    total = statistics.median(totals)
    forward = statistics.median(forwards)
    # The first forward of a call is the prefill; the rest are decode steps.
    calls = variant.calls[-len(variant.turns):]
    prefill = statistics.median(seconds[0] for seconds in calls if seconds)
    steps = statistics.median(statistics.median(seconds[1:]) for seconds in calls
                              if len(seconds) > 1)
    ends = variant.ends[-len(variant.turns):]
    return {"prefill_forward_us": prefill * 1e6, "step_forward_us": steps * 1e6,
            "before_first_forward_us": statistics.median(before for before, _ in ends) * 1e6,
            "after_last_forward_us": statistics.median(after for _, after in ends) * 1e6,
            "forwards_per_call": statistics.median(len(seconds) for seconds in calls),"tokens_per_s": tokens / total, "ms_per_token": total / tokens * 1e3,
            "forward_us_per_token": forward / tokens * 1e6,
            "rest_us_per_token": (total - forward) / tokens * 1e6,
            "spread_ms_per_token": [min(totals) / tokens * 1e3, max(totals) / tokens * 1e3]}


def guard_skip(variants, tokens, turns):
    """{name: summary} of floor and grove timed under
    set_stance(skip_guard_eval_unsafe=True), tokens compared."""
    stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if stance is None:
        return {"error": "this PyTorch has no torch.compiler.set_stance"}
    results = {}
    for variant in variants:
        if variant.name not in ("floor", "grove") or not variant.turns:
            continue
        saved_turns, saved_tokens = variant.turns, variant.tokens
        variant.turns, variant.tokens = [], None
        try:
            with stance("default", skip_guard_eval_unsafe=True):
                for _ in range(turns):
                    variant.turns.append(variant.generate(tokens))
            results[variant.name] = summary(variant, tokens)
            results[variant.name]["tokens_equal_checked"] = bool(
                torch.equal(variant.tokens, saved_tokens))
        except Exception as error:
            results[variant.name] = {"error": "%s: %s" % (type(error).__name__, str(error)[:300])}
        finally:
            variant.turns, variant.tokens = saved_turns, saved_tokens
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--warm", type=int, default=2, help="untimed generate calls first")
    parser.add_argument("--variants", default="eager,hf_loop,floor,grove")
    parser.add_argument("--door-env", default="")
    parser.add_argument("--out", default=".")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--profile-variants", default="",
                        help="the variants profiled under torch.profiler (default: all)")
    parser.add_argument("--no-guard-skip", action="store_true")
    parser.add_argument("--cprofile", default="", help="a variant to cProfile one call of")
    parser.add_argument("--ready-by", type=float, default=None,
                        help="seconds from the start after which no further variant is warmed "
                             "(compiled); those left out are reported, the others timed")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("decode_split: skipped, no CUDA device")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    config = importlib.import_module("torch._dynamo").config
    # Every variant's forward stays compiled side by side (no reset between).
    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):
        if hasattr(config, name):
            setattr(config, name, 256)
    door_env = parse_env_variants(args.door_env, "door_", "decode_split: --door-env") \
        if args.door_env else {}
    variants = make_variants(args.variants.split(","), door_env)
    started = time.perf_counter()
    for variant in variants:
        if args.ready_by is not None and time.perf_counter() - STARTED > args.ready_by:
            variant.error = "not warmed: past --ready-by %.0f s" % args.ready_by
            print("%-14s %s" % (variant.name, variant.error), flush=True)
            continue
        try:
            first = time.perf_counter()
            for _ in range(args.warm):
                variant.generate(args.tokens)
            print("%-14s ready (%.1f s)" % (variant.name, time.perf_counter() - first), flush=True)
        except Exception as error:
            variant.error = "%s: %s" % (type(error).__name__, str(error)[:300])
            print("%-14s failed: %s" % (variant.name, variant.error), flush=True)
    time_in_turns(variants, args.tokens, args.turns)
    eager = next((v for v in variants if v.name == "eager" and v.tokens is not None), None)
    results = {"benchmark": "decode_split", "device": torch.cuda.get_device_name(),
               "torch": torch.__version__, "tokens": args.tokens, "variants": {}}
    print("\n%d new tokens per generate call, median of %d turns (%s)" % (
        args.tokens, args.turns, torch.cuda.get_device_name()))
    for variant in variants:
        if getattr(variant, "error", None) or not variant.turns:
            results["variants"][variant.name] = {"error": getattr(variant, "error", "no turns")}
            print("%-14s failed: %s" % (variant.name, results["variants"][variant.name]["error"]))
            continue
        entry = summary(variant, args.tokens)
        entry["settings"] = variant.settings
        calls = len(variant.turns) * args.tokens
        entry["tree_per_token"] = {key: value / calls for key, value in variant.counters.items()
                                   if value and variant.name not in ("eager", "hf_loop", "floor")}
        if eager is not None:
            entry["tokens_equal_eager"] = bool(torch.equal(variant.tokens, eager.tokens))
            entry["over_eager"] = entry["tokens_per_s"] / summary(eager, args.tokens)[
                "tokens_per_s"]
        results["variants"][variant.name] = entry
        print("%-14s %7.1f tok/s  %6.3f ms/token (%.3f-%.3f)  forward %7.1f us/token (prefill "
              "%.0f us, step %.1f us, %d calls)  rest %7.1f us/token  x eager %s  tokens equal "
              "eager's %s" % (
                  variant.name, entry["tokens_per_s"], entry["ms_per_token"],
                  entry["spread_ms_per_token"][0], entry["spread_ms_per_token"][1],
                  entry["forward_us_per_token"], entry["prefill_forward_us"],
                  entry["step_forward_us"], entry["forwards_per_call"],
                  entry["rest_us_per_token"],
                  "%.2f" % entry["over_eager"] if "over_eager" in entry else "-",
                  entry.get("tokens_equal_eager")), flush=True)
        print("%-14s per call: %.0f us before the first forward, prefill forward %.0f us, %.0f us "
              "after the last forward" % (variant.name, entry["before_first_forward_us"],
                                          entry["prefill_forward_us"],
                                          entry["after_last_forward_us"]))
        if entry["tree_per_token"]:
            print("%-14s tree per token: %s" % (variant.name, ", ".join(
                "%s %.2f" % (key, value) for key, value in sorted(entry["tree_per_token"].items()))))
    if not args.no_profile:
        for variant in variants:
            if (variant.name not in results["variants"] or variant.gc_off
                    or "error" in results["variants"][variant.name]
                    or (args.profile_variants
                        and variant.name not in args.profile_variants.split(","))):
                continue  # a _nogc variant's profile is its base's
            try:
                split = profile_split(variant, args.tokens)
            except Exception as error:
                print("%s: no profile: %s: %s" % (variant.name, type(error).__name__,
                                                  str(error)[:300]))
                continue
            results["variants"][variant.name]["profile"] = split
            print("\n== %s under torch.profiler: %.3f ms/token; device %.1f us/token in %.1f "
                  "events/token" % (variant.name, split["profiled_ms_per_token"],
                                    split["device_us_per_token"],
                                    split["device_events_per_token"]))
            for name in RANGES + WAITS:
                if name in split:
                    print("   %-28s %8.1f us/token  %5.2f calls/token" % (
                        name, split[name]["us_per_token"], split[name]["calls_per_token"]))
            print(split["table"])
    with open(os.path.join(args.out, "decode_split.json"), "w") as out:
        json.dump(results, out, indent=1)  # again at the end, with the guard check
    for variant in variants:
        if variant.name == args.cprofile and variant.turns:
            try:
                write_cprofile(variant, args.tokens, os.path.join(args.out, "decode_cprofile.txt"))
            except Exception as error:
                print("no cProfile: %s: %s" % (type(error).__name__, str(error)[:300]))
    if not args.no_guard_skip:
        results["guard_skip"] = guard_skip(variants, args.tokens, args.turns)
        for name, entry in results["guard_skip"].items():
            if isinstance(entry, dict) and "ms_per_token" in entry:
                print("%-14s skip_guard_eval_unsafe: %7.1f tok/s %6.3f ms/token  forward %7.1f "
                      "us/token  same tokens %s" % (name, entry["tokens_per_s"],
                                                    entry["ms_per_token"],
                                                    entry["forward_us_per_token"],
                                                    entry["tokens_equal_checked"]))
            else:
                print("%s skip_guard_eval_unsafe: %s" % (name, entry))
    results["seconds"] = time.perf_counter() - started
    with open(os.path.join(args.out, "decode_split.json"), "w") as out:
        json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
