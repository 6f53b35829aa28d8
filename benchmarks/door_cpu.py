"""grove's Python per call of the torch door, on this machine's CPU (sim
device, PyTorch 1.13 without dynamo): issue 33 (inference at batch 1) and
issue 34 part 1 (the training door per stage).

    python3 benchmarks/door_cpu.py [--models mlp,gpt_block] [--blocks 30] [--calls 50]
        [--variants LABEL:NAME=VALUE[+NAME=VALUE],...] [--json out.json] [--profile]
        [--kinds inference,training] [--clock thread|wall] [--grads none|zeroed]

Each model is a function of its parameters (nn.Parameter inputs, bound by
grove as dynamo's graphs bind them) and a batch-1 input, compiled in
"cudagraphs" mode on sim: mlp (4 x Linear 64 + GELU), mlp_deep (64 x Linear
16 + GELU: 128 parameters, little compute; not in the default list), gpt_block (a pre-LN
block, width 64, 4 heads, 8 tokens) and decode (inference only:
static_cache_decoder.py's decoder stepping one token, its KV caches static
buffers):
  inference   grove.torch.compile_graph, called under no_grad: grove's
              CompiledGraph.__call__, what dynamo calls at every door call
  floor       the harness alone: no_grad around a function that returns the
              outputs (what inference's python column holds besides grove)
  forward     the training door's own autograd function (Note [The door's own
              autograd function], grove/door_function.py) over PyTorch 1.13's
              AOTAutograd partition: the call that returns the output
  backward    loss.backward() through that function (PyTorch's autograd
              engine, the door's backward, its gradients into .grad)
  floor_forward, floor_backward  the same stages through an autograd.Function
              that returns the door's output and gradients computed once:
              autograd's own work, what the python column holds besides grove
Every grove C call is timed (a clock around the ctypes functions, installed
before anything compiles; by default the thread's CPU time, which other
processes on a shared machine do not inflate) and taken off: "python" is a call's wall time less
its C calls, the host work grove adds around the C call (on sim the C call
runs the kernels on the CPU, so its own time is no GPU host's). Per row:
python us (median of blocks), C us, PyTorch's own share where one is known
(the backward's autograd engine is in python), Python function calls per
call (cProfile), GC-tracked objects a call leaves alive (gc's generation-0
count with the collector off, outputs kept) and gen-0 collections per 1000
calls (the collector on, outputs dropped at once: what a loop pays).

--variants compiles one more door per LABEL with those environment variables
set while it compiles and while it runs (switches read at compilation or per
call alike); every variant of a model is timed in turns, the order rotated
every block (A/B in one process). CPU-only figures: the GPU host's
confirmation is owed.
"""
import argparse
import copy
import cProfile
import gc
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
sys.path.insert(0, os.path.join(here, "..", "tests", "python_support"))

_KEEP_GRAD = [False]  # --grads zeroed
_TIMER = [time.perf_counter]  # --clock: perf_counter (wall) or thread_time (this thread's CPU)


class Clock:
    """Seconds spent inside wrapped C calls (door_host_time.py's, on --clock's timer)."""

    def __init__(self):
        self.in_c = 0.0
        self.calls = 0

    def c_call(self, function):
        def timed(*args):
            timer = _TIMER[0]
            start = timer()
            try:
                return function(*args)
            finally:
                self.in_c += timer() - start
                self.calls += 1
        return timed

    def overhead(self, repeats=20000):
        """Seconds the clock itself adds outside the C time it counts, per
        wrapped call (taken off the python column)."""
        timer = _TIMER[0]
        bare = len
        wrapped = self.c_call(len)
        best = None
        for _ in range(5):
            before, start = self.in_c, timer()
            for _ in range(repeats):
                wrapped(())
            with_clock = timer() - start - (self.in_c - before)
            start = timer()
            for _ in range(repeats):
                bare(())
            without = timer() - start
            value = (with_clock - without) / repeats
            best = value if best is None else min(best, value)
        self.calls -= 5 * repeats
        return max(best, 0.0)

