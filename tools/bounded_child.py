"""A child process with a time limit that holds: run(command, limit_s)
returns within about limit_s seconds however the child and anything it
started behave: the child leads a process group of its own and writes to
files, and at the limit the whole group is killed (Note [A child's time
limit covers what it started], benchmarks/torch_zoo.py, its one user).
start(command) starts one without waiting; its wait(limit_s) bounds it the
same way from then on.
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


class Child:
    """A child started in a process group of its own, writing to files
    (Note [A child's time limit covers what it started]); wait(limit_s)
    ends it, with whatever it started, at the limit. Several may run at once
    (torch_zoo's decode cases import side by side, then take turns)."""

    def __init__(self, command, env=None):
        self.started = time.monotonic()
        self._folder = tempfile.TemporaryDirectory()
        self._out_path = os.path.join(self._folder.name, "stdout")
        self._err_path = os.path.join(self._folder.name, "stderr")
        with open(self._out_path, "w") as out, open(self._err_path, "w") as err:
            self.process = subprocess.Popen(command, stdout=out, stderr=err,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            env=env)

    def running(self):
        return self.process.poll() is None

    def wait(self, limit_s, tail_lines=3):
        """Waits at most `limit_s` more seconds; at the limit kills the
        group. Returns Finished (seconds counted from the start)."""
        timed_out = False
        try:
            self.process.wait(timeout=max(limit_s, 0.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(self.process)
        else:
            # The child ended; whatever it left running in its group goes too.
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        finished = Finished(None if timed_out else self.process.returncode, timed_out,
                            time.monotonic() - self.started, _tail(self._out_path, tail_lines),
                            _tail(self._err_path, tail_lines))
        self._folder.cleanup()
        return finished

    def stop(self, tail_lines=3):
        """Ends the child and its group now (wait with no time left)."""
        return self.wait(0.0, tail_lines)


def start(command, env=None):
    """Starts `command` (a list) as a Child."""
    return Child(command, env=env)


def run(command, limit_s, tail_lines=3, env=None):
    """Runs `command` (a list) in a process group of its own for at most
    `limit_s` seconds (Note [A child's time limit covers what it started])."""
    return Child(command, env=env).wait(limit_s, tail_lines)


if __name__ == "__main__":
    # python3 bounded_child.py LIMIT_S COMMAND...: runs it, prints what happened.
    done = run(sys.argv[2:], float(sys.argv[1]))
    print("returncode=%s timed_out=%s seconds=%.1f" % (done.returncode, done.timed_out,
                                                       done.seconds))
    print("stdout_tail=%s" % done.stdout_tail.replace("\n", " | "))
