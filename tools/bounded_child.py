"""A child process with a time limit that holds: run(command, limit_s)
returns within about limit_s seconds however the child and anything it
started behave: the child leads a process group of its own and writes to
files, and at the limit the whole group is killed (Note [A child's time
limit covers what it started], benchmarks/torch_zoo.py, its one user).
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

GRACE_S = 3.0  # between SIGTERM and SIGKILL of the group


class Finished:
    """What run() saw: returncode (None when stopped for the limit),
    timed_out, seconds, and the last lines of stderr and stdout."""

    def __init__(self, returncode, timed_out, seconds, stdout_tail, stderr_tail):
        self.returncode = returncode
        self.timed_out = timed_out
        self.seconds = seconds
        self.stdout_tail = stdout_tail
        self.stderr_tail = stderr_tail


def _tail(path, lines):
    try:
        with open(path, errors="replace") as text:
            return "\n".join(text.read().strip().splitlines()[-lines:])
    except OSError:
        return ""


def _kill_group(process):
    """SIGTERM to the child's process group, SIGKILL after GRACE_S."""
    for sig, wait_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, GRACE_S)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        # The child is gone; its group may not be: kill what is left.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def run(command, limit_s, tail_lines=3, env=None):
    """Runs `command` (a list) in a process group of its own for at most
    `limit_s` seconds (Note [A child's time limit covers what it started])."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        out_path = os.path.join(folder, "stdout")
        err_path = os.path.join(folder, "stderr")
        with open(out_path, "w") as out, open(err_path, "w") as err:
            process = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                       start_new_session=True, env=env)
            timed_out = False
            try:
                process.wait(timeout=max(limit_s, 0.0))
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(process)
            else:
                # The child ended; whatever it left running in its group goes too.
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        return Finished(None if timed_out else process.returncode, timed_out,
                        time.monotonic() - start, _tail(out_path, tail_lines),
                        _tail(err_path, tail_lines))


if __name__ == "__main__":
    # python3 bounded_child.py LIMIT_S COMMAND...: runs it, prints what happened.
    done = run(sys.argv[2:], float(sys.argv[1]))
    print("returncode=%s timed_out=%s seconds=%.1f" % (done.returncode, done.timed_out,
                                                       done.seconds))
    print("stdout_tail=%s" % done.stdout_tail.replace("\n", " | "))
