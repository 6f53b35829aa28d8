"""`grove serve` under abuse, over loopback on sim (issue 35, parts 1 and 3).

Each case of the issue that concerns HTTP has a test here that failed with
the cpp-httplib front: invalid UTF-8 in a path or a refused field (1, 2),
chunked bodies past --max-body-bytes (3), slowloris (4), header floods (5),
memory per request (6), SIGTERM under keep-alive load (7), pipelining and
half-closed clients (8), Range amplification (9), and an over-limit
Content-Length refused before its body (14). Every refusal must be a valid
JSON body whatever bytes were sent. Bounded for CI: small limits and short
timeouts, a few seconds per case, two cores.
"""
import json
import random
import re
import resource
import socket
import threading
import time
import unittest

import junit_main
from serve_process import NAME, GroveServer, body_for

SEED = 3535
LIMIT = 1_000_000  # --max-body-bytes of the shared server


def read_response(sock, buffer=b""):
    """(status, headers, body, rest of buffer) of the next response; None at EOF."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk
    head, buffer = buffer.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(buffer) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"EOF inside a body of {length} bytes")
        buffer += chunk
    return status, headers, buffer[:length], buffer[length:]


def exchange(address, data, half_close=False, timeout=10):
    """Sends `data` on a new connection and returns its first response."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        return read_response(sock)


def json_error(test, response, status):
    """Checks a refusal: `status`, a JSON body {"error": ...}; returns the message."""
    test.assertIsNotNone(response, "no answer")
    got, headers, body, _ = response
    test.assertEqual(got, status, body)
    test.assertEqual(headers.get("content-type"), "application/json")
    for name in headers:
        test.assertNotIn("exception", name)
    return json.loads(body.decode("utf-8"))["error"]


