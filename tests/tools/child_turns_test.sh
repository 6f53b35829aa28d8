#!/usr/bin/env bash
# tools/child_turns.py (Note [Children that take turns]): children prepare
# side by side, then run one at a time in the order given; a child past its
# limit is stopped, one that dies while preparing is reported at its turn,
# and one never ready is stopped without a turn.
set -euo pipefail
cd tools
python3 - <<'PY'
import json, os, sys, time
import child_turns

# A stand-in child: prepares (sleeps `prepare` s), waits for its turn, then
# records when its turn ran and sleeps `work` s (or dies, or hangs).
CHILD = r"""
import json, os, sys, time
sys.path.insert(0, %r)
import child_turns
name, prepare, work, path, folder = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
time.sleep(prepare)
if work == "die_preparing":
    sys.exit(7)
if work != "never_ready":
    child_turns.wait_for_turn(folder)
else:
    time.sleep(120)
began = time.time()
if work == "hang":
    time.sleep(120)
time.sleep(float(work))
json.dump({"name": name, "began": began, "ended": time.time()}, open(path, "w"))
""" % os.getcwd()

def command_of(case, path, folder):
    name, prepare, work = case
    return [sys.executable, "-c", CHILD, name, str(prepare), work, path, folder]

# 1. Four children preparing 1.5 s each: ready side by side, then one at a
# time in order; the hanging one is stopped at its limit and the others run.
cases = [("a", 1.5, "0.3"), ("b", 1.5, "hang"), ("c", 1.5, "0.3"), ("d", 1.5, "0.3")]
seen = []
results = {}

def on_turn(turn):
    seen.append(turn)
    if os.path.exists(turn.json_path):
        results[turn.case] = json.load(open(turn.json_path))

start = time.monotonic()
turns = child_turns.take_turns(cases, time.time() + 60, 2.0, command_of, on_turn)
took = time.monotonic() - start
assert [turn.case for turn in seen] == cases, [turn.case for turn in seen]
assert all(turn.ready_s is not None and turn.ready_s < 1.5 * 2 for turn in turns), \
    "the children did not prepare side by side: %s" % [turn.ready_s for turn in turns]
hung = turns[1]
assert hung.done.timed_out and hung.run_s < 2.0 + 8 and hung.stopped is None, vars(hung)
ran = [results[turn.case] for turn in turns if turn is not hung]
for earlier, later in zip(ran, ran[1:]):
    assert earlier["ended"] <= later["began"], "turns overlapped: %s" % ran
assert [r["name"] for r in ran] == ["a", "c", "d"], ran
assert all(not turn.done.timed_out and turn.done.returncode == 0 for turn in turns
           if turn is not hung)
# one preparation, three short turns and one limit: far less than four
# preparations in a row plus the limit.
assert took < 1.5 * 4 + 2.0, took

# 2. A child that dies preparing is reported at its turn with its status; a
# child never ready is stopped after the ready limit without a turn.
cases = [("e", 0.1, "die_preparing"), ("f", 0.1, "never_ready"), ("g", 0.1, "0.1")]
seen, results = [], {}
turns = child_turns.take_turns(cases, time.time() + 60, 5.0, command_of, on_turn,
                               ready_limit_s=2.0)
dead, never, fine = turns
assert dead.done.returncode == 7 and dead.stopped is None, vars(dead)
assert never.stopped and never.stopped.startswith("not ready") and never.run_s is None, vars(never)
assert not never.done.returncode == 0
assert fine.done.returncode == 0 and results[fine.case]["name"] == "g", vars(fine)

# 3. The budget spent before a turn: that child is stopped, not run.
cases = [("h", 0.1, "0.1")]
turns = child_turns.take_turns(cases, time.time() - 1, 5.0, command_of, lambda turn: None)
assert turns[0].stopped and turns[0].stopped.startswith("not run"), vars(turns[0])
# 4. The parent stopped from outside (SIGTERM made SystemExit, as torch_zoo
# does) while a turn runs: take_turns stops every child it started.
import signal, subprocess, tempfile
pids = tempfile.mktemp()
PARENT = r"""
import os, signal, sys
sys.path.insert(0, %r)
import child_turns
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
CHILD = %r
def command_of(case, path, folder):
    return [sys.executable, "-c", CHILD, case, "0.1", "hang", path, folder]
def started(turn):
    pass
import bounded_child
original = bounded_child.start
def recording(command, env=None):
    child = original(command, env)
    open(%r, "a").write("%%d\n" %% child.process.pid)
    return child
bounded_child.start = recording
child_turns.take_turns(["x", "y", "z"], 10**10, 120.0, command_of, started)
""" % (os.getcwd(), CHILD, pids)
parent = subprocess.Popen([sys.executable, "-c", PARENT])
for _ in range(200):
    if os.path.exists(pids) and len(open(pids).read().split()) == 3:
        break
    time.sleep(0.05)
time.sleep(1.0)  # the first child's turn has begun (it hangs)
parent.send_signal(signal.SIGTERM)
assert parent.wait(timeout=30) == 128 + signal.SIGTERM
children = [int(pid) for pid in open(pids).read().split()]
assert len(children) == 3, children
for pid in children:
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("child %d outlived its stopped parent" % pid)
print("child_turns_test: ok")
PY
