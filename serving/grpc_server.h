// GrpcServer puts a batching server on the network through gRPC: the KServe
// v2 / Open Inference Protocol's GRPCInferenceService (ServerLive,
// ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer;
// serving/kserve_v2_grpc.proto), beside the HTTP front (serving/http_server.h)
// and sharing its InferenceService, checks and limits. Built on Debian's gRPC
// C++ library with its callback API: no thread waits for a batch.
//
//   GrpcServer grpc(server, {.model_name = "mlp", .port = 8001});
//   std::thread serving([&] { report = grpc.serve(); });
//   ... grpc.stop();  // e.g. from a SIGTERM handler thread
//
// Note [gRPC status of a refusal]
// As Note [HTTP status of a refusal], in gRPC's codes, each with a message
// naming the field: a request the protocol or the model's signature refuses
// (datatype, shape, contents, unknown input or output) is INVALID_ARGUMENT;
// a model name or version grove does not serve is NOT_FOUND; a message over
// max_message_bytes is RESOURCE_EXHAUSTED (refused by gRPC before grove reads
// it); a full queue or a stopping server is UNAVAILABLE; a batch that failed
// on the device is INTERNAL. Tests: GrpcServer.* (tests/serving/grpc_server_test.cc),
// tests/serving/grpc_client_test.py.
//
// Note [Draining gRPC on stop]
// stop() makes ServerReady and ModelReady answer false and ends serve(),
// which shuts gRPC down: no new call is accepted (clients get UNAVAILABLE),
// every call already received is answered (the batching server must keep
// running until serve() returns), then serve() returns the counts. Calls
// still unanswered after drain_timeout_ms are cancelled. Test:
// test_sigterm_answers_calls_in_flight (tests/serving/grpc_client_test.py).
//
// Note [gRPC connection deadlines]
// As the HTTP front's (Note [Connection timeouts]): a connection that has
// not completed gRPC's handshake (the HTTP/2 preface and settings) within
// handshake_timeout_ms is closed, so clients that trickle bytes or send none
// hold a connection for a bounded time, and a connection with no call for
// idle_timeout_ms is closed with a GOAWAY, which gRPC clients follow by
// reconnecting at their next call. An open gRPC connection costs about 19 KiB
// (5,000 connections past the handshake: +92 MiB). Test:
// GrpcServer.ConnectionsThatNeverHandshakeAreClosed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "serving/inference_service.h"

namespace grove::serving {

struct GrpcConfig {
  std::string model_name;
  std::string host = "127.0.0.1";
  int port = 8001;  // 0: any free port (see GrpcServer::port())
  // A larger request message is refused (RESOURCE_EXHAUSTED): grove serve
  // passes --max-body-bytes, the HTTP front's body limit.
  size_t max_message_bytes = size_t{16} << 20;
  // Note [gRPC connection deadlines]: grove serve passes the HTTP front's
  // --header-timeout-ms and --idle-timeout-ms.
  int handshake_timeout_ms = 10000;
  int idle_timeout_ms = 5000;
  // Threads that turn finished batches into answers (each Finish writes its
  // answer to the socket on the calling thread) for calls on the callback API,
  // or all calls with GROVE_GRPC_ANSWER_POOL=1 (a call received on a completion
  // queue is otherwise answered by its queue's thread: Note [gRPC answers on
  // their completion queue], grpc_server.cc); 0: a quarter of the cores, at least 2.
  int answer_threads = 0;
  int drain_timeout_ms = 30000;
  // ModelInfer through this many completion queues of gRPC's async API, a
  // thread each (Note [gRPC infer on completion queues], grpc_server.cc); 0:
  // the callback API, as every other RPC; -1: GROVE_GRPC_COMPLETION_QUEUES,
  // else a quarter of the cores (2 to 16).
  int completion_queues = -1;
};

// What serve() reports once it returns.
struct GrpcServeReport {
  uint64_t answers = 0;             // calls answered, with any status
  uint64_t answers_after_stop = 0;  // of which after stop()
};

class GrpcServer {
 public:
  // Binds host:port and starts serving (Error naming them when that fails).
  GrpcServer(InferenceService& service, GrpcConfig config);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const;
  // Returns once stop() was called and every call received was answered
  // (Note [Draining gRPC on stop]).
  GrpcServeReport serve();
  // Any thread, any number of times.
  void stop();
  // grove_grpc_responses_total{code} and grove_grpc_request_latency_seconds,
  // in the Prometheus text format, for the HTTP front's /metrics.
  std::string metrics_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace grove::serving