def infer_bytes(body, extra=b""):
    return (b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n%s\r\n" % (NAME.encode(), len(body), extra) + body)


class AbuseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
        cls.server = GroveServer("--backend", "eager", "--max-batch", "8", "--max-wait-us", "0",
                                 "--max-body-bytes", str(LIMIT), "--header-timeout-ms", "1500",
                                 "--body-timeout-ms", "1500", "--idle-timeout-ms", "3000",
                                 "--http-threads", "2")
        cls.address = cls.server.address()
        cls.row = json.dumps(body_for_row()).encode()

    @classmethod
    def tearDownClass(cls):
        status, out, err = cls.server.stop()
        assert status == 0, out + err

    def assert_alive(self):
        response = exchange(self.address, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertIsNotNone(response)
        self.assertEqual(response[0], 200)

    def test_invalid_utf8_path_is_404_json(self):
        # Case 1: the 404 handler's JSON dump threw and aborted the server.
        message = json_error(self, exchange(self.address, b"GET /%FF HTTP/1.1\r\nHost: x\r\n\r\n"),
                             404)
        self.assertIn("no route GET /\ufffd", message)
        self.assert_alive()

    def test_invalid_utf8_fields_are_400_json(self):
        # Case 2: 500 with the exception text in an EXCEPTION_WHAT header.
        body = b'{"id":"\xff","inputs":[]}'
        message = json_error(self, exchange(self.address, infer_bytes(body)), 400)
        self.assertIn("not valid JSON", message)
        message = json_error(
            self, exchange(self.address, b"GET /v2/models/%FF HTTP/1.1\r\nHost: x\r\n\r\n"), 404)
        self.assertIn("no model '\ufffd'", message)
        message = json_error(self, exchange(self.address, infer_bytes(self.row).replace(
            NAME.encode(), b"%FE%FF", 1)), 404)
        self.assertIn("no model '\ufffd\ufffd'", message)
        self.assert_alive()

    def test_garbage_requests_get_json_refusals(self):
        rng = random.Random(SEED)
        garbage = [b"\x00\xff\xfe GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                   b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
                   b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
                   b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n"
                   % NAME.encode(),
                   b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]
        garbage += [bytes(rng.randrange(256) for _ in range(200)) + b"\r\n\r\n" for _ in range(5)]
        for data in garbage:
            response = exchange(self.address, data)
            self.assertIsNotNone(response, data)
            status, _, body, _ = response
            self.assertIn(status, (400, 404, 431), data)
            self.assertIn("error", json.loads(body.decode("utf-8")), data)
        self.assert_alive()

    def test_chunked_body_over_the_limit_is_413(self):
        # Case 3: chunked bodies bypassed --max-body-bytes (200 MiB were read).
        chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
        sent = 0
        with socket.create_connection(self.address, timeout=10) as sock:
            sock.sendall(b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n" % NAME.encode())
            sock.settimeout(0.2)
            try:
                while sent < 32 * LIMIT:
                    sock.sendall(chunk)
                    sent += 65536
            except (socket.timeout, ConnectionError):
                pass  # the server stopped reading: it answered
            sock.settimeout(10)
            message = json_error(self, read_response(sock), 413)
        self.assertIn(f"over the limit of {LIMIT} bytes", message)
        # It answers at the limit, then drops at most 4 MiB more before it
        # closes; the rest is what the sockets' buffers hold.
        self.assertLess(sent, 32 * LIMIT, "the server read the whole flood")
        # A chunked body within the limit is served.
        body = self.row
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 1000]), body[i:i + 1000])
                           for i in range(0, len(body), 1000)) + b"0\r\n\r\n"
        status, _, answer, _ = exchange(self.address, b"POST /v2/models/%s/infer HTTP/1.1\r\n"
                                        b"Host: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                        % NAME.encode() + chunked)
        self.assertEqual(status, 200, answer)

    def test_over_limit_content_length_is_refused_before_the_body(self):
        # Case 14: refused only after the 5 s read timeout.
        start = time.monotonic()
        with socket.create_connection(self.address, timeout=10) as sock:
            sock.sendall(b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: %d\r\n\r\n" % (NAME.encode(), LIMIT + 1))
            message = json_error(self, read_response(sock), 413)
        self.assertIn("over the limit", message)
        self.assertLess(time.monotonic() - start, 1.0)

    def test_header_flood_is_431(self):
        # Case 5: a million headers were served and cost 250 MB.
        fields = b"".join(b"X-%d: v\r\n" % i for i in range(1000))
        message = json_error(self, exchange(self.address, b"GET /v2/health/live HTTP/1.1\r\n"
                                            b"Host: x\r\n" + fields + b"\r\n"), 431)
        self.assertIn("more than 64 header fields", message)
        big = b"X-Big: " + b"a" * 20000 + b"\r\n"
        message = json_error(self, exchange(self.address, b"GET /v2/health/live HTTP/1.1\r\n"
                                            b"Host: x\r\n" + big + b"\r\n"), 431)
        self.assertIn("over the limit of 16384 bytes", message)
        self.assert_alive()

    def test_slowloris_connection_gets_408(self):
        # Case 4, one connection: a header trickled a byte at a time is cut
        # off by --header-timeout-ms (1.5 s here), whatever its pace.
        start = time.monotonic()
        with socket.create_connection(self.address, timeout=10) as sock:
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\n")
            response = None
            sock.settimeout(0.25)
            while response is None and time.monotonic() - start < 6:
                try:
                    sock.sendall(b"X")
                    response = read_response(sock)
                except socket.timeout:
                    continue
                except ConnectionError:
                    break
            message = json_error(self, response, 408)
        self.assertIn("not complete within 1500 ms", message)
        self.assertLess(time.monotonic() - start, 4)

    def test_many_slow_connections_do_not_starve_others(self):
        # Case 4: past --http-threads trickling connections, nobody was answered.
        slow = []
        try:
            for _ in range(500):
                sock = socket.create_connection(self.address, timeout=10)
                sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nX-Slow: ")
                slow.append(sock)
            stop = threading.Event()

            def trickle():
                while not stop.wait(0.3):
                    for sock in slow:
                        try:
                            sock.send(b"a")
                        except OSError:
                            pass

            trickler = threading.Thread(target=trickle)
            trickler.start()
            try:
                for _ in range(4):
                    start = time.monotonic()
                    response = exchange(self.address, infer_bytes(self.row), timeout=5)
                    self.assertEqual(response[0], 200, response[2])
                    self.assertLess(time.monotonic() - start, 1.0)
                    time.sleep(0.1)
            finally:
                stop.set()
                trickler.join()
        finally:
            for sock in slow:
                sock.close()

    def test_idle_keep_alive_connection_is_closed_after_its_requests(self):
        # Note [Deadlines without a timer per phase]: after two answers the
        # idle deadline (3 s here) still closes the connection, neither before
        # it nor long after, though the timer armed at the first request
        # waited for earlier deadlines of other phases.
        with socket.create_connection(self.address, timeout=10) as sock:
            rest = b""
            for _ in range(2):
                sock.sendall(infer_bytes(self.row))
                status, _, body, rest = read_response(sock, rest)
                self.assertEqual(status, 200, body)
            answered = time.monotonic()
            self.assertEqual(sock.recv(1), b"")  # EOF: the server closed it
            idle = time.monotonic() - answered
        self.assertGreater(idle, 2.5)
        self.assertLess(idle, 4.5)

    def test_trickled_body_gets_408_after_a_quick_header(self):
        # Note [Connection timeouts]: the body deadline (1.5 s) runs from the
        # header's end, whatever the idle and header deadlines were.
        request = infer_bytes(self.row)
        head, body = request.split(b"\r\n\r\n", 1)
        start = time.monotonic()
        with socket.create_connection(self.address, timeout=10) as sock:
            sock.sendall(head + b"\r\n\r\n" + body[:10])
            sock.settimeout(0.2)
            response = None
            for byte in body[10:]:
                try:
                    sock.sendall(bytes([byte]))
                    response = read_response(sock)
                    break
                except socket.timeout:
                    continue
                except ConnectionError:
                    break
            message = json_error(self, response, 408)
        self.assertIn("body not complete within 1500 ms", message)
        self.assertGreater(time.monotonic() - start, 1.4)
        self.assertLess(time.monotonic() - start, 4)

    def test_connections_on_every_loop_are_answered(self):
        # Note [One event loop per thread]: connections alternate between the
        # front's two loops; keep-alive requests on eight of them, sent together,
        # are all answered, each on its own connection.
        socks = [socket.create_connection(self.address, timeout=10) for _ in range(8)]
        try:
            for rounds in range(3):
                for sock in socks:
                    sock.sendall(infer_bytes(self.row))
                for sock in socks:
                    status, headers, body, rest = read_response(sock)
                    self.assertEqual((status, rest), (200, b""), body)
                    self.assertEqual(headers["connection"], "keep-alive")
                    self.assertEqual(json.loads(body)["outputs"][0]["shape"], [1, 512])
        finally:
            for sock in socks:
                sock.close()

    def test_pipelined_requests_are_answered_in_order(self):
        # Case 8: three GETs in one write got one answer.
        paths = [b"/v2/health/live", b"/v2", b"/v2/models/" + NAME.encode()]
        data = b"".join(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % p for p in paths)
        data += infer_bytes(self.row)
        with socket.create_connection(self.address, timeout=10) as sock:
            sock.sendall(data)
            rest = b""
            bodies = []
            for _ in range(4):
                status, _, body, rest = read_response(sock, rest)
                self.assertEqual(status, 200, body)
                bodies.append(json.loads(body))
        self.assertEqual(bodies[0], {"live": True})
        self.assertEqual(bodies[1]["name"], "grove")
        self.assertEqual(bodies[2]["name"], NAME)
        self.assertEqual(bodies[3]["outputs"][0]["shape"], [1, 512])

    def test_half_closed_client_is_answered(self):
        # Case 8: a client that shuts down its sending side after its requests
        # gets every answer, then EOF (cpp-httplib answered only the first).
        data = infer_bytes(self.row) + b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n" * 2
        with socket.create_connection(self.address, timeout=10) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            rest, statuses = b"", []
            while (response := read_response(sock, rest)) is not None:
                statuses.append(response[0])
                rest = response[3]
        self.assertEqual(statuses, [200, 200, 200])

    def test_expect_continue_and_http10_clients(self):
        # curl sends Expect: 100-continue before a large body; an HTTP/1.0
        # client without keep-alive is answered and the connection closed.
        with socket.create_connection(self.address, timeout=10) as sock:
            sock.sendall(infer_bytes(b"", b"Expect: 100-continue\r\n").replace(
                b"Content-Length: 0", b"Content-Length: %d" % len(self.row)))
            self.assertEqual(sock.recv(64), b"HTTP/1.1 100 Continue\r\n\r\n")
            sock.sendall(self.row)
            status, _, body, _ = read_response(sock)
            self.assertEqual(status, 200, body)
        message = json_error(self, exchange(self.address, infer_bytes(b"").replace(
            b"Content-Length: 0", b"Content-Length: %d\r\nExpect: 100-continue" % (LIMIT + 1))),
            413)
        self.assertIn("over the limit", message)
        with socket.create_connection(self.address, timeout=10) as sock:
            sock.sendall(b"GET /v2/health/live HTTP/1.0\r\n\r\n")
            status, headers, _, rest = read_response(sock)
            self.assertEqual((status, headers["connection"]), (200, "close"))
            self.assertIsNone(read_response(sock, rest))

    def test_ranges_do_not_amplify(self):
        # Case 9: 2,000 ranges on /metrics returned 10.3 MB for a 6 KB request.
        plain = exchange(self.address, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        ranges = b",".join([b"0-"] * 2000)
        status, headers, body, _ = exchange(
            self.address, b"GET /metrics HTTP/1.1\r\nHost: x\r\nRange: bytes=" + ranges +
            b"\r\n\r\n")
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("accept-ranges"), "none")
        self.assertLess(len(body), 2 * len(plain[2]) + 4096)


def body_for_row():
    import numpy as np
    return body_for(np.linspace(-1, 1, 512, dtype=np.float32).reshape(1, 512))


class AbuseLifecycleTest(unittest.TestCase):
    """Servers of their own: SIGTERM under load, memory per request."""

    def test_sigterm_under_keep_alive_load_answers_every_request(self):
        # Case 7: every keep-alive client's next request got EOF, none was
        # told Connection: close, and requests read were closed unanswered.
        server = GroveServer("--backend", "eager", "--max-batch", "8", "--max-wait-us", "0")
        request = infer_bytes(json.dumps(body_for_row()).encode())
        answered = [0] * 8
        closing = [None] * 8
        lost = []
        started = threading.Barrier(9)

        def client(i):
            with socket.create_connection(server.address(), timeout=20) as sock:
                started.wait()
                rest = b""
                while True:
                    try:
                        sock.sendall(request)
                        response = read_response(sock, rest)
                    except ConnectionError as error:
                        lost.append(f"client {i}: {error!r} after {answered[i]} answers")
                        return
                    if response is None:
                        lost.append(f"client {i}: EOF after {answered[i]} answers")
                        return
                    status, headers, body, rest = response
                    if status != 200:
                        lost.append(f"client {i}: {status} {body!r}")
                        return
                    answered[i] += 1
                    if headers.get("connection") == "close":
                        closing[i] = answered[i]
                        return

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        started.wait()
        time.sleep(1.0)
        status, out, err = server.stop()
        for t in threads:
            t.join()
        self.assertEqual(status, 0, err)
        self.assertEqual(lost, [])
        self.assertTrue(all(closing), closing)  # each last answer said Connection: close
        total = sum(answered)
        self.assertGreater(total, 8)
        self.assertIn(f"stopped: {total} requests answered", out)
        self.assertIn(f"http: {total} responses written", out)

    def test_a_request_takes_few_reads(self):
        # Note [Read sizes]: with no reserve, an idle connection's next
        # request was read 512 bytes at a time (a 10 KB body: 20 reads).
        server = GroveServer("--backend", "eager", "--max-batch", "8", "--max-wait-us", "0")
        request = infer_bytes(json.dumps(body_for_row()).encode())
        self.assertGreater(len(request), 9000)
        count = 20
        with socket.create_connection(server.address(), timeout=10) as sock:
            rest = b""
            for _ in range(count):
                sock.sendall(request)
                status, _, body, rest = read_response(sock, rest)
                self.assertEqual(status, 200, body)
                time.sleep(0.01)  # idle between requests, as a keep-alive client is
        status, out, err = server.stop()
        self.assertEqual(status, 0, err)
        found = re.search(r"(\d+) socket reads of requests", out)
        self.assertIsNotNone(found, out)
        # One read each (the header read's reserve holds a 10 KB request; it
        # took two at 8 KiB), and the read that sees the close; the loopback
        # may split a send now and then.
        self.assertLessEqual(int(found.group(1)), count + count // 2 + 1, out)

    def test_connections_past_the_limit_get_503_json(self):
        server = GroveServer("--backend", "eager", "--max-batch", "1", "--max-connections", "2")
        try:
            held = [socket.create_connection(server.address(), timeout=10) for _ in range(2)]
            time.sleep(0.2)  # accepted
            message = json_error(self, exchange(server.address(), b"GET /v2/health/live "
                                                b"HTTP/1.1\r\nHost: x\r\n\r\n"), 503)
            self.assertIn("too many connections: 2 are open (--max-connections)", message)
            for sock in held:
                sock.close()
            time.sleep(0.2)  # closed
            self.assertEqual(exchange(server.address(), b"GET /v2/health/live HTTP/1.1\r\n"
                                      b"Host: x\r\n\r\n")[0], 200)
        finally:
            status, _, err = server.stop()
        self.assertEqual(status, 0, err)

    def test_memory_per_request_is_bounded_near_the_body(self):
        # Case 6: a 16 MiB body of zeros took +164 MB (about 10x).
        server = GroveServer("--backend", "eager", "--max-batch", "8", "--max-wait-us", "0",
                             "--max-body-bytes", str(20 << 20))
        try:
            body = b'{"inputs":[{"name":"x","shape":[8,512],"datatype":"FP32","data":[' + \
                b",".join([b"0"] * (8 << 20)) + b"]}]}"
            server.reset_peak_memory()
            before = server.memory_kb("VmRSS")
            response = exchange(server.address(), infer_bytes(body), timeout=60)
            self.assertEqual(response[0], 400, response[2])
            growth = (server.memory_kb("VmHWM") - before) * 1024
            factor = growth / len(body)
            print(f"\npeak memory growth for a {len(body) >> 20} MiB body of zeros: "
                  f"{growth / 2**20:.1f} MiB ({factor:.2f}x the body)")
            self.assertLess(factor, MEMORY_FACTOR_BOUND)
        finally:
            status, _, err = server.stop()
        self.assertEqual(status, 0, err)


# The README's figure (serving section): the body, the bytes read beside it,
# and the values, in the worst case of one-character numbers.
MEMORY_FACTOR_BOUND = 3.0


if __name__ == "__main__":
    junit_main.main()
