"""`grove serve` over loopback on sim, talked to by a real HTTP client.

Starts the grove binary (`grove serve benchmarks/models/mlp16x512.json`) on a
free port with random weights written by grove_weights, and checks the KServe
v2 routes, that every client gets its own rows (compared with `grove run` on
the same rows and weights), the refusals of Note [HTTP status of a refusal],
/metrics as Prometheus text, back-pressure (503 + Retry-After), a client that
disconnects, connections opened at once (Note [Listen backlog]), SIGTERM
draining (Note [Draining on stop]) and a bounded wrk run.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import numpy as np
import requests

import grove_weights
import junit_main
from serve_process import GROVE, MLP, NAME, GroveServer, body_for, parse_prometheus

# Rows are independent, but a bucket of another size may sum a GEMM in
# another order: the served rows agree with `grove run` to float rounding.
ATOL = 1e-5
SEED = 2111


class ServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.TemporaryDirectory()
        rng = np.random.default_rng(SEED)
        weights = {name: (rng.standard_normal(shape) * 0.05).astype(np.float32)
                   for name, (shape, _) in grove_weights.model_weights(MLP).items()}
        cls.weights = os.path.join(cls.scratch.name, "w.safetensors")
        grove_weights.save_file(weights, cls.weights)
        cls.server = GroveServer("--weights", cls.weights, "--max-batch", "8",
                                 "--max-wait-us", "2000", "--max-body-bytes", "200000")
        cls.rows = (rng.random((24, 512), dtype=np.float32) * 2 - 1)
        cls.expected = cls.grove_run(cls.rows)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.scratch.cleanup()

    @classmethod
    def grove_run(cls, rows):
        """`grove run` (eager) on `rows` with the same weights: the reference rows."""
        inputs = os.path.join(cls.scratch.name, f"in{len(rows)}.safetensors")
        outputs = os.path.join(cls.scratch.name, f"out{len(rows)}.safetensors")
        grove_weights.save_file({"x": rows}, inputs)
        result = subprocess.run(
            [GROVE, "run", MLP, "--device", "sim", "--batch", str(len(rows)), "--iters", "1",
             "--weights", cls.weights, "--inputs", inputs, "--save-outputs", outputs],
            capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        return grove_weights.load_file(outputs)["gelu15"]

    def post(self, body, **kwargs):
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return requests.post(self.server.infer_url(), data=data,
                             headers={"Content-Type": "application/json"}, timeout=60, **kwargs)

    def test_startup_reports_buckets_graphs_and_memory(self):
        text = "".join(self.server.lines)
        self.assertIn("buckets 1,2,4,8", text)
        self.assertIn("4 graphs recorded", text)
        self.assertRegex(text, r"graph memory held on sim:0: pool [0-9.]+ MiB reserved")
        # The free-memory delta holds at least the pool and mlp16x512's 16 MiB of params.
        taken = re.search(r"device memory the server took on sim:0 \(free-memory delta[^)]*\): "
                          r"([0-9.]+) MiB", text)
        self.assertIsNotNone(taken, text)
        self.assertGreaterEqual(float(taken.group(1)), 16.0)
        self.assertIn("weights ", text)

    def test_health_and_metadata(self):
        self.assertEqual(requests.get(self.server.url + "/v2/health/live").json(), {"live": True})
        self.assertEqual(requests.get(self.server.url + "/v2/health/ready").status_code, 200)
        meta = requests.get(f"{self.server.url}/v2/models/{NAME}").json()
        self.assertEqual(meta["name"], NAME)
        self.assertEqual(meta["inputs"], [{"name": "x", "datatype": "FP32", "shape": [-1, 512]}])
        self.assertEqual(meta["outputs"][0]["name"], "gelu15")
        missing = requests.get(f"{self.server.url}/v2/models/other")
        self.assertEqual(missing.status_code, 404)
        self.assertIn("no model 'other'", missing.json()["error"])

    def test_infer_returns_the_rows_grove_run_computes(self):
        answer = self.post(dict(body_for(self.rows[:3]), id="req-7"))
        self.assertEqual(answer.status_code, 200, answer.text)
        body = answer.json()
        self.assertEqual(body["id"], "req-7")
        self.assertEqual(body["model_name"], NAME)
        out = body["outputs"][0]
        self.assertEqual((out["name"], out["datatype"], out["shape"]), ("gelu15", "FP32", [3, 512]))
        got = np.array(out["data"], dtype=np.float32).reshape(3, 512)
        np.testing.assert_allclose(got, self.expected[:3], rtol=1e-4, atol=ATOL)
        # Nested data is accepted as well as flat.
        nested = {"inputs": [{"name": "x", "shape": [1, 512], "datatype": "FP32",
                              "data": [self.rows[5].tolist()]}]}
        got = np.array(self.post(nested).json()["outputs"][0]["data"], dtype=np.float32)
        np.testing.assert_allclose(got, self.expected[5], rtol=1e-4, atol=ATOL)

    def test_binary_tensor_data_extension(self):
        rows = self.rows[6:9]
        header = json.dumps({"inputs": [{"name": "x", "shape": [3, 512], "datatype": "FP32",
                                         "parameters": {"binary_data_size": rows.nbytes}}],
                             "parameters": {"binary_data_output": True}}).encode()
        answer = requests.post(self.server.infer_url(), data=header + rows.tobytes(),
                               headers={"Inference-Header-Content-Length": str(len(header)),
                                        "Content-Type": "application/octet-stream"},
                               timeout=60)
        self.assertEqual(answer.status_code, 200, answer.text)
        length = int(answer.headers["Inference-Header-Content-Length"])
        meta = json.loads(answer.content[:length])
        out = meta["outputs"][0]
        self.assertEqual(out["parameters"]["binary_data_size"], 3 * 512 * 4)
        got = np.frombuffer(answer.content[length:], dtype="<f4").reshape(3, 512)
        np.testing.assert_allclose(got, self.expected[6:9], rtol=1e-4, atol=ATOL)
        # The same rows as JSON give the same floats, bit for bit.
        plain = self.post(body_for(rows)).json()["outputs"][0]["data"]
        np.testing.assert_array_equal(np.array(plain, dtype=np.float32).reshape(3, 512), got)

    def test_concurrent_clients_get_their_own_rows(self):
        # 12 clients at once, 1 or 2 rows each, distinct rows: batched together,
        # each answer must hold exactly its own rows.
        slices, start = [], 0
        for i in range(12):
            n = 1 + i % 2
            slices.append((start, start + n))
            start += n
        results = [None] * len(slices)
        barrier = threading.Barrier(len(slices))

        def client(i):
            a, b = slices[i]
            barrier.wait()
            results[i] = self.post(body_for(self.rows[a:b]))

        before = self.metric("grove_batches_total")
        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(slices))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (a, b) in enumerate(slices):
            self.assertEqual(results[i].status_code, 200, results[i].text)
            got = np.array(results[i].json()["outputs"][0]["data"],
                           dtype=np.float32).reshape(b - a, 512)
            np.testing.assert_allclose(got, self.expected[a:b], rtol=1e-4, atol=ATOL,
                                       err_msg=f"client {i} rows {a}:{b}")
        batches = self.metric("grove_batches_total") - before
        self.assertLess(batches, len(slices), "concurrent requests were never batched together")

    def answer_at_once_then_drain(self, server, count):
        """`count` clients post one row each at once to `server`: each gets its
        own row's answer; SIGTERM then exits 0 having answered them all."""
        results = [None] * count
        barrier = threading.Barrier(count)

        def client(i):
            barrier.wait()
            results[i] = requests.post(server.infer_url(), json=body_for(self.rows[i:i + 1]),
                                       timeout=60)

        try:
            threads = [threading.Thread(target=client, args=(i,)) for i in range(count)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for i, answer in enumerate(results):
                self.assertEqual(answer.status_code, 200, answer.text)
                got = np.array(answer.json()["outputs"][0]["data"], dtype=np.float32)
                np.testing.assert_allclose(got, self.expected[i], rtol=1e-4, atol=ATOL,
                                           err_msg=f"client {i}")
        finally:
            status, out, err = server.stop()
        self.assertEqual(status, 0, err)
        self.assertIn(f"stopped: {count} requests answered", out)

    def test_without_answer_relay_each_client_gets_its_rows_and_drains(self):
        # Note [Answers handed on by a relay]: every other test goes through
        # the relay; without it the worker posts to the event loops itself,
        # and each answer is still its own client's, in every loop, and
        # SIGTERM still answers what is queued.
        self.answer_at_once_then_drain(
            GroveServer("--weights", self.weights, "--max-batch", "8", "--max-wait-us", "2000",
                        "--http-threads", "3", "--no-answer-relay"), 10)

    def test_malformed_bodies_are_400_naming_the_field(self):
        cases = [
            ("not json", "not valid JSON"),
            ({"inputs": 3}, "inputs: missing, or not an array"),
            ({"inputs": [{"name": "y", "shape": [1, 512], "datatype": "FP32", "data": []}]},
             "the model has no input 'y'"),
            ({"inputs": [{"name": "x", "shape": [1, 512], "datatype": "INT64", "data": []}]},
             "datatype: expected FP32, found INT64"),
            ({"inputs": [{"name": "x", "shape": [1, 511], "datatype": "FP32",
                          "data": [0] * 511}]}, "shape: expected [rows, 512]"),
            ({"inputs": [{"name": "x", "shape": [9, 512], "datatype": "FP32",
                          "data": [0] * 9 * 512}]}, "9 rows is outside [1, 8]"),
            ({"inputs": [{"name": "x", "shape": [1, 512], "datatype": "FP32",
                          "data": [0] * 510}]}, "510 values for shape [1, 512]"),
            ({"inputs": [{"name": "x", "shape": [1, 512], "datatype": "FP32",
                          "data": [0] * 17 + ["abc"] + [0] * 494}]},
             "inputs[0] ('x').data[17]: expected a number for FP32"),
        ]
        for body, message in cases:
            answer = self.post(body)
            self.assertEqual(answer.status_code, 400, f"{body!r:.80}: {answer.text}")
            self.assertIn(message, answer.json()["error"])

    def test_body_over_the_limit_is_413(self):
        big = body_for(self.rows[:1])
        big["parameters"] = {"padding": "x" * 300000}  # over the 200000-byte limit
        answer = self.post(big)
        self.assertEqual(answer.status_code, 413)
        self.assertIn("over the limit of 200000 bytes", answer.json()["error"])

    def test_a_client_that_disconnects_does_not_stall_others(self):
        payload = json.dumps(body_for(self.rows[:2])).encode()
        host, port = self.server.url[len("http://"):].split(":")
        for _ in range(3):
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                             % (NAME.encode(), len(payload)) + payload)
            # closed without reading the answer
        start = time.monotonic()
        answer = self.post(body_for(self.rows[2:3]))
        self.assertEqual(answer.status_code, 200)
        self.assertLess(time.monotonic() - start, 10)

    def test_connections_opened_at_once_are_all_answered(self):
        # Note [Listen backlog]: with cpp-httplib's backlog of 5, connections
        # opened together lost their handshake and were closed unanswered.
        host, port = self.server.url[len("http://"):].split(":")
        sockets = [socket.create_connection((host, int(port)), timeout=10) for _ in range(24)]
        try:
            start = time.monotonic()
            for sock in sockets:
                sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            for i, sock in enumerate(sockets):
                self.assertTrue(sock.recv(4096).startswith(b"HTTP/1.1 200"), f"connection {i}")
            # A dropped handshake costs a retransmission of a second or more.
            self.assertLess(time.monotonic() - start, 0.9)
        finally:
            for sock in sockets:
                sock.close()

    def metrics(self):
        text = requests.get(self.server.url + "/metrics").text
        return text, parse_prometheus(text)

    def metric(self, name, labels=""):
        return self.metrics()[1][(name, labels)]

    def test_metrics_are_valid_prometheus_text(self):
        self.post(body_for(self.rows[:1]))
        text, samples = self.metrics()
        for family in ("grove_requests_total", "grove_batches_total", "grove_batch_rows",
                       "grove_bucket_batches_total", "grove_queue_depth",
                       "grove_request_latency_seconds", "grove_graph_replays_total",
                       "grove_graph_pool_reserved_bytes", "grove_padded_rows_total"):
            self.assertRegex(text, rf"# TYPE {family} (counter|gauge|histogram)\n")
        self.assertGreaterEqual(samples[("grove_requests_total", 'outcome="completed"')], 1)
        for histogram in ("grove_request_latency_seconds", "grove_batch_rows"):
            buckets = [(k[1], v) for k, v in samples.items() if k[0] == histogram + "_bucket"]
            counts = [v for _, v in buckets]
            self.assertEqual(counts, sorted(counts), f"{histogram} buckets not cumulative")
            self.assertEqual(buckets[-1], ('le="+Inf"', samples[(histogram + "_count", "")]))
        self.assertGreater(samples[("grove_graph_pool_reserved_bytes", 'device="sim:0"')], 0)
        # Replay counts are refreshed by the worker after batches (at most every 500 ms).
        deadline = time.monotonic() + 10
        while samples[("grove_graph_replays_total", 'device="sim:0"')] <= 4:
            self.assertLess(time.monotonic(), deadline, "replays never counted")
            time.sleep(0.6)
            self.post(body_for(self.rows[:1]))
            samples = self.metrics()[1]

    @unittest.skipUnless(shutil.which("wrk"), "wrk is not installed")
    def test_bounded_wrk_run_gets_only_200(self):
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
            script.write('wrk.method = "POST"\n'
                         'wrk.headers["Content-Type"] = "application/json"\n'
                         f"wrk.body = {json.dumps(json.dumps(body_for(self.rows[:1])))}\n")
        try:
            result = subprocess.run(["wrk", "-t2", "-c8", "-d2s", "--timeout", "10s", "-s",
                                     script.name, self.server.infer_url()],
                                    capture_output=True, text=True, timeout=60)
        finally:
            os.unlink(script.name)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("Non-2xx", result.stdout, result.stdout)
        self.assertNotIn("Socket errors", result.stdout, result.stdout)
        done = int(re.search(r"(\d+) requests in", result.stdout).group(1))
        self.assertGreater(done, 0)
        print(f"\nwrk, 8 connections, 2 s, 1 row per request on sim: {done} requests\n"
              + result.stdout)


