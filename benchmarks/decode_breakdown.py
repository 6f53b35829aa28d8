"""Where a token's time goes in Hugging Face's static-cache generate (the
small LLaMA of torch_zoo.py's decode rows), eager PyTorch, HF's default
(it compiles the decode step itself) and torch.compile(model.forward,
backend="grove"): the steady generate rate, the
share of each call spent inside model.forward (CPU time, no synchronization
added) and outside it (HF's generate loop: logits processors, stopping
criteria, input preparation), the forward's latency when each call is
synchronized, and a cProfile of one steady grove generate call (--profile FILE).
Run on a GPU host: python3 benchmarks/decode_breakdown.py [--profile FILE] [--all].
"""

import argparse
import cProfile
import functools
import pstats
import statistics
import time

import torch

NEW_TOKENS = 48
CALLS = 6


def small_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(hidden_size=256, intermediate_size=688,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, vocab_size=1000,
                                        max_position_embeddings=256)).cuda().eval()


class TimedForward:
    """Wraps a forward: the CPU seconds spent in it, per call, optionally synchronized."""

    def __init__(self, forward, synchronize=False):
        self.forward = forward
        self.synchronize = synchronize
        self.seconds = []

    def __call__(self, *args, **kwargs):
        if self.synchronize:
            torch.cuda.synchronize()
        start = time.perf_counter()
        result = self.forward(*args, **kwargs)
        if self.synchronize:
            torch.cuda.synchronize()
        self.seconds.append(time.perf_counter() - start)
        return result


def generate(model, ids, options):
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False, cache_implementation="static", **options)
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def measure(name, forward_of, options, profile=None):
    """The variant's first call's tokens, or the error it met, as text."""
    try:
        return measured(name, forward_of, options, profile)
    except Exception as error:  # one variant's failure leaves the others' numbers
        print("%-13s failed: %s: %s" % (name, type(error).__name__, str(error)[:400]))
        return "failed"


def measured(name, forward_of, options, profile=None):
    model = small_llama()
    ids = torch.randint(0, 1000, (1, 12), device="cuda", generator=None)
    torch._dynamo.reset()
    inner = forward_of(model)
    timed = TimedForward(inner)
    wrapped = bool(options.get("disable_compile"))
    if wrapped:
        # functools.wraps keeps the forward's signature, which generate reads.
        # Not under HF's own compilation, which would trace the timer.
        model.forward = functools.wraps(inner)(lambda *a, **k: timed(*a, **k))
    else:
        model.forward = inner
    outs, totals, inside = [], [], []
    for call in range(CALLS):
        timed.seconds = []
        out, seconds = generate(model, ids, options)
        outs.append(out)
        totals.append(seconds)
        inside.append(sum(timed.seconds))
    total = statistics.median(totals[1:])
    if not wrapped:
        print("%-13s %.1f tokens/s; per generate call %.2f ms (first call %.2f s)" % (
            name, NEW_TOKENS / total, total * 1e3, totals[0]))
        return outs[0]
    steps = len(timed.seconds)
    forward = statistics.median(inside[1:])
    timed.synchronize = True
    timed.seconds = []
    generate(model, ids, options)
    synced = statistics.median(timed.seconds[1:])  # decode steps, the prefill apart
    timed.synchronize = False
    print("%-13s %.1f tokens/s; per generate call %.2f ms (first call %.2f s): %d forward "
          "calls take %.2f ms of CPU (%.1f us each), the rest (HF's loop) %.2f ms (%.1f us per "
          "token); a decode forward synchronized: %.1f us" % (
              name, NEW_TOKENS / total, total * 1e3, totals[0], steps, forward * 1e3,
              forward / steps * 1e6, (total - forward) * 1e3,
              (total - forward) / NEW_TOKENS * 1e6, synced * 1e6))
    if name.startswith("grove"):
        describe_grove_graphs()
    if profile is not None:
        try:
            profiler = cProfile.Profile()
            profiler.enable()
            generate(model, ids, options)
            profiler.disable()
            with open(profile, "w") as stream:
                stats = pstats.Stats(profiler, stream=stream)
                stats.sort_stats("tottime").print_stats(40)
                stats.sort_stats("cumulative").print_stats(60)
        except Exception as error:  # the numbers above stand without it
            print("  no profile: %s: %s" % (type(error).__name__, str(error)[:300]))
    return outs[0]


def describe_grove_graphs():
    """Per graph grove compiled: its steps (grove segments, nodes left to
    PyTorch), whether calls take the runner's fast path, and what it left to PyTorch."""
    import grove.torch

    for graph in grove.torch.compiled_graphs():
        runner = getattr(graph, "runner", None)
        if runner is None:
            continue
        kinds = [kind for kind, _ in runner.steps]
        print("  graph: %d inputs, steps %s, fast path %s, demoted %s, left to PyTorch %s" % (
            len(runner.plan.placeholders), kinds, runner._fast is not None,
            sorted(getattr(graph, "demoted", ())), list(runner.unsupported)))
        for kind, step in runner.steps:
            if kind == "torch":
                print("    in PyTorch: %s %s args %s" % (step.name, step.target, [
                    (str(a), tuple(a.meta["val"].shape), str(a.meta["val"].device))
                    if isinstance(a, torch.fx.Node) and "val" in a.meta else repr(a)
                    for a in step.args]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", help="write a cProfile of one steady grove generate call")
    parser.add_argument("--all", action="store_true",
                        help="also grove's forward under HF's own compilation (its default)")
    args = parser.parse_args()
    import grove.torch  # noqa: F401  (registers the backend)

    from transformers import GenerationConfig

    torch.backends.cuda.matmul.allow_tf32 = False
    # Note [Hugging Face compiles its decode step] (torch_zoo.py): HF's default
    # compiles the decode step itself; measured apart as "hf-auto".
    off = {"disable_compile": True} if hasattr(GenerationConfig(), "disable_compile") else {}
    eager = measured("eager", lambda model: model.forward, off)
    results = {"grove": measure("grove", lambda model: torch.compile(model.forward,
                                                                     backend="grove"),
                                off, profile=args.profile)}
    # Note [Reused state copies] (grove/runner.py): the cache keeps its address.
    results["grove-reuse"] = measure(
        "grove-reuse", lambda model: torch.compile(model.forward, backend="grove",
                                                   options={"reuse_state": True}), off)
    results["hf-auto"] = measure("hf-auto", lambda model: model.forward, {})
    if args.all:
        results["grove+hf-auto"] = measure(
            "grove+hf-auto", lambda model: torch.compile(model.forward, backend="grove"), {})
    for name, out in results.items():
        print("%s tokens equal eager's: %s" % (
            name, out if isinstance(out, str) else torch.equal(eager, out)))


if __name__ == "__main__":
    main()
