"""A mutation fuzzer for `grove serve --grpc-port` (sim, loopback): ModelInfer
requests made wrong at the message level (shapes, datatypes, contents sizes,
names, inputs and outputs added or dropped) and at the byte level (a valid
message with bytes changed, inserted or deleted), for FUZZ_SECONDS. Every
call must end with a status a malformed request deserves (OK, INVALID_ARGUMENT,
NOT_FOUND, or INTERNAL "Unable to parse request" from gRPC's own parser)
within its deadline, the server must stay up and answer a valid request after
every batch of them, and its stderr must stay short (Note [Protobuf's
complaints about requests, counted], serving/protobuf_log_limit.h: a line per
request once filled an undrained stderr pipe and the server stopped
answering). The seed is printed; a failure names it and the request.
"""
import os
import random
import time
import unittest

import grpc
import numpy as np

import junit_main
from byte_mutations import mutated
from serve_process import NAME, GroveServer
from serving import kserve_v2_grpc_pb2 as pb

FUZZ_SECONDS = float(os.environ.get("GROVE_GRPC_FUZZ_SECONDS", "15"))
METHOD = "/inference.GRPCInferenceService/ModelInfer"
ALLOWED = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.INTERNAL}
MOST_STDERR_LINES = 40


def valid_request():
    request = pb.ModelInferRequest(model_name=NAME, id="fuzz")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 512])
    request.raw_input_contents.append(np.full(512, 0.25, "<f4").tobytes())
    return request


def wrong_message(rng):
    request = valid_request()
    tensor = request.inputs[0]
    choice = rng.randrange(10)
    if choice == 0:
        tensor.shape[:] = [rng.choice([-1, 0, 1, 3, 2 ** 40]), rng.choice([512, 0, 511, -2])]
    elif choice == 1:
        tensor.datatype = rng.choice(["FP16", "INT8", "BYTES", "", "FP64", "BOOL"])
    elif choice == 2:
        request.raw_input_contents[0] = request.raw_input_contents[0][:rng.randrange(0, 2048)]
    elif choice == 3:
        request.raw_input_contents.append(b"x" * rng.randrange(0, 100))
    elif choice == 4:
        del request.raw_input_contents[:]
        tensor.contents.fp32_contents.extend([1.0] * rng.choice([0, 1, 512, 513]))
    elif choice == 5:
        request.model_name = rng.choice(["", "nope", NAME * 100])
    elif choice == 6:
        request.inputs.add(name="x", datatype="FP32", shape=[1, 512])
    elif choice == 7:
        del request.inputs[:]
    elif choice == 8:
        request.outputs.add(name=rng.choice(["y", "nope", ""]))
    else:
        tensor.name = rng.choice(["", "y", "x" * 5000])
    return request.SerializeToString()


class GrpcFuzzTest(unittest.TestCase):
    def test_malformed_requests_get_statuses_and_the_server_keeps_answering(self):
        seed = int(time.time()) % 100000
        print("grpc fuzz seed %d" % seed)
        rng = random.Random(seed)
        server = GroveServer("--grpc-port", "0")
        channel = grpc.insecure_channel(server.grpc_target)
        call = channel.unary_unary(METHOD, request_serializer=lambda payload: payload,
                                   response_deserializer=lambda payload: payload)
        valid = valid_request().SerializeToString()
        counts = {}
        start = time.monotonic()
        try:
            while time.monotonic() - start < FUZZ_SECONDS:
                for _ in range(50):
                    payload = wrong_message(rng) if rng.random() < 0.6 else \
                        mutated(rng, valid)
                    try:
                        call(payload, timeout=30)
                        code = grpc.StatusCode.OK
                    except grpc.RpcError as error:
                        code = error.code()
                        self.assertIn(code, ALLOWED, "seed %d: %s for %r: %s" % (
                            seed, code, payload[:200], error.details()))
                    counts[code.name] = counts.get(code.name, 0) + 1
                self.assertIsNone(server.process.poll(), "seed %d: the server ended" % seed)
                self.assertGreater(len(call(valid, timeout=30)), 0, "seed %d" % seed)
        finally:
            channel.close()
            status, out, err = server.stop()
        print("grpc fuzz: %s" % counts)
        self.assertEqual(status, 0, err[-2000:])
        self.assertLessEqual(len(err.splitlines()), MOST_STDERR_LINES, err[-3000:])


if __name__ == "__main__":
    junit_main.main()
