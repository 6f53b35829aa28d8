"""`grove serve` and `grove run` with hostile weights and inputs files, and
signals during start-up (issue 35, cases 10 and 11), on sim:

- a FIFO as --weights or --inputs is refused at once, not waited on
  (Note [Weights files that cannot block], weights/safetensors.cc);
- SIGTERM while the buckets compile ends the process at once with status 0
  (Note [Signals during start-up], cli/serve_command.cc);
- a weights file truncated while serving with --buckets auto is never read
  again: the re-plan loads the copy read at start (Note [Weights kept for
  re-plans]), where it used to die of SIGBUS.
"""
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

import numpy as np

import grove_weights
import junit_main

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "grove")
GROVE = os.path.join(RUNFILES, "cli", "grove")
MLP = os.path.join(RUNFILES, "benchmarks", "models", "mlp16x512.json")
NAME = "mlp16x512"
SEED = 3510


def serve(*args):
    return subprocess.Popen([GROVE, "serve", MLP, "--device", "sim", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_line(process, pattern, timeout=240):
    """Reads stdout until a line matches; returns (match, lines so far)."""
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        match = re.search(pattern, line)
        if match:
            return match, lines
    raise AssertionError("no line matching %r in:\n%s%s" % (pattern, "".join(lines),
                                                            process.stderr.read()))


def post(url, rows):
    body = {"inputs": [{"name": "x", "shape": list(rows.shape), "datatype": "FP32",
                        "data": rows.reshape(-1).tolist()}]}
    request = urllib.request.Request(url + "/v2/models/%s/infer" % NAME,
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return np.array(json.load(answer)["outputs"][0]["data"], dtype=np.float32)


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=60) as answer:
        return answer.read().decode()


class ServeFilesTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory()
        rng = np.random.default_rng(SEED)
        weights = {name: (rng.standard_normal(shape) * 0.05).astype(np.float32)
                   for name, (shape, _) in grove_weights.model_weights(MLP).items()}
        self.weights = os.path.join(self.scratch.name, "w.safetensors")
        grove_weights.save_file(weights, self.weights)
        self.fifo = os.path.join(self.scratch.name, "fifo")
        os.mkfifo(self.fifo)

    def tearDown(self):
        self.scratch.cleanup()

    def test_a_fifo_as_weights_or_inputs_is_refused_without_blocking(self):
        commands = [
            [GROVE, "serve", MLP, "--device", "sim", "--port", "0", "--weights", self.fifo],
            [GROVE, "run", MLP, "--device", "sim", "--iters", "1", "--weights", self.fifo],
            [GROVE, "run", MLP, "--device", "sim", "--iters", "1", "--inputs", self.fifo],
        ]
        for command in commands:
            # A blocked open() used to hang here until the timeout.
            result = subprocess.run(command, capture_output=True, text=True, timeout=120)
            self.assertNotEqual(result.returncode, 0, command)
            self.assertIn("is not a regular file", result.stderr, command)

    def test_sigterm_during_start_up_exits_before_listening(self):
        # 4096 rows: 13 buckets to compile and warm up on sim, many seconds.
        process = serve("--max-batch", "4096", "--weights", self.weights)
        wait_for_line(process, r"^weights ")
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
        took = time.monotonic() - sent
        self.assertEqual(process.returncode, 0, err)
        self.assertIn("received SIGTERM during start-up: exiting before serving", out)
        self.assertNotIn("listening on", out)
        self.assertLess(took, 20, "start-up went on for %.1f s after SIGTERM" % took)

    def test_weights_truncated_while_serving_are_not_read_again(self):
        process = serve("--backend", "eager", "--max-batch", "8", "--buckets", "auto",
                        "--replan-every-s", "1", "--replan-min-batches", "10",
                        "--weights", self.weights)
        try:
            match, _ = wait_for_line(process, r"listening on (http://[0-9.]+:\d+)")
            url = match.group(1)
            rows = np.linspace(-1, 1, 3 * 512, dtype=np.float32).reshape(3, 512)
            before = post(url, rows)
            os.truncate(self.weights, 0)  # a mapping of it now faults past byte 0
            deadline = time.monotonic() + 60
            while 'grove_bucket_batches_total{bucket="3"}' not in metrics(url):
                self.assertLess(time.monotonic(), deadline, "never re-planned to a bucket of 3")
                np.testing.assert_allclose(post(url, rows), before, rtol=1e-5, atol=1e-6)
                time.sleep(0.05)
            # Served by the re-planned bucket, with the weights read at start.
            np.testing.assert_allclose(post(url, rows), before, rtol=1e-5, atol=1e-6)
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 0, err)
        self.assertIn("1,2,4,8 -> 3,8", out)


if __name__ == "__main__":
    junit_main.main()
