"""The training door fuzzer (Note [Training door fuzzer], python/grove/training_fuzz.py)
on sim with CI's PyTorch: random programs trained through grove in both modes, through
the door and as whole steps (grove.training.compile_step), each for a bounded time, also on
an asynchronous sim with its hazard checker on (GROVE_TRAINING_FUZZ_SECONDS, default 20; on a GPU host the same time
again on cuda through torch.compile), and the seed that found the saved batch bound
as a parameter."""
import os
import subprocess
import sys
import time
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from grove import training_fuzz  # noqa: E402
import junit_main  # noqa: E402

SECONDS = float(os.environ.get("GROVE_TRAINING_FUZZ_SECONDS", "20"))


class TrainingFuzzTest(unittest.TestCase):
    def test_random_programs_train_as_pytorch_in_both_modes(self):
        counters = training_fuzz.fuzz(SECONDS, "sim", first_seed=int(time.time()) % 100000)
        print("training fuzz: %(programs)d programs, %(steps)d steps in %(seconds).1f s "
              "(first seed %(first_seed)d)" % counters)
        self.assertGreater(counters["programs"], 0)

    def test_random_programs_train_as_pytorch_as_whole_steps(self):
        counters = training_fuzz.fuzz(SECONDS / 2, "sim", first_seed=int(time.time()) % 100000,
                                      whole_step=True)
        print("whole-step fuzz: %(programs)d programs, %(steps)d steps in %(seconds).1f s "
              "(first seed %(first_seed)d)" % counters)
        self.assertGreater(counters["programs"], 0)

    def test_a_batch_that_needs_a_gradient_is_not_bound_as_a_parameter(self):
        # Seed 3: its only input needs a gradient and is new at some steps;
        # the backward bound it as a parameter (Note [Saved parameters],
        # grove/training_steps.py) and raised StaticInputMovedError.
        training_fuzz.run_program(3, "sim")

    def test_random_programs_train_on_an_asynchronous_sim(self):
        # Each sim stream on a worker thread, every unordered access between
        # grove's streams an error (Note [Host callers of an asynchronous
        # sim], capi/grove.cc); in a child: the sim reads GROVE_SIM_ASYNC
        # when its device is made.
        env = dict(os.environ, GROVE_SIM_ASYNC="1", GROVE_SIM_CHECK="throw")
        seed = int(time.time()) % 100000
        script = ("from grove import training_fuzz\n"
                  "door = training_fuzz.fuzz(%r, 'sim', first_seed=%d)\n"
                  "whole = training_fuzz.fuzz(%r, 'sim', first_seed=%d, whole_step=True)\n"
                  "print('async sim: %%d + %%d programs' %% (door['programs'], "
                  "whole['programs']))\n" % (SECONDS / 4, seed, SECONDS / 4, seed))
        child = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                               text=True, timeout=SECONDS * 10 + 120)
        print(child.stdout.strip())
        self.assertEqual(child.returncode, 0, child.stdout[-3000:] + child.stderr[-3000:])
        self.assertIn("async sim:", child.stdout)

    @unittest.skipUnless(torch.cuda.is_available() and hasattr(torch, "compile"),
                         "no CUDA device (or no torch.compile): the cuda run needs a GPU host")
    def test_random_programs_train_as_pytorch_on_cuda_through_torch_compile(self):
        counters = training_fuzz.fuzz(SECONDS, "cuda", first_seed=int(time.time()) % 100000)
        print("training fuzz on cuda: %(programs)d programs, %(steps)d steps in "
              "%(seconds).1f s (first seed %(first_seed)d)" % counters)
        self.assertGreater(counters["programs"], 0)


if __name__ == "__main__":
    junit_main.main()
