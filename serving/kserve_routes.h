// KserveRoutes answers grove's HTTP routes for an InferenceService, apart
// from any socket (serving/http_connection.h reads and writes the bytes):
// GET /v2/health/live, /v2/health/ready, /v2, /v2/models/{name},
// /v2/models/{name}/ready, /metrics; POST /v2/models/{name}/infer.
//
//   KserveRoutes routes(server, "mlp", 1);
//   auto answer = routes.handle(request, on_ready);  // a response, or a queued infer
//   ... on_ready() ...  ->  HttpResponse response = routes.finish(*queued);
//
// Note [HTTP status of a refusal]
// Every refusal has a JSON body {"error": message} naming what was wrong
// (Note [Refusals are valid JSON]): a body the protocol or the model's
// signature refuses (field, datatype, shape, values) is 400; a body over
// max_body_bytes is 413 and a header over its limits 431 (Note [Request
// limits]); an unknown model name or path is 404; a full queue
// (QueueFullError, nothing queued) is 503 with Retry-After; a server that is
// stopping is 503; a batch that failed on the device is 500. Tests:
// KserveRoutes.* (tests/serving/kserve_routes_test.cc), the HTTP cases of
// tests/serving/http_server_test.py and http_abuse_test.py.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <variant>

#include "serving/http_message.h"
#include "serving/http_routes.h"
#include "serving/inference_service.h"
#include "serving/kserve_protocol.h"
#include "serving/metrics.h"
#include "serving/sharded_counter.h"

namespace grove::serving {

class KserveRoutes : public HttpRoutes {
 public:
  // `more_metrics`: Prometheus text appended to /metrics (another front's counters).
  KserveRoutes(InferenceService& service, std::string model_name, int retry_after_s,
               std::function<std::string()> more_metrics = {});

  // An infer request in the batching queue.
  struct Queued : HttpRoutes::Pending {
    InferRequest parsed;  // its rows moved into the queue; id and outputs kept
    // Set on the thread that delivers answers, before on_ready is called
    // (Note [Answers without a future]).
    RequestAnswer answer;
    Clock::time_point received;
    // Called once `answer` is set; held here, not by the OnAnswer (Note [An
    // OnAnswer without an allocation], kserve_routes.cc).
    std::function<void()> on_ready;
  };
  // The answer to `request`, or its queued infer: then `on_ready` is called
  // (on a worker's thread; it must only hand the work on) once finish() can
  // answer without waiting, and the Queued must live until then. Never
  // throws for anything a client sends. The request's body is released once
  // parsed.
  std::variant<HttpResponse, std::unique_ptr<Queued>> handle(HttpRequest& request,
                                                             std::function<void()> on_ready);
  HttpResponse finish(Queued& queued);
  // HttpRoutes: handle() and finish().
  Answer respond(HttpRequest& request, std::function<void()> on_ready) override;
  HttpResponse complete(Pending& pending) override;

  // From now on /v2/health/ready and /v2/models/{name}/ready answer 503.
  void set_stopping() override { stopping_ = true; }
  // Counts a response written (grove_http_responses_total{code}).
  void count_response(int status) override;
  std::string metrics_text() const override;

 private:
  std::variant<HttpResponse, std::unique_ptr<Queued>> route(HttpRequest& request,
                                                            std::function<void()> on_ready);
  std::variant<HttpResponse, std::unique_ptr<Queued>> infer(HttpRequest& request,
                                                            std::function<void()> on_ready);
  MetricsInput metrics_input() const;

  InferenceService& service_;
  const std::string model_name_;
  const int retry_after_s_;
  const std::function<std::string()> more_metrics_;
  std::atomic<bool> stopping_{false};
  LatencyHistogram request_latency_;
  LatencyHistogram queue_wait_;
  // By status (100-599; any other at 0): counted by every front thread
  // without a lock (relaxed atomics), read by /metrics.
  // By status (100-599; 0: any other), per thread (Note [Counters per thread]).
  struct alignas(64) ResponseCounts {
    std::array<std::atomic<uint64_t>, 600> by_status{};
  };
  std::array<ResponseCounts, kCounterShards> responses_{};
};

}  // namespace grove::serving
