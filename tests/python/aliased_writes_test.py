"""Note [Inputs that share memory with a written input] (grove/aliased_writes.py):
graphs compiled for distinct inputs and called with inputs that share memory,
one of them written in place, give eager PyTorch's answers (the call runs the
graph in PyTorch, with one warning); disjoint views of one buffer, and graphs
that write nothing, stay grove's. On sim, both modes; the door on a GPU host
is session 33 call I."""
import unittest

import torch

import grove.torch
import junit_main
from grove import aliased_writes

MODES = ("eager", "cudagraphs")


def add_then_read(a, b):
    a.add_(1)
    return b * 2, a + b


def scale_then_read(a, b):
    a.mul_(2)
    return b + 1


class AliasedWritesTest(unittest.TestCase):
    def run_both(self, function, make, calls=3, expect_warning=True):
        """Compiles `function` for distinct inputs, calls it on make()'s
        inputs and compares outputs and inputs with eager on its own make()."""
        for mode in MODES:
            with self.subTest(mode=mode):
                compiled = grove.torch.compile_graph(
                    function, [torch.randn(4), torch.randn(4)], mode=mode)
                with self.assertLogs("grove", level="WARNING") if expect_warning else \
                        _no_warnings(self) as logged:
                    for call in range(calls):
                        expected_args, args = make(call), make(call)
                        expected = function(*expected_args)
                        got = compiled(*args)
                        expected = expected if isinstance(expected, tuple) else (expected,)
                        got = got if isinstance(got, (tuple, list)) else (got,)
                        for g, e in zip(got, expected):
                            torch.testing.assert_close(g, e)
                        for a, e in zip(args, expected_args):
                            torch.testing.assert_close(a, e)
                if expect_warning:
                    warnings = [line for line in logged.output if "share memory" in line]
                    self.assertEqual(len(warnings), 1, logged.output)

    def test_overlapping_views_one_written(self):
        self.run_both(scale_then_read, lambda call: (lambda t: (t[:4], t[2:6]))(
            torch.arange(8.0) + call))

    def test_one_tensor_given_twice(self):
        self.run_both(add_then_read, lambda call: (lambda t: (t, t))(torch.arange(4.0) * call))

    def test_a_transposed_view_of_the_written_input(self):
        def write_then_read(a, b):
            a.add_(1)
            return b.sum(0)

        def make(call):
            t = torch.arange(16.0).reshape(4, 4) + call
            return t, t.t()

        for mode in MODES:
            compiled = grove.torch.compile_graph(
                write_then_read, [torch.randn(4, 4), torch.randn(4, 4)], mode=mode)
            with self.assertLogs("grove", level="WARNING"):
                expected_args, args = make(1), make(1)
                torch.testing.assert_close(compiled(*args), write_then_read(*expected_args))

    def test_disjoint_views_stay_in_grove(self):
        self.run_both(scale_then_read, lambda call: (lambda t: (t[:4], t[4:8]))(
            torch.arange(8.0) + call), expect_warning=False)

    def test_spans(self):
        t = torch.zeros(4, 6)
        self.assertEqual(aliased_writes.span(t), (t.data_ptr(), t.data_ptr() + 24 * 4))
        column = t[:, 2]
        self.assertEqual(aliased_writes.span(column),
                         (t.data_ptr() + 8, t.data_ptr() + 8 + (3 * 6 + 1) * 4))
        overlap = aliased_writes.WrittenInputOverlap(written=[0], fixed=[])
        self.assertEqual(overlap([t[:, :3], t[:, 3:]]), (0, 1))  # interleaved rows: overlapping
        self.assertIsNone(overlap([t[:2], t[2:]]))
        self.assertIsNone(aliased_writes.WrittenInputOverlap([1], [])([t[:2], t[2:]]))
        # A fixed (bound) written input, met by a free one; fixed spans are taken once.
        fixed = aliased_writes.WrittenInputOverlap(written=[0], fixed=[0])
        self.assertIsNone(fixed([t[:2], t[2:]]))
        self.assertEqual(fixed([t[:2], t[1:3]]), (1,))
        # A sparse input has no span of its own: left out, not an error.
        sparse = torch.eye(3).to_sparse()
        self.assertIsNone(aliased_writes.span(sparse))
        self.assertIsNone(overlap([t[:2], sparse]))
        # Two fixed inputs overlapping, one written: every call.
        both = aliased_writes.WrittenInputOverlap(written=[1], fixed=[0, 1])
        self.assertEqual(both([t[:2], t[1:3]]), (1, 0))


class _no_warnings:
    """assertNoLogs for Python < 3.10: fails if a WARNING reaches "grove"."""

    def __init__(self, test):
        self.test = test

    def __enter__(self):
        self.records = []
        self.handler = _Collect(self.records)
        self.logger = __import__("logging").getLogger("grove")
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        warnings = [r.getMessage() for r in self.records if r.levelno >= 30]
        self.test.assertEqual(warnings, [])
        return False


class _Collect(__import__("logging").Handler):
    def __init__(self, records):
        super().__init__()
        self.records = records

    def emit(self, record):
        self.records.append(record)


if __name__ == "__main__":
    junit_main.main()
