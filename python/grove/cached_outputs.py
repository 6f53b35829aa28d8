"""A graph backend's outputs handed to PyTorch as new tensors over torch
storage cached per output key, not through DLPack per call (Note [Outputs
over cached storage], capi/handout.cc). One CachedOutputs per model and
calling thread (its CallState, Note [One model, many threads], _calls.py).

The liveness the tree sees is unchanged: each call's DLManagedTensor (one
reference to grove's storage) stays here until a later call finds that no
tensor but the cached one uses its torch storage (torch's storage use count),
and a torch storage someone still holds leaves the cache and is watched as
Note [Kept outputs through DLPack] (outputs.py) watches kept outputs: checked
with grove_dlpack_check after every later call, the tensor handed out
poisoned through PyTorch's storage hook once grove reports it overwritten.
GROVE_DOOR_OUTPUTS=dlpack (read when a model is made) keeps the DLPack
hand-out, for timing both in one process.
"""

import ctypes
import os
import threading
import weakref

from grove import _capi
from grove._descs import _torch
from grove.outputs import _capsule_new, _from_dlpack, _storage_hook

# The cache holds at most this many tensors per model and thread; past it the
# cache starts over (outputs at new addresses each call, from eager segments,
# would otherwise grow it without end).
MAX_CACHED = 64

_ENTRY_TENSOR, _ENTRY_STORAGE, _ENTRY_BASE = range(3)
# References of closed models' outputs someone still holds: released by any
# later call once nobody does ([cached tensor, storage, base count, reference]).
# Every thread's calls and closes share the list, so they take the lock to
# read and change it: two threads releasing the same unheld reference would
# release it twice (Note [Orphaned outputs released once]).
_orphans = []
_orphans_lock = threading.Lock()
# Orphans of closes made while their thread held _orphans_lock (Note [A close
# inside the orphans' lock]); the holder moves them into _orphans.
_deferred = []
_holder = threading.local()  # .inside: this thread holds _orphans_lock (or is taking it)

# Note [Orphaned outputs released once]: a closed model's output that someone
# still holds is an orphan; whichever later call (of any model, on any
# thread) first finds nobody uses it releases its grove reference, and no
# other call does, since finding and removing orphans is one step under
# _orphans_lock. Test: CachedOutputsTest.test_orphans_of_many_threads_are_released_once.

# Note [A close inside the orphans' lock]: the locked regions allocate, so a
# garbage collection may run inside one and free a model, whose __del__
# closes it on the same thread: taking _orphans_lock again there would wait
# forever (it is not reentrant), and a reentrant lock would let the close
# change _orphans under the holder's release (a reference released twice).
# So a thread that holds the lock does not take it again: its close puts its
# orphans in _deferred and its poisoning waits; before letting the lock go
# the holder moves _deferred into _orphans and poisons each stale one (the
# destroy that made it stale ran inside the same collection, before).
# The flag is set before the lock is taken, so a collection that runs while
# it is set defers rather than waits. Test:
# OrphansLockTest.test_a_close_inside_the_locked_region_is_deferred_not_deadlocked
# (tests/python/cached_outputs_test.py).
def _take():
    """Takes _orphans_lock and returns True, or returns False at once where
    this thread holds it already (Note [A close inside the orphans' lock])."""
    if getattr(_holder, "inside", False):
        return False
    _holder.inside = True
    _orphans_lock.acquire()
    return True


def _give_back():
    """Moves the deferred orphans into _orphans, each stale one poisoned, then
    lets _orphans_lock go."""
    try:
        while _deferred:
            _adopt_deferred()
    finally:
        _orphans_lock.release()
        _holder.inside = False


def _adopt_deferred():
    moved = _deferred[:]
    del _deferred[:len(moved)]  # a close deferring meanwhile appends after them
    _orphans.extend(moved)
    check = _capi.fast_library().grove_dlpack_check
    for item in moved:
        if not item[3]:
            _poison_if_reported(item, check)


