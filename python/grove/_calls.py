"""What a grove.Model keeps per calling thread, and the gate that lets close()
wait for the calls in flight (Note [One model, many threads] below).
"""

import ctypes
import threading
import time

from grove import _capi

# Note [One model, many threads]: a Model may be called from many threads at
# once. Everything a call writes and reads back (the reused input descriptions,
# the output array the C API fills, the count of outputs, the kept outputs that
# Note [Kept outputs through DLPack] watches) is the calling thread's own
# CallState; nothing per call is shared, so one thread's outputs are never read
# as another's (two threads sharing the output array made two torch tensors own
# one DLManagedTensor: a double free). Kept outputs are per thread too because
# each thread replays into trees of its own (cudagraph_trees), so only its own
# calls overwrite them. close() marks the model closed, then waits until no call
# is in flight before it destroys the handle; a call that starts after close()
# raises GroveError. Entering a call appends the thread's state to a list and
# then checks the closed flag; close() sets the flag and then waits for the list
# to empty: under the GIL one of the two sees the other. Guarded by
# ModelThreadsTest (tests/python/model_threads_test.py).


class CallState:
    """One thread's reusable objects for calls of one model."""

    __slots__ = ("descs", "layouts", "layout_arrays", "desc_items", "managed", "produced",
                 "produced_ref", "kept", "data_words", "batch_layouts", "cached")

    def __init__(self, input_count, output_count):
        self.descs = (_capi.TensorDesc * max(input_count, 1))()
        # The descriptions as 64-bit words: each one's first word is its data
        # pointer, so one strided slice assignment rewrites every pointer.
        self.data_words = memoryview(self.descs).cast("B").cast("Q")
        # Model.describe_borrowed's layouts of the last call by kind (shapes,
        # strides, dtypes, devices), or None.
        self.batch_layouts = None
        self.layouts = [None] * input_count
        self.layout_arrays = [None] * input_count
        self.desc_items = [self.descs[index] for index in range(input_count)]
        self.managed = (ctypes.c_void_p * max(output_count, 1))()
        self.produced = ctypes.c_size_t()
        self.produced_ref = ctypes.byref(self.produced)
        self.kept = []  # (weak reference to a returned tensor, its DLManagedTensor*)
        # Note [Outputs over cached storage] (capi/handout.cc): a CachedOutputs, made
        # by the model's first call that hands out that way.
        self.cached = None


class CallGate:
    """Counts a model's calls in flight (Note [One model, many threads])."""

    def __init__(self, input_count, output_count):
        self._input_count = input_count
        self._output_count = output_count
        self._local = threading.local()
        self._in_flight = []  # the CallState of every call in flight
        self._states = []  # every thread's CallState, for close()
        self._close_lock = threading.Lock()
        self.closed = False
        # What close() left held: DLPack's kept outputs (weak reference,
        # DLManagedTensor*) and the cached hand-out's orphans.
        self.closed_kept = []
        self.closed_orphans = []

    def state(self):
        """The calling thread's CallState."""
        try:
            return self._local.state
        except AttributeError:
            state = self._local.state = CallState(self._input_count, self._output_count)
            self._states.append(state)
            return state

    def enter(self):
        """Starts a call: the thread's CallState, or GroveError once closed."""
        state = self.state()
        self._in_flight.append(state)
        if self.closed:
            self._in_flight.remove(state)
            raise _capi.GroveError(1, "grove: the model is closed; compile it again to call it")
        return state

    def leave(self, state):
        self._in_flight.remove(state)

    def close(self):
        """Marks the model closed and waits for the calls in flight; False if
        it was closed already."""
        mine = getattr(self._local, "state", None)
        if mine is not None and any(state is mine for state in self._in_flight):
            raise _capi.GroveError(1, "grove: close() inside a call of the same model on the "
                                      "same thread would wait for itself; close it after the call")
        with self._close_lock:
            if self.closed:
                return False
            self.closed = True
            delay = 0.0001
            while self._in_flight:
                time.sleep(delay)
                delay = min(delay * 2, 0.01)
            # Note [Outputs of a closed model are poisoned] (cached_outputs.py):
            # what was kept is checked once the model is destroyed.
            for state in self._states:
                self.closed_kept.extend(state.kept)
                state.kept = []
                if state.cached is not None:
                    self.closed_orphans.extend(state.cached.close())
                    state.cached = None
            return True