_C_CALLS = ("grove_model_run_dlpack", "grove_model_run_dlpack_invocation",
            "grove_model_run_handout", "grove_model_run_keeping", "grove_model_run_with_kept",
            "grove_dlpack_check", "grove_dlpack_release", "grove_invocation_begin",
            "grove_invocation_end", "grove_hand_out_gradients", "grove_model_run_keeping_all")


def instrument(clock):
    """Times every grove C call a door call makes (from now on: the models
    compiled later read the wrapped functions)."""
    from grove import _capi

    fast = _capi.fast_library()
    for name in _C_CALLS:
        try:
            function = getattr(fast, name)
        except AttributeError:  # an older library
            continue
        setattr(fast, name, clock.c_call(function))
    lib = _capi.library()
    for name in ("grove_hand_out_gradients", "grove_dlpack_release"):
        try:
            setattr(lib, name, clock.c_call(getattr(lib, name)))
        except AttributeError:
            continue


def models(names):
    import gpu_models
    from grove import training

    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        torch.nn.functional.scaled_dot_product_attention = training.math_attention
    made = {
        "mlp": lambda: (gpu_models.Mlp(width=64, depth=4), lambda: torch.randn(1, 64)),
        "gpt_block": lambda: (gpu_models.GptBlock(64, 4), lambda: torch.randn(1, 8, 64)),
        # Many parameters (128), little compute: what grows with the parameter count.
        "mlp_deep": lambda: (gpu_models.Mlp(width=16, depth=64), lambda: torch.randn(1, 16)),
        # static_cache_decoder.py's decoder, one token at a time (inference only).
        "decode": lambda: (_decoder(), lambda: torch.randint(0, 64, (1, 1))),
    }
    for name in names:
        torch.manual_seed(0)
        module, make_input = made[name]()
        yield name, module, make_input


def _decoder():
    from static_cache_decoder import StaticCacheDecoder

    return StaticCacheDecoder().eval()


def functional(module):
    """(function of (parameters..., x), the parameters as nn.Parameters)."""
    from torch.nn.utils import stateless

    names = [name for name, _ in module.named_parameters()]
    params = [torch.nn.Parameter(p.detach().clone()) for p in module.parameters()]

    def function(*args):
        return (stateless.functional_call(module, dict(zip(names, args[:-1])), (args[-1],)),)

    return function, params


def inference_door(module, x):
    from grove.dynamo_backend import compile_graph

    if type(module).__name__ == "StaticCacheDecoder":
        # A decode step (Note [Static inputs that move]'s caches, static):
        # parameters and KV-cache buffers bound, the token and its position per call.
        from static_cache_decoder import functional_step

        function, params = functional_step(module, static_buffers=True)
        x = [x, torch.tensor([5])]
    else:
        function, params = functional(module)
        x = [x]
    with torch.no_grad():
        door = compile_graph(function, params + x)
    args = params + x

    def call():
        with torch.no_grad():
            return door(*args)

    outputs = call()

    def floor():  # the harness alone: no_grad around a function returning the outputs
        with torch.no_grad():
            return outputs

    return {"inference": call, "floor": floor}, door


