"""`grove serve MODEL_DIR` over loopback on sim: a tiny random-weight LLaMA
checkpoint with a SentencePiece tokenizer trained here (spm_train, vocabulary
sized to the checkpoint's), talked to by an HTTP client. Covers KServe
generate and generate_stream, OpenAI /v1/completions (streamed and not), the
server-sent event framing, tokens against the plain-PyTorch reference decode
(greedy) and `grove generate` (seeded sampling), 8 concurrent clients, the
400s, stop strings (Note [Stop strings over detokenized text]), a client that
disconnects mid-stream (Note [Streamed answers]) and the LLM's /metrics.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import numpy as np
import requests
import torch

import junit_main
import reference_decoders as ref
from serve_process import GROVE, GroveServer, parse_prometheus

SEED = 3838
VOCAB = 128
NAME = "tiny-llama"
POSITIONS = 128
SERVE_FLAGS = ["--max-seq-len", str(POSITIONS), "--batch-buckets", "1,2,4,8",
               "--prompt-buckets", "16,32", "--max-tokens-limit", "100", "--seed", "7"]
# `grove generate` with the server's cache and prompt buckets: the same shapes.
CLI_FLAGS = ["--max-seq-len", str(POSITIONS), "--prompt-buckets", "16,32", "--batch-buckets", "1"]
TIE = 4e-3  # logits closer than this may order differently on sim and in PyTorch

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex jolly "
         "vexed kings and bold queens sing of rivers mountains stars gardens lanterns ships "
         "harbors winter summer autumn spring morning evening bread honey silver copper").split()


def spm(tool, model, text, *flags):
    out = subprocess.run([tool, "--model=" + model, *flags], input=text, capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout


class LlmHttpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("spm_train") is None:
            raise AssertionError("spm_train is missing: tools/setup.sh installs Debian's "
                                 "sentencepiece package")
        cls.scratch = tempfile.TemporaryDirectory()
        cls.dir = os.path.join(cls.scratch.name, NAME)
        os.makedirs(cls.dir)
        rng = np.random.default_rng(SEED)
        corpus = os.path.join(cls.scratch.name, "corpus.txt")
        with open(corpus, "w") as f:
            for _ in range(400):
                f.write(" ".join(rng.choice(WORDS, rng.integers(5, 15))) + ".\n")
        subprocess.run(["spm_train", "--input=" + corpus,
                        "--model_prefix=" + os.path.join(cls.dir, "tokenizer"),
                        "--vocab_size=%d" % VOCAB, "--character_coverage=1.0",
                        "--model_type=bpe"], capture_output=True, check=True, timeout=120)
        cls.tokenizer = os.path.join(cls.dir, "tokenizer.model")
        cls.config = ref.llama_config("float32", vocab=VOCAB, positions=POSITIONS)
        cls.model = ref.make_model(cls.config, SEED)
        ref.write_checkpoint(cls.model, cls.config, cls.dir)
        cls.server = GroveServer(*SERVE_FLAGS, model=cls.dir)
        cls.url = cls.server.url

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.scratch.cleanup()

    # -- helpers ---------------------------------------------------------------------------

    def encode(self, text):
        """BOS, then the tokenizer's pieces: what the server makes of a text prompt."""
        ids = spm("spm_encode", self.tokenizer, text + "\n", "--output_format=id").split()
        return [1] + [int(i) for i in ids]

    def decode(self, ids):
        return spm("spm_decode", self.tokenizer, " ".join(map(str, ids)) + "\n",
                   "--input_format=id").rstrip("\n")

    def check_reference(self, prompt, tokens):
        """`tokens` are the reference's greedy tokens, up to the first near tie."""
        expected, logits = ref.greedy(self.model, prompt, len(tokens))
        for step, (got, want) in enumerate(zip(tokens, expected)):
            self.assertEqual(got, want, "step %d of prompt %s (seed %d)" % (step, prompt, SEED))
            top2 = np.sort(logits[step].numpy())[-2:]
            if top2[1] - top2[0] <= TIE:
                return

    def post(self, path, body, **kwargs):
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return requests.post(self.url + path, data=data, timeout=120,
                             headers={"Content-Type": "application/json"}, **kwargs)

    def generate(self, body):
        answer = self.post("/v2/models/%s/generate" % NAME, body)
        self.assertEqual(answer.status_code, 200, answer.text)
        return answer.json()

    def events(self, path, body):
        """The raw body of a streamed answer, split into its server-sent events."""
        answer = self.post(path, body, stream=True)
        self.assertEqual(answer.status_code, 200, answer.text)
        self.assertEqual(answer.headers["Content-Type"], "text/event-stream")
        self.assertEqual(answer.headers.get("Transfer-Encoding"), "chunked")
        self.assertNotIn("Content-Length", answer.headers)
        raw = b"".join(answer.iter_content(chunk_size=None)).decode()
        self.assertTrue(raw.endswith("\n\n"), raw[-40:])
        events = raw[:-2].split("\n\n")
        for event in events:
            self.assertTrue(event.startswith("data: ") and "\n" not in event, repr(event))
        return [event[len("data: "):] for event in events]

    def metrics(self):
        answer = requests.get(self.url + "/metrics", timeout=30)
        self.assertEqual(answer.status_code, 200)
        return parse_prometheus(answer.text)

    # -- the routes ------------------------------------------------------------------------

    def test_generate_token_ids_match_the_reference(self):
        prompt = [5, 17, 3, 88, 41, 9, 60]
        answer = self.generate({"input_ids": prompt, "max_tokens": 10, "ignore_eos": True})
        self.assertEqual(len(answer["output_ids"]), 10)
        self.check_reference(prompt, answer["output_ids"])
        self.assertEqual(answer["finish_reason"], "length")
        self.assertEqual(answer["usage"], {"prompt_tokens": 7, "completion_tokens": 10})
        self.assertEqual(answer["model_name"], NAME)

    def test_generate_text_in_and_out(self):
        text = "the quick brown fox jumps"
        answer = self.generate({"text_input": text, "parameters": {"max_tokens": 8,
                                                                   "ignore_eos": True}})
        prompt = self.encode(text)
        self.check_reference(prompt, answer["output_ids"])
        self.assertEqual(answer["usage"]["prompt_tokens"], len(prompt))
        # The text is what the tokenizer makes of prompt + output, after the prompt's text.
        self.assertEqual(self.decode(prompt + answer["output_ids"]),
                         self.decode(prompt) + answer["text_output"])

    def test_generate_stream_sends_one_event_per_token_then_the_end(self):
        body = {"text_input": "bold queens sing", "max_tokens": 9, "ignore_eos": True}
        whole = self.generate(body)
        events = [json.loads(e) for e in self.events("/v2/models/%s/generate_stream" % NAME, body)]
        self.assertEqual(len(events), 10)
        for index, event in enumerate(events[:-1]):
            self.assertEqual(event["index"], index)
            self.assertEqual(len(event["output_ids"]), 1)
            self.assertNotIn("finish_reason", event)
        last = events[-1]
        self.assertEqual(last["finish_reason"], "length")
        self.assertEqual(last["usage"]["completion_tokens"], 9)
        self.assertEqual([e["output_ids"][0] for e in events[:-1]], whole["output_ids"])
        self.assertEqual("".join(e["text_output"] for e in events), whole["text_output"])

    def test_http10_client_gets_an_unframed_stream(self):
        # Note [Streams to HTTP/1.0 clients] (serving/http_stream.h): HTTP/1.0
        # has no chunked coding; the stream is the events themselves, ended
        # by the server closing the connection.
        body = {"input_ids": [5, 6, 7], "max_tokens": 5, "ignore_eos": True}
        text = json.dumps(body)
        with socket.create_connection(self.server.address(), timeout=60) as sock:
            sock.sendall(("POST /v2/models/%s/generate_stream HTTP/1.0\r\nHost: grove\r\n"
                          "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                          % (NAME, len(text), text)).encode())
            received = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break  # the server ended the body by closing
                received += chunk
        head, _, payload = received.partition(b"\r\n\r\n")
        self.assertIn(b" 200 ", head.split(b"\r\n")[0])
        self.assertNotIn(b"Transfer-Encoding", head)
        self.assertIn(b"Connection: close", head)
        events = payload.decode()[:-2].split("\n\n")
        self.assertTrue(all(event.startswith("data: ") for event in events), payload[:200])
        tokens = [json.loads(event[len("data: "):])["output_ids"] for event in events[:-1]]
        self.assertEqual([token for ids in tokens for token in ids],
                         self.generate(body)["output_ids"])

    def test_openai_completion_text_and_token_prompts(self):
        text = "seven wizards quietly"
        prompt = self.encode(text)
        for sent in (text, prompt, [prompt]):
            answer = self.post("/v1/completions", {"model": NAME, "prompt": sent, "max_tokens": 6,
                                                   "temperature": 0, "ignore_eos": True})
            self.assertEqual(answer.status_code, 200, answer.text)
            body = answer.json()
            self.assertEqual(body["object"], "text_completion")
            self.assertEqual(body["model"], NAME)
            choice = body["choices"][0]
            self.check_reference(prompt, choice["token_ids"])
            self.assertEqual(choice["finish_reason"], "length")
            self.assertEqual(self.decode(prompt + choice["token_ids"]),
                             self.decode(prompt) + choice["text"])
            self.assertEqual(body["usage"], {"prompt_tokens": len(prompt), "completion_tokens": 6,
                                             "total_tokens": len(prompt) + 6})

    def test_openai_stream_ends_with_usage_then_done(self):
        body = {"model": NAME, "prompt": "winter summer", "max_tokens": 5, "temperature": 0,
                "ignore_eos": True}
        whole = self.post("/v1/completions", body).json()["choices"][0]
        events = self.events("/v1/completions", dict(body, stream=True))
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        self.assertEqual(len(chunks), 6)
        self.assertTrue(all(c["object"] == "text_completion" for c in chunks))
        self.assertEqual(len({c["id"] for c in chunks}), 1)
        self.assertEqual([c["choices"][0]["token_ids"][0] for c in chunks[:-1]],
                         whole["token_ids"])
        self.assertEqual("".join(c["choices"][0]["text"] for c in chunks), whole["text"])
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 5)

    def test_seeded_sampling_is_reproducible_per_request_seed(self):
        prompt = [9, 30, 31, 70]
        sampling = {"temperature": 0.9, "top_k": 40, "top_p": 0.9, "max_tokens": 12,
                    "ignore_eos": True}
        first = self.generate(dict(sampling, input_ids=prompt, seed=11))["output_ids"]
        again = self.generate(dict(sampling, input_ids=prompt, seed=11))["output_ids"]
        self.assertEqual(first, again)
        streamed = [json.loads(e) for e in self.events(
            "/v2/models/%s/generate_stream" % NAME, dict(sampling, input_ids=prompt, seed=11))]
        self.assertEqual([e["output_ids"][0] for e in streamed[:-1]], first)
        others = [self.generate(dict(sampling, input_ids=prompt, seed=s))["output_ids"]
                  for s in (12, 13, 14)]
        self.assertTrue(any(o != first for o in others), "every seed gave the same tokens")
        # `grove generate` is the reference decode for sampling (Note [Sampling draws]).
        out = subprocess.run(
            [GROVE, "generate", self.dir, "--device", "sim", "--prompt-ids",
             ",".join(map(str, prompt)), "--max-tokens", "12", "--temperature", "0.9",
             "--top-k", "40", "--top-p", "0.9", "--seed", "11", "--ignore-eos",
             *CLI_FLAGS], capture_output=True, text=True, timeout=600)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual([int(t) for t in out.stdout.split(",")], first)

    def test_eight_concurrent_clients_get_the_tokens_they_get_alone(self):
        prompts = [[3 + i, 50 + 2 * i, 7, 100 - i, 11 + i] for i in range(8)]
        body = lambda p: {"input_ids": p, "max_tokens": 40, "ignore_eos": True}
        alone = [self.generate(body(p))["output_ids"] for p in prompts]
        together = [None] * 8
        barrier = threading.Barrier(8)

        def client(i):
            barrier.wait()
            together[i] = self.generate(body(prompts[i]))["output_ids"]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        before = self.metrics()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(together, alone)
        for prompt, tokens in zip(prompts, alone):
            self.check_reference(prompt, tokens)
        after = self.metrics()
        rows = lambda m, le: m[("grove_llm_decode_batch_rows_bucket", 'le="%s"' % le)]
        # Some decode steps ran several requests at once (how many depends on
        # when the clients' requests arrive on a loaded machine).
        self.assertGreater((after[("grove_llm_decode_batch_rows_count", "")] - rows(after, 1)) -
                           (before[("grove_llm_decode_batch_rows_count", "")] - rows(before, 1)), 0)

    def test_refusals_are_400_with_a_json_message(self):
        generate = "/v2/models/%s/generate" % NAME
        cases = [
            (generate, {"input_ids": list(range(3, 40)), "max_tokens": 2}, "longer than the 32"),
            (generate, {"input_ids": [5], "max_tokens": 101}, "over this server's limit of 100"),
            (generate, {"input_ids": [5] * 30, "max_tokens": 100}, "cache positions"),
            (generate, {"input_ids": [5], "max_tokens": "5"}, "max_tokens must be an integer"),
            (generate, {"input_ids": [5], "temperature": "hot"}, "temperature must be a number"),
            (generate, {"input_ids": "5 6"}, "input_ids must be a list of token ids"),
            (generate, {"input_ids": [5, -1]}, "is not a token id"),
            (generate, {"input_ids": [5, VOCAB]}, "outside the model's vocabulary"),
            (generate, {"input_ids": []}, "the prompt is empty"),
            (generate, {"text_input": ""}, "the prompt is empty"),
            (generate, {"max_tokens": 3}, "the prompt is missing"),
            (generate, {"input_ids": [5], "max_token": 3}, 'unknown field "max_token"'),
            (generate, {"input_ids": [5], "top_p": 0}, "top_p"),
            (generate, {"input_ids": [5], "stop": 3}, "stop must be a string or a list"),
            (generate, "[1, 2", "not JSON"),
            ("/v1/completions", {"model": "gpt-4", "prompt": "hi"}, 'model "gpt-4" does not exist'),
            ("/v1/completions", {"model": NAME, "prompt": ""}, "the prompt is empty"),
            ("/v1/completions", {"model": NAME, "prompt": []}, "the prompt is empty"),
            ("/v1/completions", {"model": NAME, "prompt": 5}, "prompt must be text or a list"),
            ("/v1/completions", {"model": NAME, "prompt": ["a", "b"]}, "one prompt per request"),
            ("/v1/completions", {"model": NAME, "prompt": "hi", "max_tokens": 1000},
             "over this server's limit"),
            ("/v1/completions", {"model": NAME, "prompt": "hi", "n": 2}, "n 2 is not supported"),
            ("/v1/completions", {"model": NAME, "prompt": "hi", "stream": "yes"},
             "stream must be true or false"),
        ]
        for path, body, words in cases:
            answer = self.post(path, body)
            self.assertEqual(answer.status_code, 400, "%s %s: %s" % (path, body, answer.text))
            error = answer.json()["error"]
            message = error["message"] if isinstance(error, dict) else error
            self.assertIn(words, message, "%s %s" % (path, body))
            if path == "/v1/completions":
                self.assertEqual(error["type"], "invalid_request_error")
        answer = self.post("/v2/models/gpt-4/generate", {"input_ids": [5]})
        self.assertEqual(answer.status_code, 404)
        self.assertIn("no model 'gpt-4'", answer.json()["error"])
        # The server still answers.
        self.assertEqual(len(self.generate({"input_ids": [5], "max_tokens": 2})["output_ids"]), 2)

    def test_hostile_bodies_get_a_400_and_the_server_goes_on(self):
        """Note [Bounded request bodies], Note [Text prompts are bounded before
        tokenizing]: each body gets a 400 with a JSON message; the deep one
        crashed the server before, the long text took 26 s and 1.2 GB to
        tokenize, the long array became a tree of millions of nodes, and an id
        of any size was echoed in every event of a stream."""
        generate = "/v2/models/%s/generate" % NAME
        stream = "/v2/models/%s/generate_stream" % NAME
        ids = lambda n: '{"input_ids": [%s], "max_tokens": 2}' % ",".join(["5"] * n)
        text = json.dumps({"text_input": "the fox " * (15 << 17), "max_tokens": 2})
        cases = [
            (generate, "[" * 100000 + "]" * 100000, "nests deeper than 16 levels"),
            ("/v1/completions", '{"model": "%s", "prompt": %s}' % (NAME, "[" * 100000),
             "nests deeper than 16 levels"),
            (generate, ids(15 << 19), "holds more than 288 JSON values"),
            (generate, ids(33), "longer than the 32 this server accepts"),
            (generate, text, "text of 15728640 bytes is longer than the 2048"),
            ("/v1/completions", json.dumps({"model": NAME, "prompt": "x" * 2049}),
             "text of 2049 bytes is longer than the 2048"),
            (stream, json.dumps({"input_ids": [5], "id": "i" * (1 << 20)}),
             "id is 1048576 bytes long; at most 256"),
            (generate, json.dumps({"input_ids": [5], "id": 7}), "id must be a string"),
            (generate, b'{"text_input": "ab\xff\xfe", "max_tokens": 2}',
             "not JSON: syntax error while parsing value - invalid string: ill-formed UTF-8"),
        ]
        for path, body, words in cases:
            self.server.reset_peak_memory()
            before = self.server.memory_kb("VmRSS")
            answer = self.post(path, body)
            growth = (self.server.memory_kb("VmHWM") - before) * 1024
            self.assertEqual(answer.status_code, 400, "%s %.80r: %s" % (path, body, answer.text))
            error = answer.json()["error"]
            message = error["message"] if isinstance(error, dict) else error
            self.assertIn(words, message, "%s %.80r" % (path, body))
            # The bytes read, the body, the parser's buffer of a string value and
            # the value itself (the infer front's bound is 3x: it keeps no string
            # values, tests/serving/http_abuse_test.py); tokenizing the 15 MiB
            # text took 1.2 GB (80x) before.
            if len(body) > 1 << 20:
                print("\npeak memory growth for %.1f MiB %s: %.1fx the body" % (
                    len(body) / 2**20, words.split(" bytes")[0], growth / len(body)))
            self.assertLess(growth, 5 * len(body) + (16 << 20), "%s %.80r" % (path, body))
        # The server still answers, and right.
        answer = self.generate({"input_ids": [5, 6], "max_tokens": 4, "ignore_eos": True,
                                "id": "after"})
        self.assertEqual(answer["id"], "after")
        self.check_reference([5, 6], answer["output_ids"])

    def test_stop_string_ends_the_text_before_it(self):
        body = {"text_input": "the lazy dog", "max_tokens": 24, "ignore_eos": True}
        free = self.generate(body)
        text = free["text_output"]
        # A stop string from the middle of what the model says anyway.
        start = next((i for i in range(2, len(text) // 2) if text[i:i + 3].strip()), None)
        self.assertIsNotNone(start, "the output %r has no text to stop at" % text)
        stop = text[start:start + 3]
        cut = text[:text.index(stop)]
        stopped = self.generate(dict(body, stop=[stop, "never said"]))
        self.assertEqual(stopped["finish_reason"], "stop")
        self.assertEqual(stopped["text_output"], cut)
        self.assertLess(len(stopped["output_ids"]), len(free["output_ids"]))
        self.assertEqual(stopped["output_ids"], free["output_ids"][:len(stopped["output_ids"])])
        # The stop string completed by the last token max_tokens allows (Note [A
        # request ends in a token callback]): this killed the server before.
        last = self.generate(dict(body, stop=[stop], max_tokens=len(stopped["output_ids"])))
        self.assertEqual((last["finish_reason"], last["text_output"]), ("stop", cut))
        # Streamed: no event shows any of the stop string, and the text is the same.
        events = [json.loads(e) for e in self.events(
            "/v1/completions", {"model": NAME, "prompt": "the lazy dog", "max_tokens": 24,
                                "temperature": 0, "ignore_eos": True, "stop": stop,
                                "stream": True})[:-1]]
        self.assertEqual("".join(e["choices"][0]["text"] for e in events), cut)
        self.assertEqual(events[-1]["choices"][0]["finish_reason"], "stop")

    def disconnect_after_two_events(self):
        """Opens a stream of 100 tokens, reads two events, closes the socket."""
        body = json.dumps({"input_ids": [5, 6, 7], "max_tokens": 100, "ignore_eos": True})
        with socket.create_connection(self.server.address(), timeout=60) as sock:
            sock.sendall(("POST /v2/models/%s/generate_stream HTTP/1.1\r\nHost: grove\r\n"
                          "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                          % (NAME, len(body), body)).encode())
            received = b""
            while received.count(b"data: ") < 2:
                chunk = sock.recv(4096)
                self.assertTrue(chunk, "the server closed the stream: %r" % received)
                received += chunk

    def idle_metrics(self):
        """/metrics once no request runs and no slot is taken (30 s at most)."""
        deadline = time.monotonic() + 30
        while True:
            now = self.metrics()
            if now[("grove_llm_kv_slots_used", "")] == 0 and now[(
                    "grove_llm_requests_running", "")] == 0 and now[(
                    "grove_llm_requests_waiting", "")] == 0:
                return now
            self.assertLess(time.monotonic(), deadline, "the slot was not freed")
            time.sleep(0.02)

    def test_disconnect_mid_stream_frees_the_slot(self):
        cancelled = ("grove_llm_requests_total", 'end="cancelled"')
        length = ("grove_llm_requests_total", 'end="length"')
        # On a loaded machine the 100 tokens may all come before the close
        # lands; then the request ends by length and the test tries again.
        for attempt in range(5):
            before = self.idle_metrics()
            self.disconnect_after_two_events()
            now = self.idle_metrics()
            if now[length] == before[length]:
                break
        ends = {key[1]: (before.get(key), value) for key, value in now.items()
                if key[0] == "grove_llm_requests_total"}
        self.assertEqual(now[cancelled], before[cancelled] + 1,
                         "attempts: %d; requests by end (before, after): %s"
                         % (attempt + 1, ends))
        generated = ("grove_llm_generated_tokens_total", "")
        self.assertLess(now[generated] - before[generated], 100)
        self.assertEqual(len(self.generate({"input_ids": [8], "max_tokens": 3})["output_ids"]), 3)

    def test_metrics_report_latencies_tokens_and_slots(self):
        self.generate({"input_ids": [4, 4, 4], "max_tokens": 4, "ignore_eos": True})
        m = self.metrics()
        self.assertEqual(m[("grove_llm_kv_slots", "")], 8)
        self.assertGreaterEqual(m[("grove_llm_time_to_first_token_seconds_count", "")], 1)
        self.assertGreaterEqual(m[("grove_llm_inter_token_latency_seconds_count", "")], 3)
        self.assertGreaterEqual(m[("grove_llm_generated_tokens_total", "")], 4)
        self.assertGreaterEqual(m[("grove_llm_requests_total", 'end="length"')], 1)
        self.assertEqual(m[("grove_llm_decode_batch_rows_count", "")],
                         m[("grove_llm_decode_steps_total", "")])
        self.assertIn(("grove_llm_requests_waiting", ""), m)
        # Note [Decode runs on the device]: the 3 decode steps of a lone
        # request ran in one WHILE launch (grove serve's default of 8 steps).
        self.assertGreaterEqual(m[("grove_llm_decode_loop_launches_total", "")], 1)
        self.assertLessEqual(m[("grove_llm_decode_loop_steps_total", "")],
                             m[("grove_llm_decode_steps_total", "")])
        self.assertGreaterEqual(m[("grove_http_responses_total", 'code="200"')], 1)

    def test_grove_generate_prints_the_text_of_a_text_prompt(self):
        text = "silver copper"
        served = self.generate({"text_input": text, "max_tokens": 8, "ignore_eos": True})
        out = subprocess.run(
            [GROVE, "generate", self.dir, "--device", "sim", "--prompt", text, "--max-tokens", "8",
             "--ignore-eos", *CLI_FLAGS], capture_output=True, text=True, timeout=600)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, served["text_output"] + "\n")

    def test_model_metadata_names_the_generate_inputs(self):
        answer = requests.get(self.url + "/v2/models/" + NAME, timeout=30).json()
        self.assertEqual({i["name"] for i in answer["inputs"]}, {"input_ids", "text_input"})
        self.assertEqual(answer["parameters"]["max_prompt_tokens"], 32)
        self.assertEqual(answer["parameters"]["max_prompt_bytes"], 32 * 64)
        models = requests.get(self.url + "/v1/models", timeout=30).json()
        self.assertEqual(models["data"][0]["id"], NAME)


class LlmHttpDrainTest(unittest.TestCase):
    """More streams than slots, then SIGTERM while they run (Note [Draining on
    stop]): the waiting ones are queued, not lost, every stream ends with its
    last event and [DONE], and the exit report counts them."""

    STREAMS = 20  # over the 8 slots of SERVE_FLAGS

    def test_sigterm_during_streams_answers_every_one(self):
        scratch = tempfile.TemporaryDirectory()
        self.addCleanup(scratch.cleanup)
        config = ref.llama_config("float32", vocab=VOCAB, positions=POSITIONS)
        ref.write_checkpoint(ref.make_model(config, SEED + 2), config, scratch.name)
        server = GroveServer(*SERVE_FLAGS, "--model-name", NAME, "--decode-loop-steps", "0",
                             model=scratch.name)
        self.addCleanup(lambda: server.process.poll() is None and server.process.kill())
        streaming = threading.Event()
        results = [None] * self.STREAMS

        def client(i):
            openai = i % 2 == 0
            path = "/v1/completions" if openai else "/v2/models/%s/generate_stream" % NAME
            body = {"prompt" if openai else "input_ids": [3 + i, 9], "max_tokens": 90,
                    "ignore_eos": True, "stream": True}
            if openai:
                body["model"] = NAME
            with requests.post(server.url + path, json=body, stream=True, timeout=120) as answer:
                events = []
                for line in answer.iter_lines():
                    if line:
                        events.append(line.decode())
                        streaming.set()
                results[i] = (answer.status_code, events)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(self.STREAMS)]
        for t in threads:
            t.start()
        self.assertTrue(streaming.wait(120), "no stream sent an event")
        # Every request admitted (a request read after the signal would get a 503).
        deadline = time.monotonic() + 60
        while True:
            m = parse_prometheus(requests.get(server.url + "/metrics", timeout=30).text)
            known = sum(v for k, v in m.items() if k[0] == "grove_llm_requests_total") + \
                m[("grove_llm_requests_running", "")] + m[("grove_llm_requests_waiting", "")]
            if known >= self.STREAMS:
                break
            self.assertLess(time.monotonic(), deadline, "only %d requests came in" % known)
            time.sleep(0.01)
        server.process.send_signal(signal.SIGTERM)
        for t in threads:
            t.join()
        status, out, err = server.stop()
        self.assertEqual(status, 0, err)
        for i, (code, events) in enumerate(results):
            self.assertEqual(code, 200, i)
            openai = i % 2 == 0
            last = json.loads(events[-2 if openai else -1][len("data: "):])
            if openai:
                self.assertEqual(events[-1], "data: [DONE]")
                last = dict(last["choices"][0], usage=last["usage"])
            self.assertEqual(last["finish_reason"], "length", (i, events[-2:]))
            self.assertEqual(last["usage"]["completion_tokens"], 90)
            self.assertEqual(len(events), 91 + openai)
        print("\n" + out.strip().splitlines()[-2])  # how many were answered after the signal
        self.assertIn("length %d, stop 0, cancelled 0, failed 0" % self.STREAMS, out)


class LlmHttpWithoutTokenizerTest(unittest.TestCase):
    """A checkpoint directory with no tokenizer.model: token ids in and out, text refused."""

    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.TemporaryDirectory()
        config = ref.llama_config("float32", vocab=VOCAB, positions=POSITIONS)
        cls.model = ref.make_model(config, SEED + 1)
        ref.write_checkpoint(cls.model, config, cls.scratch.name)
        cls.server = GroveServer(*SERVE_FLAGS, "--model-name", NAME, model=cls.scratch.name)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.scratch.cleanup()

    def post(self, path, body):
        return requests.post(self.server.url + path, json=body, timeout=120)

    def test_token_ids_work_and_text_is_refused(self):
        self.assertIn("tokenizer: none", "".join(self.server.lines))
        answer = self.post("/v2/models/%s/generate" % NAME,
                           {"input_ids": [7, 8, 9], "max_tokens": 5, "ignore_eos": True})
        self.assertEqual(answer.status_code, 200, answer.text)
        self.assertNotIn("text_output", answer.json())
        expected, _ = ref.greedy(self.model, [7, 8, 9], 5)
        self.assertEqual(answer.json()["output_ids"], expected)
        for path, body, words in [
                ("/v2/models/%s/generate" % NAME, {"text_input": "hi"}, "no tokenizer"),
                ("/v1/completions", {"model": NAME, "prompt": "hi"}, "no tokenizer"),
                ("/v2/models/%s/generate" % NAME, {"input_ids": [7], "stop": "x"},
                 "stop strings need a tokenizer")]:
            answer = self.post(path, body)
            self.assertEqual(answer.status_code, 400, answer.text)
            self.assertIn(words, json.dumps(answer.json()))


if __name__ == "__main__":
    torch.manual_seed(SEED)
    junit_main.main()