def available():
    """Whether this PyTorch has what the hand-out needs (the storage hook and
    storage use counts, PyTorch >= 2.1) and GROVE_DOOR_OUTPUTS allows it."""
    torch = _torch()
    if torch is None or os.environ.get("GROVE_DOOR_OUTPUTS", "cached") == "dlpack":
        return False
    return (_storage_hook() is not None
            and getattr(torch._C, "_storage_Use_Count", None) is not None)


class CachedOutputs:
    """One thread's hand-outs of one model's outputs (Note [Outputs over
    cached storage], capi/handout.cc)."""

    def __init__(self, output_count, use_count=None):
        """use_count: a storage's use count by its cdata (PyTorch's, unless given)."""
        torch = _torch()
        self._use_count = use_count or torch._C._storage_Use_Count
        self._detach = torch.Tensor.detach
        self.tensors = {}  # key -> [cached tensor, its storage's cdata, base use count]
        # The last call's outputs: (entry, weak reference to the tensor handed
        # out, its DLManagedTensor*, key).
        self.last = []
        # Outputs someone held past a later call: [entry, weak reference,
        # DLManagedTensor*, poisoned, key].
        self.held = []
        capacity = max(output_count, 1)
        self.release = (ctypes.c_void_p * capacity)()
        self.keys = (ctypes.c_uint64 * capacity)()
        self.release_counts = [ctypes.c_size_t(n) for n in range(capacity + 1)]

    def before_call(self):
        """Releases what nobody holds: the last call's references go into
        self.release (their count returned, for grove_model_run_handout);
        references held before and dropped since are released at once."""
        if (_orphans or _deferred) and _take():
            try:
                _release_unheld(_orphans, self._use_count)
            finally:
                _give_back()
        count = 0
        if self.last:
            use_count = self._use_count
            release = self.release
            for entry, handed, reference, key in self.last:
                if use_count(entry[_ENTRY_STORAGE]) == entry[_ENTRY_BASE]:
                    release[count] = reference
                    count += 1
                else:  # held: its storage leaves the cache, its reference stays
                    if self.tensors.get(key) is entry:
                        del self.tensors[key]
                    self.held.append([entry, handed, reference, False, key])
            self.last = []
        if self.held:
            for entry, key in _release_unheld(self.held, self._use_count):
                # Nobody uses it any more: the next hand-out of its key may
                # view it again (a loop that keeps each output until the
                # next call returns alternates between two cached tensors).
                if key not in self.tensors and len(self.tensors) < MAX_CACHED:
                    self.tensors[key] = entry
        return count

    def after_call(self, managed, produced):
        """The tensors of a call whose outputs are managed[0..produced) with
        keys self.keys[0..produced)."""
        tensors = self.tensors
        detach = self._detach
        results = []
        last = self.last
        references = managed[:produced]
        try:
            for key, reference in zip(self.keys[:produced], references):
                entry = tensors.get(key)
                if entry is None:
                    entry = self._cache(key, reference)
                value = detach(entry[_ENTRY_TENSOR])
                results.append(value)
                last.append((entry, weakref.ref(value), reference, key))
        except BaseException:
            # The references of outputs never handed out go at once.
            rest = references[len(results):]
            array = (ctypes.c_void_p * len(rest))(*rest)
            _capi.library().grove_dlpack_release(array, len(rest))
            raise
        if self.held:
            self.check_held()
        return results

    def _cache(self, key, reference):
        if len(self.tensors) >= MAX_CACHED:
            self.tensors.clear()
        unowned = ctypes.c_void_p()
        _capi.check(_capi.library().grove_dlpack_unowned(ctypes.c_void_p(reference),
                                                         ctypes.byref(unowned)))
        # A normal tensor even in a call under inference mode: a later call
        # outside it hands out views of it (a view made under inference mode
        # of a normal tensor is a normal tensor, as DLPack's would be there).
        with _torch().inference_mode(False):
            tensor = _from_dlpack()(_capsule_new(unowned.value, b"dltensor", None))
        storage = tensor.untyped_storage()._cdata
        entry = [tensor, storage, self._use_count(storage)]
        self.tensors[key] = entry
        return entry

    def check_held(self):
        """Poisons each held output grove reports overwritten or stale."""
        check = _capi.fast_library().grove_dlpack_check
        for item in self.held:
            if not item[3]:
                _poison_if_reported(item, check)

    def settle(self):
        """Before a call that is no run (mark_step_begin): the last call's
        references that nobody holds are released now."""
        count = self.before_call()
        if count:
            _capi.check(_capi.library().grove_dlpack_release(self.release, count))

    def close(self):
        """The model is closing: every reference nobody holds is released; the
        rest wait, as orphans, until nobody does. Returns the items that
        became orphans (for poison_stale_orphans once the model is gone)."""
        self.settle()
        moved = self.held
        self.held = []
        self.tensors = {}
        if not _take():  # a collection inside this thread's locked region closes this model
            _deferred.extend(moved)
            return moved
        try:
            _orphans.extend(moved)
            _release_unheld(_orphans, self._use_count)
        finally:
            _give_back()
        return moved