class ServeLifecycleTest(unittest.TestCase):
    """Servers of their own: back-pressure, draining, the memory budget."""

    def test_full_queue_answers_503_with_retry_after_and_loses_nothing(self):
        server = GroveServer("--backend", "eager", "--max-batch", "1", "--max-wait-us", "0",
                             "--queue-capacity", "1")
        try:
            row = body_for(np.full((1, 512), 0.25, dtype=np.float32))
            codes, retry_after = [], []
            lock = threading.Lock()

            def client():
                answer = requests.post(server.infer_url(), json=row, timeout=60)
                with lock:
                    codes.append(answer.status_code)
                    if answer.status_code == 503:
                        retry_after.append(answer.headers.get("Retry-After"))
                        assert "queue" in answer.json()["error"], answer.text

            threads = [threading.Thread(target=client) for _ in range(32)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(sorted(set(codes)) , [200, 503], codes)
            self.assertEqual(set(retry_after), {"1"})
            samples = parse_prometheus(requests.get(server.url + "/metrics").text)
            # Every accepted request was answered; every refused one was never queued.
            self.assertEqual(samples[("grove_requests_total", 'outcome="completed"')],
                             codes.count(200))
            self.assertEqual(samples[("grove_requests_total", 'outcome="rejected"')],
                             codes.count(503))
        finally:
            status, _, err = server.stop()
        self.assertEqual(status, 0, err)

    def test_sigterm_drains_and_exits_zero(self):
        # Requests wait up to 3 s for company, so they are still queued when
        # SIGTERM arrives; each must still be answered, without that wait.
        server = GroveServer("--max-batch", "8", "--max-wait-us", "3000000")
        rows = np.linspace(-1, 1, 3 * 512, dtype=np.float32).reshape(3, 512)
        answers = [None] * 3

        def client(i):
            answers[i] = requests.post(server.infer_url(), json=body_for(rows[i:i + 1]),
                                       timeout=60)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        # SIGTERM once all three wait in the queue (not before they were received).
        deadline = time.monotonic() + 30
        while parse_prometheus(requests.get(server.url + "/metrics").text)[
                ("grove_pending_requests", "")] < 3:
            self.assertLess(time.monotonic(), deadline, "the requests never reached the queue")
            time.sleep(0.01)
        status, out, err = server.stop()
        for t in threads:
            t.join()
        self.assertEqual(status, 0, err)
        self.assertIn("received SIGTERM: draining", out)
        self.assertIn("stopped: 3 requests answered", out)
        for answer in answers:
            self.assertEqual(answer.status_code, 200, answer.text)
            self.assertEqual(answer.json()["outputs"][0]["shape"], [1, 512])

    def test_buckets_planned_from_an_earlier_runs_batch_sizes(self):
        with tempfile.TemporaryDirectory() as scratch:
            seen = os.path.join(scratch, "seen.json")
            with open(seen, "w") as f:
                json.dump({"stats": {"batches_by_rows": {"1": 10, "3": 500, "12": 400}}}, f)
            stats = os.path.join(scratch, "stats.json")
            server = GroveServer("--backend", "eager", "--max-batch", "16", "--buckets",
                                 f"auto:{seen}", "--stats-json", stats)
            try:
                text = "".join(server.lines)
                self.assertIn("buckets 1,3,12,16,", text)
                self.assertIn("padded rows 0 (powers of two: 2100), 4 buckets (5)", text)
                rows = np.linspace(-1, 1, 2 * 512, dtype=np.float32).reshape(2, 512)
                answer = requests.post(server.infer_url(), json=body_for(rows), timeout=60)
                self.assertEqual(answer.status_code, 200, answer.text)
                samples = parse_prometheus(requests.get(server.url + "/metrics").text)
                self.assertEqual(samples[("grove_bucket_batches_total", 'bucket="3"')], 1)
                self.assertEqual(samples[("grove_batches_by_rows_total", 'rows="2"')], 1)
            finally:
                status, _, err = server.stop()
            self.assertEqual(status, 0, err)
            with open(stats) as f:
                report = json.load(f)
            self.assertEqual(report["buckets"], [1, 3, 12, 16])
            self.assertEqual(report["stats"]["batches_by_rows"], {"2": 1})
            bad = subprocess.run([GROVE, "serve", MLP, "--device", "sim", "--max-batch", "16",
                                  "--buckets", "4,2,16"], capture_output=True, text=True)
            self.assertEqual(bad.returncode, 2)
            self.assertIn("strictly increasing", bad.stderr)

    def test_buckets_auto_replans_while_serving(self):
        server = GroveServer("--backend", "eager", "--max-batch", "8", "--buckets", "auto",
                             "--replan-every-s", "1", "--replan-min-batches", "10")
        sent = 0
        try:
            rows = np.linspace(-1, 1, 3 * 512, dtype=np.float32).reshape(3, 512)
            deadline = time.monotonic() + 60
            samples = {}
            while samples.get(("grove_bucket_batches_total", 'bucket="3"'), 0) < 1:
                self.assertLess(time.monotonic(), deadline, "never re-planned to a bucket of 3")
                answer = requests.post(server.infer_url(), json=body_for(rows), timeout=60)
                self.assertEqual(answer.status_code, 200, answer.text)
                sent += 1
                samples = parse_prometheus(requests.get(server.url + "/metrics").text)
                time.sleep(0.05)
            # Counters kept counting across the switch.
            self.assertEqual(samples[("grove_requests_total", 'outcome="completed"')], sent)
            self.assertEqual(samples[("grove_batches_by_rows_total", 'rows="3"')], sent)
        finally:
            status, out, err = server.stop()
        self.assertEqual(status, 0, err)
        self.assertIn("buckets re-planned from", out)
        self.assertIn("1,2,4,8 -> 3,8", out)
        self.assertIn(f"stopped: {sent} requests answered", out)

    def test_graph_memory_budget_refuses_to_start(self):
        server = GroveServer("--max-batch", "2", "--graph-memory-budget", "1",
                             expect_ready=False)
        out, err = server.process.communicate(timeout=240)
        self.assertEqual(server.process.returncode, 1, out + err)
        self.assertIn("over --graph-memory-budget 1", err)
        self.assertNotIn("listening on", out)


if __name__ == "__main__":
    junit_main.main()
