"""Note [Door state released at exit] (grove/exit_release.py) on sim:
release_door_state closes every grove Model still alive (a later call
raises GroveError) and leaves no borrowed object held; with
GROVE_EXIT_RELEASE=verbose a process that exits holding a model reports the
release from its atexit hook, and without it no hook runs. Note [No close
while the interpreter finalizes] (grove/model.py): a model first collected
in the interpreter's last collection is not closed there (nothing touches a
tensor), unless GROVE_CLOSE_AT_FINALIZATION=1."""
import os
import subprocess
import sys
import unittest

import torch

import grove
from grove import _descs
from grove import exit_release
import junit_main

SEED = 20261127

PROGRAM = {
    "name": "small",
    "inputs": [{"name": "x", "shape": [4, 8], "dtype": "f32"}],
    "params": [{"name": "w", "shape": [6, 8], "dtype": "f32", "init": {"kind": "zeros"}},
               {"name": "b", "shape": [6], "dtype": "f32", "init": {"kind": "zeros"}}],
    "nodes": [{"name": "h", "op": "linear", "inputs": ["x", "w", "b"]},
              {"name": "y", "op": "tanh", "inputs": ["h"]}],
    "outputs": ["y"],
}

HERE = os.path.dirname(os.path.abspath(__file__))


class Holder:
    """A reference cycle that keeps a model alive until a collection."""

    def __init__(self, model):
        self.model = model
        self.me = self


class ExitReleaseTest(unittest.TestCase):
    def setUp(self):
        generator = torch.Generator().manual_seed(SEED)
        self.w = torch.randn(6, 8, generator=generator)
        self.b = torch.randn(6, generator=generator)
        self.x = torch.randn(4, 8, generator=generator)

    def model(self):
        return grove.compile(PROGRAM, backend="cudagraphs", params={"w": self.w, "b": self.b})

    def test_release_closes_every_live_model_and_holds_nothing(self):
        kept = self.model()
        before = kept(self.x)
        torch.testing.assert_close(before[0] if isinstance(before, (list, tuple)) else before,
                                   torch.tanh(self.x @ self.w.T + self.b), rtol=1e-5, atol=1e-6,
                                   msg="seed %d" % SEED)
        Holder(self.model())  # alive only through its cycle
        counts = exit_release.release_door_state()
        self.assertGreaterEqual(counts["models_closed"], 1, counts)
        self.assertEqual(counts["held_after"], 0, counts)
        self.assertEqual(len(_descs._held), 0)
        self.assertFalse(kept._handle, "the model held by this test is closed too")
        with self.assertRaises(grove.GroveError):
            kept(self.x)

    def exit_with_a_model(self, setting):
        code = ("import torch, grove, grove.torch\n"
                "m = grove.compile(%r, backend='cudagraphs', params={'w': torch.ones(6, 8), 'b': torch.ones(6)})\n"
                "m(torch.ones(4, 8))\n"
                "print('ran', flush=True)\n" % PROGRAM)
        environment = dict(os.environ)
        environment.pop("GROVE_EXIT_RELEASE", None)
        if setting is not None:
            environment["GROVE_EXIT_RELEASE"] = setting
        return subprocess.run([sys.executable, "-c", code], env=environment, cwd=HERE,
                              capture_output=True, text=True, timeout=120)

    def test_the_exit_hook_runs_only_when_asked(self):
        done = self.exit_with_a_model("verbose")
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        self.assertIn("door state released at exit", done.stdout)
        self.assertIn("'models_closed': 1", done.stdout)
        self.assertIn("'held_after': 0", done.stdout)
        done = self.exit_with_a_model(None)
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        self.assertIn("ran", done.stdout)
        self.assertNotIn("door state released", done.stdout)

    def collected_while_finalizing(self, setting):
        # A model with a handed-out gradient noted, in a cycle that only the
        # interpreter's last collection frees (automatic collections off).
        code = ("import gc, sys, torch, grove, grove.model, grove.gradients\n"
                "grove.model.keep_handed_gradients = lambda: print("
                "'gradients kept while finalizing', sys.is_finalizing(), flush=True)\n"
                "m = grove.compile(%r, backend='cudagraphs', params={'w': torch.ones(6, 8), "
                "'b': torch.ones(6)})\n"
                "m(torch.ones(4, 8))\n"
                "grove.gradients._handed_gradients.append(((), ()))\n"
                "class Cycle: pass\n"
                "c = Cycle(); c.me = c; c.model = m\n"
                "del c, m\n"
                "gc.set_threshold(0)\n"
                "print('left', flush=True)\n" % PROGRAM)
        environment = dict(os.environ)
        for name in ("GROVE_EXIT_RELEASE", "GROVE_CLOSE_AT_FINALIZATION"):
            environment.pop(name, None)
        if setting is not None:
            environment["GROVE_CLOSE_AT_FINALIZATION"] = setting
        return subprocess.run([sys.executable, "-c", code], env=environment, cwd=HERE,
                              capture_output=True, text=True, timeout=120)

    def test_a_model_collected_while_finalizing_is_not_closed(self):
        done = self.collected_while_finalizing(None)
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        self.assertIn("left", done.stdout)
        self.assertNotIn("gradients kept", done.stdout)
        # The old path: the same model is closed in that collection.
        done = self.collected_while_finalizing("1")
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        self.assertIn("gradients kept while finalizing True", done.stdout)


if __name__ == "__main__":
    junit_main.main()
