"""Releasing grove's door state before the interpreter's final teardown
(issue 34: the training door over torch's DistributedDataParallel aborts at
exit in THPVariable_clear; Note [Door state released at exit]).
"""

import atexit
import gc
import os
import sys

from grove import _descs

# Note [Door state released at exit]: with GROVE_EXIT_RELEASE=1 (read when
# grove.torch is imported), an atexit hook drops dynamo's compiled code (the
# only holder of the door's graphs), closes every grove Model still alive
# (their gradients copied out of the pool, their outputs released or
# poisoned) and collects, while every module is still whole, so that none of
# grove's objects is first freed inside the interpreter's last collection.
# Off by default: session 21's r1 found the abort's source with it (Note [No
# close while the interpreter finalizes], model.py, is the fix); it stays as a
# way to release the door's device memory before exit. Test: ExitReleaseTest
# (tests/python/exit_release_test.py).
def release_door_state():
    """Drops dynamo's compiled code, closes every live grove Model and
    collects; returns {models_closed, held_before, held_after} (held: the
    borrowed objects grove's descriptions still keep)."""
    held_before = len(_descs._held)
    dynamo = sys.modules.get("torch._dynamo")  # never imported here just to be reset
    if dynamo is not None:
        try:
            dynamo.reset()
        except Exception:  # one failing at exit: close what is left
            pass
    gc.collect()
    from grove.model import Model

    closed = 0
    for value in gc.get_objects():
        # By type, not isinstance: that reads __class__, which some module
        # proxies answer with a deprecation warning.
        if issubclass(type(value), Model) and getattr(value, "_handle", None):
            value.close()
            closed += 1
    gc.collect()
    return {"models_closed": closed, "held_before": held_before,
            "held_after": len(_descs._held)}


def _release_at_exit():
    try:
        counts = release_door_state()
    except Exception as error:  # exit goes on; the abort it was meant to avoid may follow
        counts = {"error": "%s: %s" % (type(error).__name__, error)}
    if os.environ.get("GROVE_EXIT_RELEASE") == "verbose":
        print("grove: door state released at exit: %s" % counts, flush=True)


def install():
    """Registers the hook where GROVE_EXIT_RELEASE is 1 or verbose; returns whether it did."""
    if os.environ.get("GROVE_EXIT_RELEASE", "0") not in ("1", "verbose"):
        return False
    atexit.register(_release_at_exit)
    return True
