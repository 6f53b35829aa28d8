"""Note [Outputs over cached storage] (capi/handout.cc) on sim: a graph
backend's outputs are new torch tensors over one cached storage per output
key, equal to PyTorch's at every call; an output someone keeps is poisoned
once a later replay overwrites it, as through DLPack; a view of a kept
output keeps grove's reference until it is dropped; GROVE_DOOR_OUTPUTS=dlpack
gives the same values through DLPack; a model closed under a kept output
releases it once nobody holds it. Skips on a PyTorch without the storage hook
and storage use counts (PyTorch < 2.1, CI's 1.13), where the hand-out is
DLPack's (model_test covers that)."""
import ctypes
import gc
import os
import threading
import unittest

import torch

import grove
from grove import cached_outputs
import junit_main

SEED = 20261127
THREADS = 8
ROUNDS = 6

PROGRAM = {
    "name": "small",
    "inputs": [{"name": "x", "shape": [4, 8], "dtype": "f32"}],
    "params": [
        {"name": "w", "shape": [6, 8], "dtype": "f32", "init": {"kind": "zeros"}},
        {"name": "b", "shape": [6], "dtype": "f32", "init": {"kind": "zeros"}},
    ],
    "nodes": [
        {"name": "h", "op": "linear", "inputs": ["x", "w", "b"]},
        {"name": "y", "op": "tanh", "inputs": ["h"]},
        {"name": "z", "op": "relu", "inputs": ["h"]},
    ],
    "outputs": ["y", "z"],
}


def reference(x, w, b):
    h = x @ w.T + b
    return torch.tanh(h), torch.relu(h)


def poisoned_message(tensors):
    """The error reading the first of `tensors` raises, or ""."""
    for value in tensors:
        try:
            value.sum().item()
        except RuntimeError as error:
            return str(error)
    return ""


def readable(tensors):
    """Whether every one of `tensors` can be read (none is poisoned); an
    error that is not grove's poisoning is raised."""
    message = poisoned_message(tensors)
    if message and "grove" not in message:
        raise RuntimeError(message)
    return not message


