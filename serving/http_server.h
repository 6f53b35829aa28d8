// HttpServer puts a batching Server on the network: the KServe v2 / Open
// Inference Protocol over HTTP/REST (serving/kserve_protocol.h), served by
// cpp-httplib, plus GET /metrics in the Prometheus text format
// (serving/metrics.h).
//
//   Server server(model_file_factory("mlp.json"), config);
//   HttpServer http(server, {.model_name = "mlp", .port = 8000});
//   http.serve();  // until stop(), e.g. from a SIGTERM handler thread
//
// Routes: GET /v2/health/live, /v2/health/ready, /v2, /v2/models/{name},
// /v2/models/{name}/ready, /metrics; POST /v2/models/{name}/infer.
//
// Note [HTTP status of a refusal]
// Every refusal has a JSON body {"error": message} naming what was wrong: a
// body the protocol or the model's signature refuses (field, datatype, shape,
// values) is 400; a body over max_body_bytes is 413 (refused from its
// Content-Length, before it is read); an unknown model name is 404; a full
// queue (QueueFullError, nothing queued) is 503 with Retry-After; a server
// that is stopping is 503; a batch that failed on the device is 500. Tests:
// the HTTP cases of tests/serving/http_server_test.py.
//
// Note [Draining on stop]
// stop() first makes /v2/health/ready answer 503, then stops accepting
// connections; every request whose body was read is still answered, since
// its handler waits for its future and the batching Server keeps running
// until serve() has returned (a queued request may still wait up to
// max_wait for company). The owner then shuts the Server down with
// ShutdownMode::kDrain. Test: test_sigterm_drains_and_exits_zero.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "serving/inference_service.h"
#include "serving/server.h"

namespace grove::serving {

struct HttpConfig {
  std::string model_name;  // the {name} of /v2/models/{name}
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::port())
  // A JSON body's data is read into values of 16 bytes each, up to about
  // twice the body's size, so the limit also bounds the memory one request
  // can take (Note [Reading request data]).
  size_t max_body_bytes = size_t{16} << 20;
  // Connections served at once (each holds a thread while its request waits
  // for its batch); 0: max(32, 4 * max_batch).
  int threads = 0;
  int retry_after_s = 1;  // the Retry-After of a 503 for a full queue
};

class HttpServer {
 public:
  // Binds host:port (Error naming them when that fails); serve() accepts.
  HttpServer(InferenceService& server, HttpConfig config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Accepts and answers requests until stop(); returns once every accepted
  // request has been answered (Note [Draining on stop]). Throws Error when
  // the listening socket fails before stop().
  void serve();
  // Any thread, any number of times.
  void stop();
  // The /metrics text.
  std::string metrics_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace grove::serving
