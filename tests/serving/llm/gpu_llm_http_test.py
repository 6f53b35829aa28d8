"""On a GPU host: `grove serve MODEL_DIR --device cuda` with a random-weight
LLaMA checkpoint, 8 clients at once on /v1/completions (greedy, token ids)
each get the tokens `grove generate --device cuda` gives that prompt alone,
and a client that closes its stream mid-way frees its KV slot. Skips without
CUDA (CI: torch 1.13 on CPU). The grove binary is GROVE_BINARY or cli/grove
in the Bazel runfiles."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import requests
import torch

# tests/serving (serve_process) beside this folder: bazel puts it on the path
# through the deps; run as a file (the GPU bundle), the folder above is added.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import junit_main  # noqa: E402
import reference_decoders as ref  # noqa: E402
from serve_process import GROVE, GroveServer, parse_prometheus  # noqa: E402

SEED = 383
FLAGS = ["--max-seq-len", "128", "--prompt-buckets", "16,32", "--batch-buckets", "1,2,4,8"]


@unittest.skipUnless(torch.cuda.is_available(), "no CUDA device (the GPU host runs this test)")
class GpuLlmHttpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.scratch.name, "tiny-llama")
        config = ref.llama_config("float32", vocab=256, positions=128)
        ref.write_checkpoint(ref.make_model(config, SEED), config, cls.dir)
        cls.server = GroveServer(*FLAGS, model=cls.dir, device="cuda")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.scratch.cleanup()

    def complete(self, prompt):
        answer = requests.post(self.server.url + "/v1/completions", timeout=120, json={
            "model": "tiny-llama", "prompt": prompt, "max_tokens": 24, "temperature": 0,
            "ignore_eos": True})
        self.assertEqual(answer.status_code, 200, answer.text)
        return answer.json()["choices"][0]["token_ids"]

    def test_eight_clients_get_what_grove_generate_gives_alone(self):
        prompts = [[3 + i, 50 + 2 * i, 7, 100 - i, 11 + i] for i in range(8)]
        together = [None] * 8
        barrier = threading.Barrier(8)

        def client(i):
            barrier.wait()
            together[i] = self.complete(prompts[i])

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out = subprocess.run(
            [GROVE, "generate", self.dir, "--device", "cuda", "--prompt-ids",
             ";".join(",".join(map(str, p)) for p in prompts), "--max-tokens", "24",
             "--ignore-eos", *FLAGS], capture_output=True, text=True, timeout=600)
        self.assertEqual(out.returncode, 0, out.stderr)
        alone = [[int(t) for t in line.split(",")] for line in out.stdout.split()]
        self.assertEqual(together, alone)

    def test_disconnect_mid_stream_frees_the_slot(self):
        body = json.dumps({"input_ids": [5, 6, 7], "max_tokens": 120, "ignore_eos": True})
        with socket.create_connection(self.server.address(), timeout=60) as sock:
            sock.sendall(("POST /v2/models/tiny-llama/generate_stream HTTP/1.1\r\nHost: g\r\n"
                          "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
            received = b""
            while received.count(b"data: ") < 2:
                chunk = sock.recv(4096)
                self.assertTrue(chunk)
                received += chunk
        deadline = time.monotonic() + 30
        while True:
            metrics = parse_prometheus(requests.get(self.server.url + "/metrics", timeout=30).text)
            if metrics[("grove_llm_kv_slots_used", "")] == 0:
                break
            self.assertLess(time.monotonic(), deadline, "the slot was not freed")
            time.sleep(0.01)
        self.assertGreaterEqual(metrics[("grove_llm_requests_total", 'end="cancelled"')], 1)
        self.assertEqual(len(self.complete([9, 9, 9])), 24)


if __name__ == "__main__":
    junit_main.main()
