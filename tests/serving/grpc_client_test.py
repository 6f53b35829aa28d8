"""`grove serve --grpc-port` over loopback on sim, talked to by a gRPC client.

Python's grpcio (Debian's python3-grpcio) with the messages protoc made from
serving/kserve_v2_grpc.proto: the health and metadata RPCs, ModelInfer with
raw and typed contents giving the same rows as the HTTP front for the same
inputs, the refusals of Note [gRPC status of a refusal] (each its status code
and message; the server keeps serving), the gRPC counters in /metrics, and
SIGTERM with calls in flight (Note [Draining gRPC on stop]).
"""
import threading
import time
import unittest

import grpc
import numpy as np
import requests

import junit_main
from serve_process import NAME, GroveServer, body_for, parse_prometheus
from serving import kserve_v2_grpc_pb2 as pb

SEED = 3502
SERVICE = "/inference.GRPCInferenceService/"


class Client:
    """The six RPCs of GRPCInferenceService on one channel."""

    def __init__(self, target):
        self.channel = grpc.insecure_channel(target)
        replies = {"ServerLive": pb.ServerLiveResponse, "ServerReady": pb.ServerReadyResponse,
                   "ModelReady": pb.ModelReadyResponse,
                   "ServerMetadata": pb.ServerMetadataResponse,
                   "ModelMetadata": pb.ModelMetadataResponse, "ModelInfer": pb.ModelInferResponse}
        for method, reply in replies.items():
            setattr(self, method, self.channel.unary_unary(
                SERVICE + method, request_serializer=lambda message: message.SerializeToString(),
                response_deserializer=reply.FromString))

    def close(self):
        self.channel.close()


def raw_request(rows, model=NAME):
    request = pb.ModelInferRequest(model_name=model, id="r1")
    request.inputs.add(name="x", datatype="FP32", shape=list(rows.shape))
    request.raw_input_contents.append(rows.astype("<f4").tobytes())
    return request


def output_rows(reply):
    output = reply.outputs[0]
    return np.frombuffer(reply.raw_output_contents[0], dtype="<f4").reshape(list(output.shape))


class GrpcClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Max wait 0 and one client at a time: each request is a batch of its
        # own, in the same bucket over either protocol, so answers are bit-equal.
        cls.server = GroveServer("--grpc-port", "0", "--max-batch", "8", "--max-wait-us", "0",
                                 "--max-body-bytes", "100000")
        cls.client = Client(cls.server.grpc_target)
        cls.rng = np.random.default_rng(SEED)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        status, out, err = cls.server.stop()
        assert status == 0, err

    def rows(self, count):
        return (self.rng.random((count, 512), dtype=np.float32) * 2 - 1)

    def refusal(self, request):
        with self.assertRaises(grpc.RpcError) as raised:
            self.client.ModelInfer(request, timeout=60)
        return raised.exception.code(), raised.exception.details()

    def test_health_and_metadata(self):
        self.assertTrue(self.client.ServerLive(pb.ServerLiveRequest(), timeout=30).live)
        self.assertTrue(self.client.ServerReady(pb.ServerReadyRequest(), timeout=30).ready)
        self.assertTrue(self.client.ModelReady(pb.ModelReadyRequest(name=NAME), timeout=30).ready)
        self.assertEqual(self.client.ServerMetadata(pb.ServerMetadataRequest(), timeout=30).name,
                         "grove")
        metadata = self.client.ModelMetadata(pb.ModelMetadataRequest(name=NAME), timeout=30)
        self.assertEqual(metadata.name, NAME)
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in metadata.inputs],
                         [("x", "FP32", [-1, 512])])
        http = requests.get(f"{self.server.url}/v2/models/{NAME}", timeout=30).json()
        self.assertEqual([t.name for t in metadata.outputs], [t["name"] for t in http["outputs"]])

    def test_raw_answer_equals_the_http_answer(self):
        rows = self.rows(3)
        reply = self.client.ModelInfer(raw_request(rows), timeout=60)
        self.assertEqual(reply.model_name, NAME)
        self.assertEqual(reply.id, "r1")
        self.assertEqual(reply.outputs[0].datatype, "FP32")
        self.assertEqual(list(reply.outputs[0].shape), [3, 512])
        http = requests.post(self.server.infer_url(), json=body_for(rows), timeout=60)
        self.assertEqual(http.status_code, 200, http.text)
        expected = np.array(http.json()["outputs"][0]["data"], dtype=np.float32).reshape(3, 512)
        np.testing.assert_array_equal(output_rows(reply), expected)

    def test_typed_contents_give_the_raw_answer(self):
        rows = self.rows(2)
        raw = self.client.ModelInfer(raw_request(rows), timeout=60)
        typed = pb.ModelInferRequest(model_name=NAME)
        tensor = typed.inputs.add(name="x", datatype="FP32", shape=[2, 512])
        tensor.contents.fp32_contents.extend(rows.reshape(-1).tolist())
        np.testing.assert_array_equal(output_rows(self.client.ModelInfer(typed, timeout=60)),
                                      output_rows(raw))

    def test_malformed_requests_get_their_status_and_message(self):
        rows = self.rows(2)
        wrong_dtype = raw_request(rows)
        wrong_dtype.inputs[0].datatype = "FP64"
        self.assertEqual(self.refusal(wrong_dtype),
                         (grpc.StatusCode.INVALID_ARGUMENT,
                          "inputs[0] ('x').datatype: expected FP32, found FP64"))
        wrong_shape = raw_request(rows)
        wrong_shape.inputs[0].shape[1] = 256
        self.assertEqual(self.refusal(wrong_shape),
                         (grpc.StatusCode.INVALID_ARGUMENT,
                          "inputs[0] ('x').shape: expected [rows, 512], found [2,256]"))
        too_many_rows = raw_request(self.rows(9))
        code, message = self.refusal(too_many_rows)
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("9 rows is outside [1, 8] (--max-batch)", message)
        long_raw = raw_request(rows)
        long_raw.raw_input_contents[0] += b"\0" * 4
        self.assertEqual(self.refusal(long_raw),
                         (grpc.StatusCode.INVALID_ARGUMENT,
                          "raw_input_contents[0] (inputs[0] ('x')): 4100 bytes, but shape "
                          "[2, 512] of FP32 holds 4096"))
        # Over --max-body-bytes (100000): 50 rows of 2 KiB, refused by gRPC itself.
        code, message = self.refusal(raw_request(np.zeros((50, 512), dtype=np.float32)))
        self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED, message)
        self.assertEqual(self.refusal(raw_request(rows, model="other")),
                         (grpc.StatusCode.NOT_FOUND,
                          f"no model 'other'; this server serves '{NAME}'"))
        # Still serving.
        self.assertEqual(output_rows(self.client.ModelInfer(raw_request(rows), timeout=60)).shape,
                         (2, 512))

    def test_metrics_count_grpc_answers_by_code(self):
        def counts():
            samples = parse_prometheus(requests.get(self.server.url + "/metrics", timeout=30).text)
            return {code: samples.get(("grove_grpc_responses_total", f'code="{code}"'), 0)
                    for code in ("OK", "NOT_FOUND")}

        before = counts()
        self.client.ModelInfer(raw_request(self.rows(1)), timeout=60)
        self.refusal(raw_request(self.rows(1), model="nope"))
        after = counts()
        self.assertEqual(after["OK"] - before["OK"], 1)
        self.assertEqual(after["NOT_FOUND"] - before["NOT_FOUND"], 1)

    def test_invalid_utf8_requests_log_a_bounded_number_of_lines(self):
        # See Note [Protobuf's complaints about requests, counted]
        # (serving/protobuf_log_limit.h): protobuf logged a line per request
        # whose string field is not UTF-8; 300 such requests now log about
        # log2(300) lines, each is refused, and the server keeps answering.
        server = GroveServer("--grpc-port", "0")
        client = Client(server.grpc_target)
        raw = client.channel.unary_unary(SERVICE + "ModelInfer",
                                         request_serializer=lambda payload: payload,
                                         response_deserializer=pb.ModelInferResponse.FromString)
        valid = raw_request(self.rows(1)).SerializeToString()
        name = "mlp16x512".encode()
        invalid = valid.replace(b"\n" + bytes([len(name)]) + name,
                                b"\n" + bytes([len(name) + 2]) + b"\xf2\xbf" + name, 1)
        self.assertNotEqual(invalid, valid)
        for _ in range(300):
            with self.assertRaises(grpc.RpcError) as raised:
                raw(invalid, timeout=60)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.INTERNAL)
        self.assertEqual(output_rows(raw(valid, timeout=60)).shape, (1, 512))
        client.close()
        status, out, err = server.stop()
        self.assertEqual(status, 0, err)
        lines = [line for line in err.splitlines() if "UTF-8" in line]
        self.assertTrue(lines, err[-2000:])
        self.assertLessEqual(len(lines), 10, "\n".join(lines[:20]))
        self.assertIn("[256 such messages so far]", lines[-1])

    def test_sigterm_answers_calls_in_flight(self):
        # Calls wait up to 2 s for company, so they are in flight when SIGTERM comes.
        server = GroveServer("--grpc-port", "0", "--max-batch", "8", "--max-wait-us", "2000000")
        client = Client(server.grpc_target)
        rows = self.rows(3)
        calls = [client.ModelInfer.future(raw_request(rows[i:i + 1]), timeout=60)
                 for i in range(3)]
        deadline = time.monotonic() + 30
        while parse_prometheus(requests.get(server.url + "/metrics", timeout=30).text)[
                ("grove_pending_requests", "")] < 3:
            self.assertLess(time.monotonic(), deadline, "the calls never reached the queue")
            time.sleep(0.01)
        status, out, err = server.stop()
        client.close()
        self.assertEqual(status, 0, err)
        self.assertIn("received SIGTERM: draining", out)
        self.assertIn("grpc: 3 calls answered (3 after the signal)", out)
        for i, call in enumerate(calls):
            self.assertEqual(output_rows(call.result()).shape, (1, 512), i)


if __name__ == "__main__":
    junit_main.main()