class CachedOutputsTest(unittest.TestCase):
    def setUp(self):
        if not cached_outputs.available():
            self.skipTest("this PyTorch lacks the storage hook or storage use counts "
                          "(PyTorch >= 2.1), or GROVE_DOOR_OUTPUTS=dlpack is set: outputs "
                          "go through DLPack")
        self.generator = torch.Generator().manual_seed(SEED)
        self.w = torch.randn(6, 8, generator=self.generator)
        self.b = torch.randn(6, generator=self.generator)

    def model(self):
        return grove.compile(PROGRAM, backend="cudagraphs", params={"w": self.w, "b": self.b})

    def x(self):
        return torch.randn(4, 8, generator=self.generator)

    def check(self, outputs, x, what):
        for got, want in zip(outputs, reference(x, self.w, self.b)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6,
                                       msg="seed %d, %s" % (SEED, what))

    def test_replay_outputs_are_new_tensors_over_one_cached_storage(self):
        model = self.model()
        self.assertTrue(model._cached_outputs)
        seen = []
        for call in range(8):  # warm-up, recording, replays
            x = self.x()
            outputs = model(x)
            self.check(outputs, x, "call %d" % call)
            seen.append((id(outputs[0]), outputs[0].data_ptr(), outputs[1].data_ptr()))
            del outputs
        replays = seen[3:]
        self.assertEqual(len({(y, z) for _, y, z in replays}), 1,
                         "each replay writes the same memory: %s" % replays)
        cached = model._gate.state().cached
        self.assertEqual(cached.held, [], "no output was held past a call")
        self.assertLessEqual(len(cached.tensors), 6)
        entry_y = cached.tensors[cached.keys[0]]
        self.assertEqual(entry_y[0].data_ptr(), replays[0][1])

    def test_a_kept_output_is_poisoned_once_a_replay_overwrites_it(self):
        model = self.model()
        for _ in range(3):
            model(self.x())
        x = self.x()
        kept = model(x)[0]
        self.check((kept,), x, "the kept output before the next call")
        later_x = self.x()
        later = model(later_x)
        self.check(later, later_x, "the call after")
        with self.assertRaisesRegex(RuntimeError, "overwrote"):
            kept.sum()
        cached = model._gate.state().cached
        self.assertEqual(len(cached.held), 1)
        del kept, later
        model(self.x())
        self.assertEqual(cached.held, [], "the poisoned output's reference went once dropped")

    def test_a_view_of_a_kept_output_keeps_the_reference_until_dropped(self):
        model = self.model()
        for _ in range(3):
            model(self.x())
        y = model(self.x())[0]
        view = y[1:3]
        del y
        model(self.x())
        cached = model._gate.state().cached
        self.assertEqual(len(cached.held), 1, "the view holds the storage")
        view.sum()  # grove's memory is still referenced (the tensor, not the view, is poisoned)
        del view
        x = self.x()
        outputs = model(x)
        self.check(outputs, x, "after the view went")
        self.assertEqual(cached.held, [])

    def test_keeping_every_output_poisons_all_but_the_last(self):
        model = self.model()
        for _ in range(3):
            model(self.x())
        inputs = [self.x() for _ in range(4)]
        kept = [model(x) for x in inputs]
        for outputs in kept[:-1]:
            with self.assertRaisesRegex(RuntimeError, "overwrote"):
                outputs[0].sum()
        self.check(kept[-1], inputs[-1], "the last call's outputs")

    def test_a_loop_keeping_each_output_until_the_next_call_returns(self):
        # `y = model(x)` holds the previous y during the call: each is
        # poisoned by the next replay, and the cache alternates between two
        # tensors per output instead of making one per call.
        model = self.model()
        previous = None
        for call in range(10):
            x = self.x()
            outputs = model(x)
            self.check(outputs, x, "call %d" % call)
            if call >= 4:
                with self.assertRaisesRegex(RuntimeError, "overwrote"):
                    previous[0].sum()
            previous = outputs
        cached = model._gate.state().cached
        self.assertLessEqual(len(cached.held), 2)
        self.assertLessEqual(len(cached.tensors), 6)

    def test_outputs_made_under_inference_mode_are_normal_tensors_outside_it(self):
        model = self.model()
        with torch.inference_mode():
            for _ in range(4):  # the cache's tensors are made here
                model(self.x())
        x = self.x()
        y, _ = model(x)
        self.check((y,), x, "outside inference mode")
        self.assertFalse(y.is_inference())
        y.add_(1.0)  # allowed on a normal tensor only

    def test_the_dlpack_switch_gives_the_same_values(self):
        model = self.model()
        os.environ["GROVE_DOOR_OUTPUTS"] = "dlpack"
        try:
            plain = self.model()
        finally:
            os.environ.pop("GROVE_DOOR_OUTPUTS")
        self.assertFalse(plain._cached_outputs)
        for call in range(5):
            x = self.x()
            for got, want in zip(model(x), plain(x)):
                self.assertTrue(torch.equal(got, want), "call %d" % call)

    def test_switching_the_hand_out_between_calls_keeps_values_and_poisoning(self):
        model = self.model()
        for _ in range(3):
            model(self.x())
        for enabled in (False, True, False, True):
            self.assertEqual(model.use_cached_outputs(enabled), enabled)
            x = self.x()
            kept = model(x)[0]
            self.check((kept,), x, "hand-out cached=%s" % enabled)
            later_x = self.x()
            self.check(model(later_x), later_x, "the call after, cached=%s" % enabled)
            with self.assertRaisesRegex(RuntimeError, "overwrote"):
                kept.sum()
            del kept

    def test_a_closed_model_releases_a_kept_output_once_dropped(self):
        model = self.model()
        for _ in range(4):
            model(self.x())
        kept = model(self.x())[0]
        model.close()
        self.assertEqual(len(cached_outputs._orphans), 1)
        del kept
        other = self.model()
        other(self.x())
        self.assertEqual(cached_outputs._orphans, [])

    def test_an_output_kept_past_its_trees_end_is_poisoned(self):
        # Note [Outputs of a closed model are poisoned]: in a thread of its
        # own the model is its tree's last, so close() ends the tree and
        # releases the pool under the kept output, through either hand-out.
        for cached in (True, False):
            outcome = {}

            def work():
                try:
                    model = self.model()
                    self.assertEqual(model.use_cached_outputs(cached), cached)
                    for _ in range(3):
                        model(self.x())
                    x = self.x()
                    kept = model(x)
                    self.check(kept, x, "cached %s, before close" % cached)
                    model.close()
                    outcome["readable"] = readable(kept)
                    outcome["message"] = poisoned_message(kept)
                except BaseException as error:  # reported by the main thread
                    outcome["failure"] = "%s: %s" % (type(error).__name__, error)

            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
            self.assertNotIn("failure", outcome, outcome.get("failure"))
            self.assertFalse(outcome["readable"], "cached %s: an output of a closed model "
                                                  "(its tree's last) was read" % cached)
            self.assertIn("grove", outcome["message"], "cached %s" % cached)

    def test_orphans_of_many_threads_are_released_once(self):
        # Note [Orphaned outputs released once]: threads close models whose
        # outputs they still hold, then drop them, while others call their own
        # models (each call releases the orphans nobody holds): every value
        # read is right (an output of a closed model is refused: Note
        # [Outputs of a closed model are poisoned]), no release fails, and no
        # orphan is left.
        errors = []
        start = threading.Barrier(THREADS)

        def work(index):
            try:
                generator = torch.Generator().manual_seed(SEED + index)
                start.wait()
                for _ in range(ROUNDS):
                    model = self.model()
                    x = torch.randn(4, 8, generator=generator)
                    kept = model(x)
                    model.close()
                    # Note [Outputs of a closed model are poisoned]: the model
                    # was its thread's tree's last, so its output is refused.
                    if readable(kept):
                        self.check(kept, x, "thread %d, an output of a closed model" % index)
                    del kept
                    other = self.model()
                    for _ in range(3):
                        y = torch.randn(4, 8, generator=generator)
                        self.check(other(y), y, "thread %d, a later model" % index)
                    other.close()
            except BaseException as error:  # reported by the main thread
                errors.append("thread %d: %s: %s" % (index, type(error).__name__, error))

        threads = [threading.Thread(target=work, args=(index,)) for index in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])
        last = self.model()
        last(self.x())
        last.close()
        self.assertEqual(cached_outputs._orphans, [])