def training_door(module, x):
    """The door's own autograd function over PyTorch 1.13's AOTAutograd
    partition (door_function_test.py's way of building it)."""
    from door_function_test import partition_of
    from grove import door_function
    from grove.training_steps import StepCompiler

    forward, backward = partition_of(module, x)
    params = [torch.nn.Parameter(p.detach().clone()) for p in module.parameters()]
    compiler = StepCompiler("cudagraphs", device="sim", name="door", lazy=True)
    compiler.user_outputs = 1
    # GROVE_DOOR_GRADIENTS=direct (a --variants switch): as grove.torch's door
    # picks them (Note [Gradients set directly by the door's function]).
    direct = (door_function.direct_positions(params + [x]) if door_function.direct_gradients()
              else ())
    own = door_function.door_function(forward, backward, 1, [True] * len(params) + [False],
                                      compiler, single=True, direct=direct)
    # As grove.torch hands it to dynamo (Note [Fake calls of the door's
    # function]): AOTAutograd's function would take calls on fake tensors.
    call = door_function.real_calls_only(own, None)
    args = params + [x]
    held = []

    def step_forward():
        out = call(*args)
        held.append(out)
        return out

    def step_backward():
        out = held.pop()
        out.sum().backward()
        return None

    def zero():
        if _KEEP_GRAD[0]:  # zero_grad(set_to_none=False): PyTorch 1.13's default
            for p in params:
                if p.grad is not None:
                    p.grad.zero_()
            return
        for p in params:
            p.grad = None

    for _ in range(3):
        zero()
        step_forward()
        step_backward()
    output = held_output = call(*args).detach().clone()
    gradients = [p.grad.detach().clone() for p in params] + [None]
    del held_output

    class Floor(torch.autograd.Function):
        """The training floor: an autograd.Function over the same arguments
        whose forward returns the door's output and whose backward returns
        its gradients, computed once (autograd's own work per stage)."""

        @staticmethod
        def forward(ctx, *arguments):
            return output.detach()

        @staticmethod
        def backward(ctx, gradient):
            return tuple(value.detach() if value is not None else None for value in gradients)

    floor_held = []

    def floor_forward():
        out = Floor.apply(*args)
        floor_held.append(out)
        return out

    def floor_backward():
        floor_held.pop().sum().backward()

    return {"forward": step_forward, "backward": step_backward, "zero": zero,
            "floor_forward": floor_forward, "floor_backward": floor_backward}, None


class Variant:
    def __init__(self, label, environment):
        self.label = label
        self.environment = environment

    def __enter__(self):
        self.saved = {name: os.environ.get(name) for name in self.environment}
        os.environ.update(self.environment)
        return self

    def __exit__(self, *exc):
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        return False


def time_block(clock, stage, calls, before=None, overhead=0.0):
    """(python seconds, C seconds) per call of one block of `calls` calls;
    `overhead`: the clock's own seconds per wrapped C call, taken off."""
    python = c = 0.0
    for _ in range(calls):
        if before is not None:
            before()
        c_before, count_before = clock.in_c, clock.calls
        timer = _TIMER[0]
        start = timer()
        stage()
        wall = timer() - start
        spent = clock.in_c - c_before
        python += wall - spent - overhead * (clock.calls - count_before)
        c += spent
    return python / calls, c / calls


def stage_plan(kind, stages):
    """[(stage name, callable, a callable to run before each call)]."""
    if kind == "inference":
        return [("inference", stages["inference"], None), ("floor", stages["floor"], None)]
    zero = stages["zero"]
    return (_training_pair("", stages["forward"], stages["backward"], zero)
            + _training_pair("floor_", stages["floor_forward"], stages["floor_backward"], zero))


def _training_pair(prefix, forward, backward, zero):
    """The plan's forward and backward entries of one training step."""
    def before_forward():
        if backward_pending[0]:
            backward()
        zero()

    backward_pending = [False]

    def timed_forward():
        forward()
        backward_pending[0] = True

    def before_backward():
        if not backward_pending[0]:
            zero()
            forward()

    def timed_backward():
        backward()
        backward_pending[0] = False

    return [(prefix + "forward", timed_forward, before_forward),
            (prefix + "backward", timed_backward, before_backward)]


