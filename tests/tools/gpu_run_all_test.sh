#!/usr/bin/env bash
# tools/gpu_run_all.sh (gpu_bundle/run_all.sh) counts a Python test's cases
# from unittest's summary: a case whose "... ok" a warning pushed onto its own
# line still counts (on PyTorch 2.11 gpu_torch_training_test printed 0 passed
# while all of its cases passed), skips and failures are counted, a failing
# file fails the run, and the bundle's wheel is what the tests import.
set -euo pipefail
tmp=${TEST_TMPDIR:-$(mktemp -d)}
bundle="$tmp/bundle"
mkdir -p "$bundle/grove/tests"
cp tools/gpu_run_all.sh "$bundle/run_all.sh"
: >"$bundle/tests.txt"
: >"$bundle/not_built.txt"
echo test >"$bundle/commit.txt"
cat >"$bundle/grove/tests/noisy_test.py" <<'PY'
import sys
import unittest
import warnings


class Noisy(unittest.TestCase):
    def test_a_warning_splits_the_ok_from_the_name(self):
        warnings.warn("doesn't take boxed arguments")
        print("a line of the test's own", file=sys.stderr)

    def test_plain(self):
        self.assertEqual(1 + 1, 2)

    @unittest.skip("no CUDA device")
    def test_skipped(self):
        pass


if __name__ == "__main__":
    unittest.main(verbosity=2)
PY
sed 's/self.assertEqual(1 + 1, 2)/self.assertEqual(1 + 1, 3)/' "$bundle/grove/tests/noisy_test.py" \
  >"$bundle/grove/tests/failing_test.py"

echo tests/noisy_test.py >"$bundle/python_tests.txt"
OUT="$tmp/out1" bash "$bundle/run_all.sh" >"$tmp/pass.txt" 2>&1
grep -qE '^PASS +tests/noisy_test.py +2 passed +0 failed +1 skipped' "$tmp/pass.txt" ||
  { cat "$tmp/pass.txt"; echo "expected 2 passed, 1 skipped"; exit 1; }

echo tests/failing_test.py >>"$bundle/python_tests.txt"
if OUT="$tmp/out2" bash "$bundle/run_all.sh" >"$tmp/fail.txt" 2>&1; then
  cat "$tmp/fail.txt"; echo "a failing Python test passed the run"; exit 1
fi
grep -qE '^FAIL +tests/failing_test.py +1 passed +1 failed +1 skipped' "$tmp/fail.txt" ||
  { cat "$tmp/fail.txt"; echo "expected 1 passed, 1 failed, 1 skipped"; exit 1; }
grep -q "test cases: 3 passed, 1 failed, 2 skipped" "$tmp/fail.txt" ||
  { cat "$tmp/fail.txt"; echo "expected the totals"; exit 1; }
# With a wheel in the bundle (gpu_bundle.sh: grove/wheel/), the Python tests
# run from it installed into a fresh virtual environment, not from python/.
mkdir -p "$tmp/src/grove" "$tmp/src/grove_weights" "$bundle/grove/wheel"
echo '__version__ = "0.0.1"' >"$tmp/src/grove/version.py"
: >"$tmp/src/grove/__init__.py"
: >"$tmp/src/grove_weights/__init__.py"
head -c 1000 /dev/urandom >"$tmp/libgrove.so"
python3 tools/build_wheel.py --library "$tmp/libgrove.so" --python "$tmp/src" \
  --out "$bundle/grove/wheel" >/dev/null
cat >"$bundle/grove/tests/installed_test.py" <<'PY'
import os
import sys
import unittest

import grove


class Installed(unittest.TestCase):
    def test_grove_comes_from_the_installed_wheel(self):
        here = os.path.dirname(grove.__file__)
        self.assertNotEqual(sys.prefix, sys.base_prefix, "not in a virtual environment")
        self.assertTrue(here.startswith(sys.prefix) and "site-packages" in here, here)
        self.assertTrue(os.path.exists(os.path.join(here, "libgrove.so")), here)


if __name__ == "__main__":
    unittest.main(verbosity=2)
PY
echo tests/installed_test.py >"$bundle/python_tests.txt"
OUT="$tmp/out3" bash "$bundle/run_all.sh" >"$tmp/wheel.txt" 2>&1 ||
  { cat "$tmp/wheel.txt"; echo "the test of the installed wheel failed"; exit 1; }
grep -qE '^PASS +tests/installed_test.py +1 passed' "$tmp/wheel.txt" ||
  { cat "$tmp/wheel.txt"; echo "expected the installed wheel's test to pass"; exit 1; }
grep -q "installed into" "$tmp/wheel.txt" || { cat "$tmp/wheel.txt"; exit 1; }
echo "gpu_run_all_test: all checks passed"
