"""grove.Model over the C API on sim: numpy and torch inputs, bound params
viewed without copies, outputs through DLPack, kept outputs of a graph backend
(Note [Kept outputs through DLPack]), stats, DOT and errors."""
import unittest

import numpy as np
import torch

import grove
import junit_main

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
    ],
    "outputs": ["y"],
}


def reference(x, w, b):
    return torch.tanh(x @ w.T + b)


class ModelTest(unittest.TestCase):
    def setUp(self):
        generator = torch.Generator().manual_seed(1234)
        self.w = torch.randn(6, 8, generator=generator)
        self.b = torch.randn(6, generator=generator)
        self.x = torch.randn(4, 8, generator=generator)

    def test_torch_inputs_match_torch_and_params_are_the_callers_memory(self):
        for backend in ("eager", "cudagraphs"):
            model = grove.compile(PROGRAM, backend=backend, params={"w": self.w, "b": self.b})
            self.assertEqual(model.state("w").data_ptr(), self.w.data_ptr())
            self.assertEqual(model.input_names, ["x"])
            for _ in range(4):  # warm-up, recording and replays
                (y,) = model(self.x)
                torch.testing.assert_close(y, reference(self.x, self.w, self.b),
                                           rtol=1e-5, atol=1e-6)
            self.w.mul_(-1.0)  # an in-place update of the caller's param is seen
            (y,) = model(self.x)
            torch.testing.assert_close(y, reference(self.x, self.w, self.b), rtol=1e-5, atol=1e-6)

    def test_numpy_inputs_give_numpy_outputs(self):
        model = grove.compile(PROGRAM, params={"w": self.w.numpy(), "b": self.b.numpy()})
        (y,) = model(self.x.numpy())
        self.assertIsInstance(y, np.ndarray)
        np.testing.assert_allclose(y, reference(self.x, self.w, self.b).numpy(),
                                   rtol=1e-5, atol=1e-6)

    def test_eager_outputs_are_grove_memory_without_a_copy(self):
        model = grove.compile(PROGRAM, params={"w": self.w, "b": self.b})
        handles = model.run(self.x)
        y = handles[0].to_torch()
        self.assertEqual(y.data_ptr(), handles[0].data_ptr())
        del handles
        torch.testing.assert_close(y, reference(self.x, self.w, self.b), rtol=1e-5, atol=1e-6)

    def test_strided_inputs_are_read_through_their_strides(self):
        model = grove.compile(PROGRAM, params={"w": self.w, "b": self.b})
        wide = torch.randn(8, 4).T  # [4, 8] with strides (1, 4)
        (y,) = model(wide)
        torch.testing.assert_close(y, reference(wide.contiguous(), self.w, self.b),
                                   rtol=1e-5, atol=1e-6)

    def test_many_inputs_are_described_again_only_where_a_layout_changed(self):
        # Four inputs or more take Model.describe_borrowed's batched path: the
        # pointers of a call with the last call's layouts are rewritten in one
        # pass; any change of shape, strides or dtype describes every input again.
        program = {
            "name": "sum4",
            "inputs": [{"name": name, "shape": [3, 4], "dtype": "f32"} for name in "abcd"],
            "nodes": [
                {"name": "ab", "op": "add", "inputs": ["a", "b"]},
                {"name": "cd", "op": "mul", "inputs": ["c", "d"]},
                {"name": "y", "op": "sub", "inputs": ["ab", "cd"]},
            ],
            "outputs": ["y"],
        }
        generator = torch.Generator().manual_seed(77)
        model = grove.compile(program)

        def check(a, b, c, d, what):
            (y,) = model(a, b, c, d)
            torch.testing.assert_close(y, a + b - c * d, rtol=1e-6, atol=1e-6, msg=what)

        for call in range(3):  # fresh tensors, same layouts: pointers rewritten
            check(*[torch.randn(3, 4, generator=generator) for _ in range(4)],
                  what="call %d" % call)
        transposed = torch.randn(4, 3, generator=generator).T  # strides (1, 3)
        check(torch.randn(3, 4, generator=generator), transposed,
              torch.randn(3, 4, generator=generator), torch.randn(3, 4, generator=generator),
              what="one input strided")
        check(*[torch.randn(3, 4, generator=generator) for _ in range(4)],
              what="contiguous again")
        with self.assertRaises(Exception):
            model(*[torch.randn(3, 4, generator=generator, dtype=torch.float64)
                    for _ in range(4)])
        check(*[torch.randn(3, 4, generator=generator) for _ in range(4)],
              what="after a refused call")

    def test_kept_outputs_of_a_graph_backend_never_change_under_the_caller(self):
        if grove.outputs._storage_hook() is not None:
            self.skipTest("this torch has the storage hook; the copy fallback is not used")
        model = grove.compile(PROGRAM, backend="cudagraphs", params={"w": self.w, "b": self.b})
        outputs = []
        inputs = [torch.randn(4, 8) for _ in range(5)]
        for x in inputs:
            outputs.append(model(x)[0])
        for x, y in zip(inputs, outputs):
            torch.testing.assert_close(y, reference(x, self.w, self.b), rtol=1e-5, atol=1e-6)

    def test_overwritten_output_raises_through_the_storage_hook(self):
        calls = []
        saved = getattr(torch._C, "_set_storage_access_error_msg", None)
        torch._C._set_storage_access_error_msg = lambda tensor, message: calls.append(
            (tensor, message))
        try:
            model = grove.compile(PROGRAM, backend="cudagraphs",
                                  params={"w": self.w, "b": self.b})
            kept = None
            for _ in range(3):  # warm-up, recording, first replay
                kept = None  # nothing earlier is held across a call
                (kept,) = model(self.x)
            self.assertEqual(calls, [])
            (later,) = model(self.x + 1)
            self.assertEqual(len(calls), 1, "the kept output was reported once")
            self.assertIs(calls[0][0], kept)
            self.assertIn("overwrote", calls[0][1])
            torch.testing.assert_close(later, reference(self.x + 1, self.w, self.b),
                                       rtol=1e-5, atol=1e-6)
        finally:
            if saved is None:
                del torch._C._set_storage_access_error_msg
            else:
                torch._C._set_storage_access_error_msg = saved

    def test_stats_dot_and_mark_step_begin(self):
        model = grove.compile(PROGRAM, backend="cudagraphs", params={"w": self.w, "b": self.b})
        for _ in range(3):
            model(self.x)
        model.mark_step_begin()
        self.assertEqual(model.stats()["backend"], "cudagraphs")
        self.assertIn("digraph", model.dot())

    def test_errors_name_what_was_wrong(self):
        model = grove.compile(PROGRAM, params={"w": self.w, "b": self.b})
        with self.assertRaisesRegex(grove.GroveError, "expects shape"):
            model(torch.randn(3, 8))
        with self.assertRaisesRegex(grove.GroveError, "expects dtype f32"):
            model(torch.ones(4, 8, dtype=torch.int64))
        with self.assertRaisesRegex(grove.GroveError, "takes 1 inputs"):
            model()
        with self.assertRaisesRegex(grove.GroveError, "no param or buffer"):
            grove.compile(PROGRAM, params={"weight": self.w})
        with self.assertRaisesRegex(grove.GroveError, "unknown option|backend"):
            grove.compile(PROGRAM, backend="nope")
        with self.assertRaisesRegex(TypeError, "complex64"):
            model(torch.ones(4, 8, dtype=torch.complex64))

    def test_inputs_are_released_after_the_call(self):
        model = grove.compile(PROGRAM, params={"w": self.w, "b": self.b})
        before = len(grove._descs._held)
        model(self.x)
        self.assertEqual(len(grove._descs._held), before)


if __name__ == "__main__":
    junit_main.main()
