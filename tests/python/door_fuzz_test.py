"""The door fuzzer (Note [Door fuzzer], python/grove/door_fuzz.py) on sim
with CI's PyTorch: random split programs through the importer in both modes
for a bounded time (GROVE_DOOR_FUZZ_SECONDS, default 20; on a GPU host the
same time again on cuda through torch.compile), and a check that
the fuzzer finds the split-generation bug of HF LLaMA/BERT (each segment a
generation of its own) when grove.invocation is switched off. The fuzzer also
runs on an asynchronous sim with its hazard checker on (in a child process: the
sim reads GROVE_SIM_ASYNC when its device is made)."""
import os
import subprocess
import sys
import time
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grove  # noqa: E402
from grove import door_fuzz, input_writes  # noqa: E402
import junit_main  # noqa: E402

SECONDS = float(os.environ.get("GROVE_DOOR_FUZZ_SECONDS", "20"))


class _NoInvocation:
    """grove.invocation as it was before the fix: every call its own generation."""

    def __init__(self, key=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class DoorFuzzTest(unittest.TestCase):
    def test_random_split_programs_match_pytorch_in_both_modes(self):
        self.assertTrue(door_fuzz.splitters(), "no op is left to PyTorch: the fuzzer cannot split")
        counters = door_fuzz.fuzz(SECONDS, "sim", first_seed=int(time.time()) % 100000)
        print("door fuzz: %(programs)d programs, %(calls)d calls in %(seconds).1f s "
              "(first seed %(first_seed)d)" % counters)
        self.assertGreater(counters["programs"], 5)

    @unittest.skipUnless(torch.cuda.is_available() and hasattr(torch, "compile"),
                         "no CUDA device (or no torch.compile): the cuda run needs a GPU host")
    def test_random_split_programs_match_pytorch_on_cuda_through_torch_compile(self):
        counters = door_fuzz.fuzz(SECONDS, "cuda", first_seed=int(time.time()) % 100000)
        print("door fuzz on cuda: %(programs)d programs, %(calls)d calls in %(seconds).1f s "
              "(first seed %(first_seed)d)" % counters)
        self.assertGreater(counters["programs"], 0)

    def test_state_programs_traced_without_functionalization(self):
        # The plain trace keeps the squeeze_ of a 1-D operand's matmul, as
        # PyTorch 2.11's functionalized trace does: seeds 92796 and 1035
        # returned [1, D] where PyTorch has [D] there before Note [In-place
        # view ops keep their argument's shape] (importer.py).
        saved = input_writes._functionalize
        input_writes._functionalize = lambda: None
        try:
            for seed in (92796, 1035):
                door_fuzz.run_program(seed, "sim")
        finally:
            input_writes._functionalize = saved

    def test_a_draw_over_a_strided_window_draws_eagers_numbers(self):
        # Seed 166 adds noise drawn like an overlapping window (rand_like, left
        # to PyTorch): handed the window's value contiguous, it drew other
        # numbers than eager (0.0018 off) before Note [Layouts a PyTorch step
        # reads] covered random draws (importer.py).
        door_fuzz.run_program(166, "sim")

    def test_finds_the_split_generation_bug_without_invocations(self):
        saved = grove.invocation
        grove.invocation = _NoInvocation
        try:
            start = time.monotonic()
            with self.assertRaises((grove.GroveError, door_fuzz.FuzzFailure)) as found:
                door_fuzz.fuzz(60, "sim")
            print("found in %.1f s: %s" % (time.monotonic() - start,
                                           str(found.exception).splitlines()[0][:200]))
        finally:
            grove.invocation = saved

    # Note [Host callers of an asynchronous sim] (capi/grove.cc): each sim
    # stream on a worker thread, every unordered access between grove's
    # streams an error, and every call's outputs read by PyTorch at once.
    # Seed 500000 read half-written outputs before each call waited for its
    # stream.
    def test_random_split_programs_on_an_asynchronous_sim(self):
        env = dict(os.environ, GROVE_SIM_ASYNC="1", GROVE_SIM_CHECK="throw")
        script = ("from grove import door_fuzz\n"
                  "door_fuzz.run_program(500000, 'sim')\n"
                  "counters = door_fuzz.fuzz(%r, 'sim', first_seed=%d)\n"
                  "print('async sim: %%(programs)d programs, %%(calls)d calls' %% counters)\n"
                  % (SECONDS / 2, int(time.time()) % 100000))
        child = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                               text=True, timeout=SECONDS * 10 + 120)
        print(child.stdout.strip())
        self.assertEqual(child.returncode, 0, child.stdout[-3000:] + child.stderr[-3000:])
        self.assertIn("async sim:", child.stdout)


if __name__ == "__main__":
    junit_main.main()