# Note [Outputs of a closed model are poisoned]: destroying a graph backend's
# last model of a device's tree (per thread) shuts the tree down: grove
# poisons the outputs it still tracks and releases its pool, so an output
# someone kept past close() views freed memory. Its torch tensor is poisoned
# then (PyTorch's storage hook, as for an output a replay overwrote), so that
# reading it raises with grove's message instead of returning what the memory
# holds next; an output whose tree lives on (other models still use it) stays
# valid and untouched. Model.close checks, after the destroy, the outputs the
# close kept: DLPack's kept outputs (Note [Kept outputs through DLPack]) and
# the cached hand-out's orphans (checked under _orphans_lock, only while
# still unreleased). Tests:
# CachedOutputsTest.test_an_output_kept_past_its_trees_end_is_poisoned and
# test_orphans_of_many_threads_are_released_once (PyTorch >= 2.1).
def poison_stale_orphans(items):
    """Poisons the torch tensor of each of `items` (outputs of a closed model
    that close() made orphans) still unreleased that grove reports stale
    (Note [Outputs of a closed model are poisoned])."""
    if not items or not _take():
        return  # a close inside the locked region: Note [A close inside the orphans' lock]
    try:
        check = _capi.fast_library().grove_dlpack_check
        waiting = {id(item) for item in _orphans}
        for item in items:
            if not item[3] and id(item) in waiting:
                _poison_if_reported(item, check)
    finally:
        _give_back()


def _poison_if_reported(item, check):
    """Poisons the torch tensor of `item` ([entry, handed, reference, poisoned,
    key]) when grove's check reports its hand-out overwritten or stale, with
    grove's message, and marks it poisoned."""
    if check(ctypes.c_void_p(item[2])) == 0:
        return
    item[3] = True
    value = item[1]()
    if value is not None:
        message = _capi.library().grove_last_error().decode("utf-8", "replace")
        _storage_hook()(value, "grove: " + message)


def _release_unheld(items, use_count):
    """Releases, and removes from `items`, every [entry, handed, reference,
    poisoned, key] whose storage nobody but the entry's cached tensor uses;
    returns their (entry, key)."""
    free = [item for item in items
            if use_count(item[0][_ENTRY_STORAGE]) == item[0][_ENTRY_BASE]]
    if not free:
        return []
    items[:] = [item for item in items if not any(item is other for other in free)]
    array = (ctypes.c_void_p * len(free))(*[item[2] for item in free])
    _capi.check(_capi.library().grove_dlpack_release(array, len(free)))
    return [(item[0], item[4]) for item in free]
