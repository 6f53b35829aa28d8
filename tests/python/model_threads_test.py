"""One grove.Model called from many threads on sim (Note [One model, many
threads], python/grove/_calls.py): every thread gets its own results, and
close() waits for the calls in flight, after which calls raise GroveError."""
import threading
import time
import unittest

import numpy as np
import torch

import grove
import junit_main

PROGRAM = {
    "name": "threads",
    "inputs": [{"name": "x", "shape": [4, 8], "dtype": "f32"}],
    "params": [
        {"name": "w", "shape": [6, 8], "dtype": "f32", "init": {"kind": "zeros"}},
        {"name": "b", "shape": [6], "dtype": "f32", "init": {"kind": "zeros"}},
    ],
    "nodes": [
        {"name": "h", "op": "linear", "inputs": ["x", "w", "b"]},
        {"name": "y", "op": "tanh", "inputs": ["h"]},
        {"name": "z", "op": "exp", "inputs": ["y"]},
    ],
    "outputs": ["y", "z"],
}
THREADS = 8
CALLS = 1000
SEED = 3535


def run_threads(target):
    """Runs target(index) on THREADS threads started together; returns the
    exception each raised (None for none)."""
    errors = [None] * THREADS
    barrier = threading.Barrier(THREADS)

    def body(index):
        try:
            barrier.wait()
            target(index)
        except BaseException as error:  # reported by the test, not lost in the thread
            errors[index] = error

    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


class ModelThreadsTest(unittest.TestCase):
    def setUp(self):
        generator = torch.Generator().manual_seed(SEED)
        self.w = torch.randn(6, 8, generator=generator)
        self.b = torch.randn(6, generator=generator)
        # Each thread cycles through inputs of its own: a result computed from
        # another thread's input, or read from its outputs, is caught.
        self.inputs = [[torch.randn(4, 8, generator=generator) for _ in range(4)]
                       for _ in range(THREADS)]

    def expected(self, x):
        y = torch.tanh(x @ self.w.T + self.b)
        return y, torch.exp(y)

    def check_threads(self, backend):
        model = grove.compile(PROGRAM, backend=backend, params={"w": self.w, "b": self.b})
        expected = [[self.expected(x) for x in inputs] for inputs in self.inputs]
        mismatches = [0] * THREADS

        def calls(index):
            mine = self.inputs[index]
            for call in range(CALLS):
                k = call % len(mine)
                y, z = model(mine[k])
                want_y, want_z = expected[index][k]
                if not (torch.allclose(y, want_y, rtol=1e-5, atol=1e-6) and
                        torch.allclose(z, want_z, rtol=1e-5, atol=1e-6)):
                    mismatches[index] += 1
                if call % 100 == 0:  # the slow path (Output handles, numpy) too
                    (y_numpy, _) = model(mine[k].numpy())
                    np.testing.assert_allclose(y_numpy, want_y.numpy(), rtol=1e-5, atol=1e-6)

        errors = run_threads(calls)
        self.assertEqual(errors, [None] * THREADS)
        self.assertEqual(mismatches, [0] * THREADS, "results of another thread's call")
        model.close()

    def test_eight_threads_a_thousand_calls_each_on_eager(self):
        self.check_threads("eager")

    def test_eight_threads_a_thousand_calls_each_on_cudagraphs(self):
        self.check_threads("cudagraphs")

    def test_close_waits_for_calls_in_flight_then_calls_raise(self):
        model = grove.compile(PROGRAM, backend="cudagraphs", params={"w": self.w, "b": self.b})
        started = threading.Event()
        results = [0] * THREADS

        def calls(index):
            x = self.inputs[index][0]
            want_y, _ = self.expected(x)
            while True:
                try:
                    y, _ = model(x)
                except grove.GroveError as error:
                    self.assertIn("closed", str(error))
                    return
                self.assertTrue(torch.allclose(y, want_y, rtol=1e-5, atol=1e-6))
                results[index] += 1
                # Close once every thread is calling: on a loaded machine a
                # thread may not have started 50 ms after another's 20th call.
                if results[index] >= 20 and all(results):
                    started.set()

        closer = threading.Thread(target=lambda: (started.wait(60), time.sleep(0.05),
                                                  model.close()))
        closer.start()
        errors = run_threads(calls)
        closer.join()
        self.assertEqual(errors, [None] * THREADS)
        self.assertTrue(all(count > 0 for count in results), results)
        with self.assertRaisesRegex(grove.GroveError, "closed"):
            model(self.inputs[0][0])
        model.close()  # a second close does nothing

    def test_program_text_with_a_nul_is_refused(self):
        import json

        text = json.dumps(PROGRAM)
        # Before: the C API read up to the NUL and compiled the program silently.
        with self.assertRaisesRegex(ValueError, "NUL character at offset %d" % len(text)):
            grove.compile(text + "\0 and text grove never read")
        with self.assertRaisesRegex(ValueError, "NUL"):
            grove.compile(PROGRAM, params={"w\0x": self.w})

    def test_close_poisons_the_outputs_kept_past_its_trees_end(self):
        # Note [Outputs of a closed model are poisoned] (grove/cached_outputs.py):
        # in a thread of its own a model is its tree's last, so its close
        # ends the tree; the output it keeps is handed to PyTorch's storage
        # hook with grove's message (this PyTorch may lack the hook: a
        # recorder stands in, and the DLPack hand-out is used). A model
        # closed while another model of the same thread lives leaves its
        # fresh output alone.
        import grove.model as grove_model

        poisoned = []
        original = grove_model._storage_hook
        grove_model._storage_hook = lambda: (lambda value, message: poisoned.append(
            (value.data_ptr(), message)))
        outcome = {}

        def work():
            try:
                alone = grove.compile(PROGRAM, backend="cudagraphs",
                                      params={"w": self.w, "b": self.b})
                alone.use_cached_outputs(False)
                for x in self.inputs[0]:
                    alone(x)
                kept = alone(self.inputs[0][0])
                alone.close()
                outcome["alone"] = (list(poisoned), [value.data_ptr() for value in kept])
                poisoned.clear()
                other = grove.compile(PROGRAM, backend="cudagraphs",
                                      params={"w": self.w, "b": self.b})
                other.use_cached_outputs(False)
                other(self.inputs[1][0])
                model = grove.compile(PROGRAM, backend="cudagraphs",
                                      params={"w": self.w, "b": self.b})
                model.use_cached_outputs(False)
                for x in self.inputs[0]:
                    model(x)
                fresh = model(self.inputs[0][1])
                model.close()
                outcome["fresh"] = list(poisoned)
                want_y, want_z = self.expected(self.inputs[0][1])
                torch.testing.assert_close(fresh[0], want_y, rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(fresh[1], want_z, rtol=1e-5, atol=1e-6)
                other.close()
            except BaseException as error:  # reported by the test
                outcome["error"] = error

        try:
            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
        finally:
            grove_model._storage_hook = original
        self.assertNotIn("error", outcome, outcome.get("error"))
        hooked, kept = outcome["alone"]
        self.assertEqual(sorted(pointer for pointer, _ in hooked), sorted(kept))
        for _, message in hooked:
            self.assertIn("tree", message)
            self.assertTrue(message.startswith("grove: "), message)
        self.assertEqual(outcome["fresh"], [])


if __name__ == "__main__":
    junit_main.main()
