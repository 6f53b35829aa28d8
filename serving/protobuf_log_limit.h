// Bounds what protobuf's own log writes for messages a client controls
// (Note [Protobuf's complaints about requests, counted]).
#pragma once

namespace grove::serving {

// Note [Protobuf's complaints about requests, counted]
// libprotobuf logs an ERROR line to stderr for some malformed requests it
// refuses (a string field of invalid UTF-8, in any gRPC request), one line per
// request: a client sending them fills the server's log without bound, and a
// server whose stderr is a pipe nobody drains blocked in that write with the
// pipe full, its gRPC front answering nothing more (found by fuzzing
// ModelInfer: 618 lines in 130,000 requests). Once installed (the gRPC front
// installs it), each of protobuf's log sites (file and line) prints its 1st,
// 2nd, 4th, 8th, ... message through grove's log, with how many there were so
// far: a flood of n requests costs log2(n) lines. The refusal each client gets
// is unchanged (gRPC's INTERNAL "Unable to parse request"). Test:
// GrpcClientTest.test_invalid_utf8_requests_log_a_bounded_number_of_lines
// (tests/serving/grpc_client_test.py).
void limit_protobuf_log();

}  // namespace grove::serving
