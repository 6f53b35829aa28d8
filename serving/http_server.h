// HttpServer puts a batching Server on the network: the KServe v2 / Open
// Inference Protocol over HTTP/1.1 REST (serving/kserve_routes.h), plus GET
// /metrics in the Prometheus text format (serving/metrics.h), served by an
// event-driven loop over Boost.Asio with Beast's HTTP parser: a few threads
// hold any number of connections (Note [Connections without threads]).
//
//   Server server(model_file_factory("mlp.json"), config);
//   HttpServer http(server, {.model_name = "mlp", .port = 8000});
//   http.serve();  // until stop(), e.g. from a SIGTERM handler thread
//
// Note [Draining on stop]
// stop() makes /v2/health/ready answer 503 and closes the listening socket;
// every request already read is answered, with `Connection: close`, and its
// connection closed; a connection reading a request finishes reading it
// (within its deadlines) and is answered the same way; an idle keep-alive
// connection may still send one request within drain_grace (1 s), so a
// client that sent its next request just as the signal came is answered
// rather than cut off. The batching Server keeps running until serve() has
// returned (a queued request may still wait up to max_wait for company); the
// owner then shuts it down with ShutdownMode::kDrain. serve() returns the
// counts for the exit report. Tests: test_sigterm_drains_and_exits_zero
// (http_server_test.py), test_sigterm_under_keep_alive_load_answers_every_request
// (http_abuse_test.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "serving/http_routes.h"
#include "serving/inference_service.h"
#include "serving/server.h"

namespace grove::serving {

struct HttpConfig {
  std::string model_name;  // the {name} of /v2/models/{name}
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::port())
  // Note [Request limits]; the body limit also bounds the memory one request
  // can take (Note [Reading request data]).
  size_t max_body_bytes = size_t{16} << 20;
  size_t max_header_bytes = size_t{16} << 10;
  size_t max_headers = 64;
  // Note [Connection timeouts].
  int idle_timeout_ms = 5000;
  int header_timeout_ms = 10000;
  int body_timeout_ms = 30000;
  // More open connections than this are answered 503 and closed.
  size_t max_connections = 32768;
  // Threads that read, parse and answer (not one per connection); 0: the
  // machine's cores, at least 2.
  int threads = 0;
  int retry_after_s = 1;  // the Retry-After of a 503 for a full queue
  // Note [Answers handed on by a relay]: answers reach the event loops through
  // a thread of their own rather than from the request reaper's, which
  // delivers them (Note [Answers delivered off the worker]).
  bool answer_relay = true;
  // More Prometheus text for /metrics (the gRPC front's counters), if any.
  std::function<std::string()> more_metrics;
};

// What serve() reports once it returns.
struct HttpServeReport {
  uint64_t responses = 0;             // answers written
  uint64_t responses_after_stop = 0;  // of which after stop(), with Connection: close
  uint64_t timed_out = 0;             // connections closed by a deadline
  uint64_t reads = 0;                 // socket reads of requests (Note [Read sizes])
};

class HttpServer {
 public:
  // Binds host:port (Error naming them when that fails); serve() accepts.
  HttpServer(InferenceService& server, HttpConfig config);
  // Serves `routes` instead of KServe routes over a batching server (the LLM
  // routes, serving/llm/llm_routes.h); `routes` outlives the HttpServer.
  HttpServer(HttpRoutes& routes, HttpConfig config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Accepts and answers requests until stop(); returns once every request
  // read has been answered and every connection closed (Note [Draining on
  // stop]). Throws Error when the listening socket fails before stop().
  HttpServeReport serve();
  // Any thread, any number of times.
  void stop();
  // The /metrics text.
  std::string metrics_text() const;
  // Connections accepted and not yet closed (any thread).
  size_t open_connections() const;

 private:
  struct Impl;
  void listen();
  std::unique_ptr<Impl> impl_;
};

}  // namespace grove::serving
