"""Which object's release aborts ddp_door.py at interpreter exit
(THPVariable_clear: use_count() == 1 INTERNAL ASSERT, issue 34)? Runs
ddp_door.py's main with its arguments, then ends the way GROVE_EXIT_PROBE says:

  plain    a normal exit, with faulthandler on: the abort prints the Python
           stack that was running (the function whose release aborts)
  release  grove's door state released first (grove.exit_release, Note [Door
           state released at exit]), then a normal exit
  trace    a normal exit, every Python call after the last atexit hook
           written to GROVE_EXIT_TRACE (default exit_trace.txt): the calls
           the final collection makes before the abort
  garbage  the cyclic garbage left after every atexit hook, listed (types,
           tensors and their referrers) instead of collected; then os._exit(0)

    torchrun --standalone --nproc_per_node 1 benchmarks/exit_probe.py \
        --cases mlp16x512_b32 --iters 10 --variants grove
"""
import atexit
import collections
import faulthandler
import gc
import os
import runpy
import sys

MODE = os.environ.get("GROVE_EXIT_PROBE", "plain")
HERE = os.path.dirname(os.path.abspath(__file__))


def _trace_calls():
    descriptor = os.open(os.environ.get("GROVE_EXIT_TRACE", "exit_trace.txt"),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def note(frame, event, arg):
        if event == "call":
            code = frame.f_code
            line = "call %s %s:%d\n" % (code.co_qualname if hasattr(code, "co_qualname")
                                        else code.co_name, code.co_filename, frame.f_lineno)
        elif event == "c_call":
            line = "c_call %s\n" % getattr(arg, "__qualname__", repr(arg))
        else:
            return
        os.write(descriptor, line.encode("utf-8", "replace"))

    os.write(descriptor, b"-- after the last atexit hook\n")
    gc.callbacks.append(lambda phase, info: os.write(
        descriptor, ("gc %s %s\n" % (phase, info)).encode()))
    sys.setprofile(note)


def _list_garbage():
    import torch

    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    garbage = list(gc.garbage)
    print("exit_probe: cyclic garbage after every atexit hook: %d objects, types %s" % (
        len(garbage), collections.Counter(type(o).__name__ for o in garbage).most_common(20)))
    inside = {id(o) for o in garbage}
    for tensor in [o for o in garbage if isinstance(o, torch.Tensor)][:10]:
        print("  tensor %s %s%s" % (tuple(tensor.shape), tensor.dtype,
                                    " (parameter)" if isinstance(tensor, torch.nn.Parameter)
                                    else ""))
        for referrer in gc.get_referrers(tensor):
            if id(referrer) in inside:
                print("     <- %s %s" % (type(referrer).__name__,
                                         getattr(referrer, "__qualname__", "")))
    sys.stdout.flush()
    os._exit(0)


def main():
    faulthandler.enable(all_threads=False)
    # Registered first, so it runs after every other atexit hook.
    if MODE == "trace":
        atexit.register(_trace_calls)
    elif MODE == "garbage":
        atexit.register(_list_garbage)
    sys.argv = [os.path.join(HERE, "ddp_door.py")] + sys.argv[1:]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as done:
        print("exit_probe: ddp_door exited with %s" % done.code, flush=True)
    if MODE == "release":
        from grove import exit_release

        print("exit_probe: released %s" % exit_release.release_door_state(), flush=True)
    print("exit_probe: mode %s, leaving through the interpreter's exit" % MODE, flush=True)


if __name__ == "__main__":
    main()