def counts(clock, stage, before, calls=200):
    """(Python function calls, GC-tracked objects left alive, gen-0
    collections per 1000 calls) per call of `stage`."""
    profile = cProfile.Profile()
    for _ in range(calls // 4):
        if before is not None:
            before()
        profile.enable()
        stage()
        profile.disable()
    function_calls = pstats.Stats(profile).total_calls / (calls // 4)
    kept = []
    gc.collect()
    gc.disable()
    try:
        alive = 0
        for _ in range(calls):
            if before is not None:
                before()
            start = gc.get_count()[0]
            kept.append(stage())
            alive += gc.get_count()[0] - start
    finally:
        gc.enable()
    del kept
    collections = [0]

    def note(phase, info):
        if phase == "start" and info["generation"] == 0:
            collections[0] += 1

    gc.collect()
    gc.callbacks.append(note)
    try:
        for _ in range(calls):
            if before is not None:
                before()
            stage()
    finally:
        gc.callbacks.remove(note)
    return function_calls, alive / calls, collections[0] * 1000.0 / calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,gpt_block,decode")
    parser.add_argument("--kinds", default="inference,training")
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--variants", default="",
                        help="LABEL:NAME=VALUE[+NAME=VALUE],... (A/B in one process)")
    parser.add_argument("--clock", default="thread", choices=("thread", "wall"),
                        help="thread: this thread's CPU time (time.thread_time, what other "
                        "processes on a shared machine do not add to); wall: perf_counter")
    parser.add_argument("--grads", default="none", choices=("none", "zeroed"),
                        help="before each training step: .grad set to None (zero_grad's "
                        "default on PyTorch 2.x) or zeroed in place (set_to_none=False, "
                        "1.13's default: the handed gradients are still .grad at the forward)")
    parser.add_argument("--json", default="")
    parser.add_argument("--profile", action="store_true",
                        help="print the top functions by own time per stage (cProfile)")
    args = parser.parse_args()
    _KEEP_GRAD[0] = args.grads == "zeroed"
    if args.clock == "thread":
        _TIMER[0] = time.thread_time
    variants = [Variant("default", {})]
    for item in filter(None, args.variants.split(",")):
        label, _, assignments = item.partition(":")
        environment = dict(pair.split("=", 1) for pair in assignments.split("+") if pair)
        variants.append(Variant(label, environment))
    clock = Clock()
    instrument(clock)
    overhead = clock.overhead()
    print("the clock's own time per wrapped C call: %.2f us (taken off)" % (overhead * 1e6))
    rows = []
    for name, module, make_input in models(args.models.split(",")):
        for kind in args.kinds.split(","):
            built = []
            if name == "decode" and kind != "inference":
                continue
            for variant in variants:
                with variant:
                    copy_module = copy.deepcopy(module)
                    x = make_input()
                    build = inference_door if kind == "inference" else training_door
                    stages, _ = build(copy_module, x)
                    built.append((variant, stage_plan(kind, stages)))
            samples = {}
            for block in range(args.blocks):
                order = built[block % len(built):] + built[:block % len(built)]
                for variant, plan in order:
                    with variant:
                        for stage, call, before in plan:
                            samples.setdefault((variant.label, stage), []).append(
                                time_block(clock, call, args.calls, before, overhead))
            for variant, plan in built:
                with variant:
                    for stage, call, before in plan:
                        blocks = samples[(variant.label, stage)][2:]  # the first two warm up
                        python = statistics.median(p for p, _ in blocks) * 1e6
                        c_time = statistics.median(c for _, c in blocks) * 1e6
                        function_calls, alive, collections = counts(clock, call, before)
                        row = {"model": name, "stage": stage, "variant": variant.label,
                               "python_us": round(python, 2), "c_us": round(c_time, 2),
                               "function_calls": round(function_calls, 1),
                               "gc_objects_alive": round(alive, 2),
                               "gen0_per_1000": round(collections, 1)}
                        rows.append(row)
                        if args.profile:
                            profile = cProfile.Profile()
                            for _ in range(100):
                                if before is not None:
                                    before()
                                profile.enable()
                                call()
                                profile.disable()
                            print("--- %s %s %s" % (name, stage, variant.label))
                            pstats.Stats(profile).sort_stats("tottime").print_stats(18)
    header = "%-10s %-10s %-14s %10s %9s %9s %9s %9s" % (
        "model", "stage", "variant", "python us", "C us", "py calls", "gc alive", "gen0/1k")
    print(header)
    print("-" * len(header))
    for row in rows:
        print("%-10s %-10s %-14s %10.2f %9.2f %9.1f %9.2f %9.1f" % (
            row["model"], row["stage"], row["variant"], row["python_us"], row["c_us"],
            row["function_calls"], row["gc_objects_alive"], row["gen0_per_1000"]))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"benchmark": "door_cpu", "torch": torch.__version__, "device": "sim",
                       "blocks": args.blocks, "calls": args.calls, "rows": rows}, out,
                      indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
