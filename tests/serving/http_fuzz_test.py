"""A mutation fuzzer for `grove serve`'s HTTP front (sim, loopback): KServe v2
infer bodies made wrong at the JSON level (shapes, datatypes, data, names,
outputs, parameters) and requests made wrong at the byte level (request line,
headers and body with bytes changed, inserted or deleted, on every route and
method), each on a connection of its own, for FUZZ_SECONDS. A request whose
head and Content-Length body arrived whole must get an answer below 500 (or
501, 505: a method or version it does not speak) within its timeout; the server must stay up, answer a valid request after every
batch of them, and keep its stderr short. The seed is printed; a failure names
it and the request.
"""
import json
import os
import random
import re
import socket
import time
import unittest

import junit_main
from byte_mutations import mutated
from serve_process import NAME, GroveServer

FUZZ_SECONDS = float(os.environ.get("GROVE_HTTP_FUZZ_SECONDS", "10"))
ROW = [0.25] * 512
VALID = {"inputs": [{"name": "x", "shape": [1, 512], "datatype": "FP32", "data": ROW}]}
PATHS = ["/v2/models/%s/infer" % NAME, "/v2/models/%s" % NAME, "/v2/health/ready", "/v2",
         "/metrics", "/v2/models/%s/versions/1/infer" % NAME, "/v2/models/%2e%2e/infer",
         "/v2/models//infer", "//", "*", "/v2/models/%s/infer?x=1#f" % NAME]
MOST_STDERR_LINES = 40


def request(path, body, method="POST"):
    return ("%s %s HTTP/1.1\r\nHost: fuzz\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (method, path, len(body))).encode() + body


def wrong_json(rng):
    body = json.loads(json.dumps(VALID))
    tensor = body["inputs"][0]
    choice = rng.randrange(12)
    if choice == 0:
        tensor["shape"] = [rng.choice([-1, 0, 1, 2 ** 31, 2 ** 62]), rng.choice([512, 0, -5])]
    elif choice == 1:
        tensor["datatype"] = rng.choice(["FP16", "INT64", "BOOL", "BYTES", "fp32", "", 5, None])
    elif choice == 2:
        tensor["data"] = rng.choice([[], [ROW], ["a"] * 512, None, {"a": 1}, [True] * 512,
                                     [2 ** 70] * 512])
    elif choice == 3:
        tensor["name"] = rng.choice(["", "y", None, 3, "x" * 10000])
    elif choice == 4:
        body["inputs"] = rng.choice([[], None, {}, [tensor, tensor], "x"])
    elif choice == 5:
        body["outputs"] = rng.choice([[{"name": "nope"}], None, [5],
                                      [{"name": "y", "parameters": {"binary_data": True}}]])
    elif choice == 6:
        tensor["parameters"] = rng.choice([{"binary_data_size": 64}, {"binary_data_size": -1},
                                           None, [1]])
    elif choice == 7:
        body["id"] = rng.choice(["", "a" * 100000, 5, None, "\u0000"])
    elif choice == 8:
        tensor["shape"] = rng.choice([[512], [1, 1, 512], [], "512", [1.5, 512]])
    elif choice == 9:
        del tensor[rng.choice(["name", "shape", "datatype", "data"])]
    elif choice == 10:
        body = rng.choice([[], 5, "s", None, {"inputs": [[]]}])
    else:
        tensor["data"] = ROW * rng.choice([0, 2, 1000])
    return json.dumps(body).encode()


# Pieces a byte-level edit may insert: line ends, a NUL, a header separator,
# percent escapes, bytes that are not UTF-8, a second framing.
HTTP_PIECES = (b"\r\n", b"\r\n\r\n", b"\x00", b":", b" ", b"%", b"%zz", b"\xff\xfe",
               b"Transfer-Encoding: chunked\r\n")


def whole(data):
    """Whether `data` is a request head and exactly its Content-Length body."""
    head, separator, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"\r\nContent-Length: (\d+)\r\n", head + b"\r\n")
    return bool(separator) and length is not None and int(length.group(1)) == len(body) \
        and b"chunked" not in head.lower()


class HttpFuzzTest(unittest.TestCase):
    def exchange(self, address, data, timeout=10.0):
        """The bytes the server sends back for `data` (the client half-closes
        after it), or None when it sends nothing within `timeout`."""
        with socket.create_connection(address, timeout=timeout) as connection:
            connection.sendall(data)
            connection.shutdown(socket.SHUT_WR)
            answer = b""
            while True:
                try:
                    chunk = connection.recv(65536)
                except socket.timeout:
                    return None
                if not chunk:
                    return answer
                answer += chunk

    def test_malformed_requests_get_answers_and_the_server_keeps_serving(self):
        seed = int(time.time()) % 100000
        print("http fuzz seed %d" % seed)
        rng = random.Random(seed)
        server = GroveServer()
        address = server.address()
        valid = request(PATHS[0], json.dumps(VALID).encode())
        tried = 0
        start = time.monotonic()
        try:
            while time.monotonic() - start < FUZZ_SECONDS:
                for _ in range(50):
                    kind = rng.randrange(3)
                    if kind == 0:
                        data = request(PATHS[0], wrong_json(rng))
                    elif kind == 1:
                        data = mutated(rng, request(
                            rng.choice(PATHS), json.dumps(VALID).encode(),
                            rng.choice(["POST", "GET", "PUT", "HEAD", "OPTIONS", "DELETE"])),
                            HTTP_PIECES)
                    else:
                        data = mutated(rng, valid, HTTP_PIECES)
                    answer = self.exchange(address, data)
                    tried += 1
                    where = "seed %d: %r" % (seed, data[:300])
                    self.assertIsNotNone(answer, "no answer within 10 s, " + where)
                    if whole(data):
                        # Below 500, or the refusals of a method or an HTTP
                        # version the server does not speak (501, 505).
                        self.assertRegex(answer[:16], rb"^HTTP/1\.[01] ([1-4]\d\d|50[15]) ",
                                         where)
                self.assertIsNone(server.process.poll(), "seed %d: the server ended" % seed)
                self.assertIn(b" 200 OK", self.exchange(address, valid)[:20], "seed %d" % seed)
        finally:
            status, out, err = server.stop()
        print("http fuzz: %d requests" % tried)
        self.assertEqual(status, 0, err[-2000:])
        self.assertLessEqual(len(err.splitlines()), MOST_STDERR_LINES, err[-3000:])


if __name__ == "__main__":
    junit_main.main()
