"""A `grove serve` child process on loopback, for the serving tests.

GroveServer starts `grove serve benchmarks/models/mlp16x512.json --device sim
--port 0 ...` (or `model`, such as an LLM's checkpoint directory), waits for
its "listening on" line (and the gRPC one, given --grpc-port) and stops it
with SIGTERM; body_for() makes a KServe v2 JSON body of rows;
parse_prometheus() reads /metrics.
"""
import os
import re
import signal
import subprocess
import time

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "grove")
# GROVE_BINARY: another grove to test (an older build, to see a test fail).
GROVE = os.environ.get("GROVE_BINARY") or os.path.join(RUNFILES, "cli", "grove")
MLP = os.path.join(RUNFILES, "benchmarks", "models", "mlp16x512.json")
NAME = "mlp16x512"


class GroveServer:
    """A `grove serve` child process and its base URL."""

    def __init__(self, *args, expect_ready=True, model=MLP, device="sim", env=None):
        self.process = subprocess.Popen(
            [GROVE, "serve", model, "--device", device, "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=None if env is None else {**os.environ, **env})
        self.lines = []
        self.url = None
        self.grpc_target = None  # host:port with --grpc-port
        if not expect_ready:
            return
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("grove serve ended before listening:\n" + "".join(self.lines) +
                                   self.process.stderr.read())
            self.lines.append(line)
            match = re.search(r"listening on (http://[0-9.]+:\d+)", line)
            if match:
                self.url = match.group(1)
            match = re.search(r"listening on grpc://([0-9.]+:\d+)", line)
            if match:
                self.grpc_target = match.group(1)
            if self.url and (self.grpc_target or "--grpc-port" not in args):
                return
        raise RuntimeError("grove serve did not listen within 240 s")

    def address(self):
        """(host, port) of the server."""
        host, port = self.url[len("http://"):].split(":")
        return host, int(port)

    def memory_kb(self, field):
        """A field of /proc/PID/status in KiB: VmRSS (now) or VmHWM (peak)."""
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.process.pid}/status")

    def reset_peak_memory(self):
        """Sets VmHWM back to VmRSS (Linux: 5 > /proc/PID/clear_refs)."""
        with open(f"/proc/{self.process.pid}/clear_refs", "w") as clear_refs:
            clear_refs.write("5")

    def infer_url(self):
        return f"{self.url}/v2/models/{NAME}/infer"

    def stop(self):
        """SIGTERM; returns (exit status, the rest of stdout, stderr)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=60)
        return self.process.returncode, out, err


def body_for(rows):
    return {"inputs": [{"name": "x", "shape": list(rows.shape), "datatype": "FP32",
                        "data": rows.reshape(-1).tolist()}]}


def parse_prometheus(text):
    """(name, labels) -> value; fails on any line that is not the text format."""
    samples = {}
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_]\w*="(?:[^"\\]|\\.)*",?)*)\})?'
                         r" ([-+]?(?:[0-9.]+(?:[eE][-+]?\d+)?|Inf|NaN))$")
    for line in text.splitlines():
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        match = line_re.match(line)
        if match is None:
            raise AssertionError(f"not Prometheus text: {line!r}")
        samples[(match.group(1), match.group(2) or "")] = float(match.group(3))
    return samples
