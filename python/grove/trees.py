"""The calling thread's trees of CUDA graphs (ThreadTrees, entered from
another thread) and invocations that run several models' calls as one
generation of those trees.
"""

import ctypes
import threading

from grove import _capi

class ThreadTrees:
    """One thread's trees of CUDA graphs (grove_trees_of_thread), entered from
    another thread with `with trees:` so that the calls made there land in
    them: the backward that PyTorch's autograd runs on its device thread uses
    the forward's trees (Note [Trees of another thread],
    cudagraph_trees/tree_manager.h)."""

    def __init__(self):
        handle = ctypes.c_void_p()
        _capi.check(_capi.library().grove_trees_of_thread(ctypes.byref(handle)))
        self._handle = handle
        self.thread = threading.get_ident()

    def __enter__(self):
        _capi.check(_capi.library().grove_trees_enter(self._handle))
        return self

    def __exit__(self, *exc):
        _capi.check(_capi.library().grove_trees_exit())
        return False

    def __del__(self):
        try:
            lib = _capi._library
            if lib is not None and getattr(self, "_handle", None):
                lib.grove_trees_destroy(self._handle)
                self._handle = None
        except (AttributeError, TypeError):  # interpreter shutdown: the module is gone
            pass


_thread_state = threading.local()


class invocation:
    """Runs the graph calls made inside it, on this thread, as one generation
    of grove's trees, so that an output of one model may be another's input
    (Note [Invocations of several models], cudagraph_trees/generations.h).
    key=None opens a fresh invocation; an integer key below 2**63 continues
    earlier invocations under the same key.

        with grove.invocation():
            (h,) = first(x)
            (y,) = second(h)
    """

    def __init__(self, key=None):
        self.key = int(key or 0)

    def __enter__(self):
        # The torch door opens one around every call: the fast library.
        _capi.check(_capi.fast_library().grove_invocation_begin(self.key))
        return self

    def __exit__(self, *exc):
        _capi.check(_capi.fast_library().grove_invocation_end())
        return False


def thread_trees():
    """The calling thread's ThreadTrees (one handle per thread)."""
    trees = getattr(_thread_state, "trees", None)
    if trees is None:
        trees = _thread_state.trees = ThreadTrees()
    return trees
