#!/usr/bin/env bash
# tools/bounded_child.py (Note [A child's time limit covers what it started]):
# a child that started a process holding its output is stopped at the limit
# with everything it started; a child that ends returns its status and
# output at once, though a process it left behind still holds its output.
set -euo pipefail
tmp=${TEST_TMPDIR:-$(mktemp -d)}
cd tools
python3 - "$tmp" <<'PY'
import os, sys, time
import bounded_child

tmp = sys.argv[1]
marker = os.path.join(tmp, "grandchild.pid")


def assert_gone(pid, what):
    """Fails unless process `pid` is gone within 5 s (the kernel reaps an
    orphan shortly after the kill)."""
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError("grandchild %d survived %s" % (pid, what))


# A child that starts a grandchild sharing its stdout and stderr (as PyTorch's
# compile workers do), records its pid, and then hangs.
hanging = ("import subprocess, sys, time\n"
           "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
           "open(%r, 'w').write(str(worker.pid))\n"
           "print('started', flush=True)\n"
           "time.sleep(120)\n" % marker)

# 1. Past the limit: stopped, with its grandchild, well before their sleeps end.
start = time.monotonic()
done = bounded_child.run([sys.executable, "-c", hanging], limit_s=2.0)
took = time.monotonic() - start
assert done.timed_out and done.returncode is None, vars(done)
assert 2.0 <= took < 2.0 + 2 * bounded_child.GRACE_S + 2, took
assert done.stdout_tail == "started", vars(done)
assert_gone(int(open(marker).read()), "its group's kill")

# 2. A child that ends in time: its status and the tails of its output.
done = bounded_child.run([sys.executable, "-c",
                          "import sys; print('a'); print('b'); sys.stderr.write('oops\\n'); "
                          "sys.exit(3)"], limit_s=30.0)
assert not done.timed_out and done.returncode == 3, vars(done)
assert done.stdout_tail == "a\nb" and done.stderr_tail == "oops", vars(done)

# 3. A child that ends but leaves a process holding its output: run returns
# when the child ends (subprocess.run's pipes would wait for the leftover).
os.remove(marker)
leaving = hanging.replace("time.sleep(120)\n", "", 1).rstrip() + "\n"
leaving = leaving.replace("print('started', flush=True)\n", "print('left', flush=True)\n")
start = time.monotonic()
done = bounded_child.run([sys.executable, "-c", leaving], limit_s=60.0)
assert not done.timed_out and done.returncode == 0, vars(done)
assert time.monotonic() - start < 20, time.monotonic() - start
# 4. Children started side by side (start) run at once; each wait bounds
# its own from then on, and stop() ends one still running with its group.
os.remove(marker)
start = time.monotonic()
sleepers = [bounded_child.start([sys.executable, "-c",
                                 "import time; time.sleep(1.5); print('slept')"])
            for _ in range(3)]
hung = bounded_child.start([sys.executable, "-c", hanging])
for sleeper in sleepers:
    done = sleeper.wait(30.0)
    assert not done.timed_out and done.returncode == 0 and done.stdout_tail == "slept", vars(done)
took = time.monotonic() - start
assert took < 1.5 * 3, "the sleepers ran one after another (%.1f s)" % took
for _ in range(100):  # the hanging child has started its grandchild
    if os.path.exists(marker):
        break
    time.sleep(0.05)
assert hung.running()
done = hung.stop()
assert done.timed_out and done.returncode is None and not hung.running(), vars(done)
assert_gone(int(open(marker).read()), "stop()")
print("bounded_child_test: ok")
PY