class GcCloser:
    """Garbage (a reference cycle) whose collection closes `cached`, as a
    model's __del__ does."""

    def __init__(self, cached, closed):
        self.cached = cached
        self.closed = closed
        self.me = self

    def __del__(self):
        self.closed.append(self.cached.close())


class OrphansLockTest(unittest.TestCase):
    """Note [A close inside the orphans' lock], with grove's real DLPack
    references of a sim model's outputs and stand-in storage use counts (no
    PyTorch storage API needed: runs on CI's PyTorch 1.13 too)."""

    def setUp(self):
        generator = torch.Generator().manual_seed(SEED)
        self.model = grove.compile(PROGRAM, backend="eager", params={
            "w": torch.randn(6, 8, generator=generator), "b": torch.randn(6, generator=generator)})
        self.x = torch.randn(4, 8, generator=generator)
        self.counts = {}  # stand-in storage -> its use count; 1 means only the cache uses it
        # Orphans earlier tests of this process left (real storages, PyTorch's
        # use counts) wait aside while this test owns the list.
        with cached_outputs._orphans_lock:
            self.earlier = cached_outputs._orphans[:]
            del cached_outputs._orphans[:]

    def tearDown(self):
        with cached_outputs._orphans_lock:
            cached_outputs._orphans.extend(self.earlier)

    def held_item(self, storage):
        """[entry, handed, reference, poisoned, key] of an output someone holds."""
        managed = ctypes.c_void_p()
        output = self.model.run(self.x)[0]
        grove._capi.check(grove._capi.library().grove_tensor_to_dlpack(
            output._handle, ctypes.byref(managed)))
        self.counts[storage] = 2
        return [[None, storage, 1], lambda: None, managed.value, False, storage]

    def test_a_close_inside_the_locked_region_is_deferred_not_deadlocked(self):
        closed = []
        collected = []

        def use_count(storage):
            # A collection inside the locked region, once: it closes `other`.
            if cached_outputs._orphans_lock.locked() and not collected:
                collected.append(gc.collect())
            return self.counts[storage]

        other = cached_outputs.CachedOutputs(1, use_count=lambda storage: self.counts[storage])
        other.held = [self.held_item("other")]
        closing = cached_outputs.CachedOutputs(1, use_count=use_count)
        closing.held = [self.held_item("closing")]
        GcCloser(other, closed)
        del other
        thread = threading.Thread(target=closing.close, daemon=True)
        thread.start()
        thread.join(timeout=20)
        self.assertFalse(thread.is_alive(), "close() waited forever for _orphans_lock, taken "
                                            "again by a close inside a collection in its region")
        self.assertTrue(collected and len(closed) == 1, "the collection closed the other model")
        self.assertEqual(cached_outputs._deferred, [], "the holder moved the deferred orphans in")
        keys = sorted(item[4] for item in cached_outputs._orphans)
        self.assertEqual(keys, ["closing", "other"])
        # Nobody holds them any more: the next call releases each once.
        self.counts.update(closing=1, other=1)
        later = cached_outputs.CachedOutputs(1, use_count=lambda storage: self.counts[storage])
        self.assertEqual(later.before_call(), 0)
        self.assertEqual(cached_outputs._orphans, [])


if __name__ == "__main__":
    junit_main.main()
