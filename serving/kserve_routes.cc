#include "serving/kserve_routes.h"

#include <charconv>
#include <chrono>
#include <optional>

#include "serving/errors.h"
#include "serving/server_stats.h"

namespace grove::serving {
KserveRoutes::KserveRoutes(InferenceService& service, std::string model_name, int retry_after_s,
                           std::function<std::string()> more_metrics)
    : service_(service),
      model_name_(std::move(model_name)),
      retry_after_s_(retry_after_s),
      more_metrics_(std::move(more_metrics)) {}

std::variant<HttpResponse, std::unique_ptr<KserveRoutes::Queued>> KserveRoutes::handle(
    HttpRequest& request, std::function<void()> on_ready) {
  try {
    return route(request, std::move(on_ready));
  } catch (const std::exception& error) {
    return error_response(500, str_cat("internal error: ", error.what()));
  }
}

std::variant<HttpResponse, std::unique_ptr<KserveRoutes::Queued>> KserveRoutes::route(
    HttpRequest& request, std::function<void()> on_ready) {
  const std::string& path = request.path;
  const bool get = request.method == "GET";
  if (get && path == "/v2/health/live") return json_response(200, R"({"live":true})");
  if (get && path == "/v2/health/ready") {
    return stopping_ ? json_response(503, R"({"ready":false,"error":"the server is stopping"})")
                     : json_response(200, R"({"ready":true})");
  }
  if (get && path == "/v2") {
    return json_response(200, R"({"name":"grove","extensions":[]})");
  }
  if (get && path == "/metrics") {
    // Ranges are not served (Accept-Ranges: none): a Range field is ignored,
    // so an answer is never larger than the whole text (Note [Request limits]).
    HttpResponse response = json_response(200, metrics_text());
    response.content_type = "text/plain; version=0.0.4";
    return response;
  }
  std::optional<std::string> name;
  bool is_infer = false;
  bool is_ready = false;
  if ((name = model_in_path(path, "/infer"))) {
    is_infer = true;
  } else if ((name = model_in_path(path, "/ready"))) {
    is_ready = true;
  } else {
    name = model_in_path(path, "");
  }
  const bool known_method = is_infer ? request.method == "POST" : get;
  if (!name || !known_method) {
    return error_response(
        404, str_cat("no route ", request.method, " ", path, "; see /v2/models/", model_name_));
  }
  if (*name != model_name_) {
    return error_response(
        404, str_cat("no model '", *name, "'; this server serves '", model_name_, "'"));
  }
  if (is_infer) return infer(request, std::move(on_ready));
  if (is_ready) {
    return json_response(stopping_ ? 503 : 200,
                         json_text({{"name", model_name_}, {"ready", !stopping_.load()}}));
  }
  return json_response(
      200, json_text(model_metadata(model_name_, service_.signature(), service_.max_batch())));
}

// Note [An OnAnswer without an allocation]
// std::function keeps a callable in place only when it is trivially copyable
// and at most 16 bytes; an OnAnswer holding the Queued and the connection's
// on_ready (a std::function) took an allocation on the front's thread and a
// free of it on the reaper's, per request. So the Queued holds on_ready and
// the OnAnswer only the Queued's address, kept in place. on_ready only posts
// the answer to the connection's loop, which may then free the Queued (and
// on_ready with it) while on_ready returns: it reads nothing it captured
// after the post. GROVE_SERVING_CONTENDED=1 captures on_ready in the OnAnswer
// as before (the A/B of session 23). Tests: KserveRoutes.*, every HTTP test
// (tests/serving/http_server_test.py, http_abuse_test.py).
std::variant<HttpResponse, std::unique_ptr<KserveRoutes::Queued>> KserveRoutes::infer(
    HttpRequest& request, std::function<void()> on_ready) {
  // Note [HTTP status of a refusal].
  auto queued = std::make_unique<Queued>();
  queued->received = Clock::now();
  try {
    std::optional<size_t> json_length;
    if (request.inference_header_length) {
      const std::string& text = *request.inference_header_length;
      size_t value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      GROVE_CHECK_AS(ProtocolError, error == std::errc() && end == text.data() + text.size(),
                     "Inference-Header-Content-Length '", text, "' is not a byte count");
      json_length = value;
    }
    queued->parsed =
        parse_infer_request(request.body, service_.signature(), service_.max_batch(), json_length);
  } catch (const Error& error) {
    return error_response(400, error.what());
  }
  std::string().swap(request.body);  // the rows hold the values now
  try {
    // Note [Answers without a future]: the Queued outlives the call (see handle()).
    Queued* waiting = queued.get();
    OnAnswer on_answer;
    if (!serving_contended_as_before()) {
      // Note [An OnAnswer without an allocation].
      waiting->on_ready = std::move(on_ready);
      on_answer = [waiting](RequestAnswer answer) {
        waiting->answer = std::move(answer);
        if (waiting->on_ready) waiting->on_ready();  // touches no capture once it has posted
      };
    } else {
      on_answer = [waiting, on_ready = std::move(on_ready)](RequestAnswer answer) {
        waiting->answer = std::move(answer);
        if (on_ready) on_ready();
      };
    }
    service_.submit_then_answer(std::move(queued->parsed.request), std::move(on_answer));
  } catch (const QueueFullError& error) {
    HttpResponse response = error_response(503, error.what());
    response.headers.emplace_back("Retry-After", std::to_string(retry_after_s_));
    return response;
  } catch (const ServerClosedError& error) {
    return error_response(503, error.what());
  } catch (const ShapeError& error) {
    return error_response(400, error.what());
  } catch (const DTypeError& error) {
    return error_response(400, error.what());
  }
  return queued;
}

HttpResponse KserveRoutes::finish(Queued& queued) {
  HttpResponse response;
  try {
    if (queued.answer.error) std::rethrow_exception(queued.answer.error);
    GROVE_CHECK(queued.answer.response.has_value(),
                "KserveRoutes::finish: the request has no answer yet; call it after on_ready");
    const Response& answer = *queued.answer.response;
    queue_wait_.observe(
        std::chrono::duration<double>(answer.timing.dispatched - answer.timing.submitted).count());
    size_t json_length = 0;
    response.body =
        infer_response_json(model_name_, queued.parsed, service_.signature(), answer, &json_length);
    if (json_length > 0) {
      response.headers.emplace_back("Inference-Header-Content-Length", std::to_string(json_length));
      response.content_type = "application/octet-stream";
    }
  } catch (const RequestCancelledError& error) {
    return error_response(503, error.what());
  } catch (const std::exception& error) {
    return error_response(500, str_cat("the batch failed: ", error.what()));
  }
  request_latency_.observe(std::chrono::duration<double>(Clock::now() - queued.received).count());
  return response;
}

HttpRoutes::Answer KserveRoutes::respond(HttpRequest& request, std::function<void()> on_ready) {
  auto result = handle(request, std::move(on_ready));
  if (auto* response = std::get_if<HttpResponse>(&result)) return std::move(*response);
  return std::unique_ptr<Pending>(std::move(std::get<std::unique_ptr<Queued>>(result)));
}

HttpResponse KserveRoutes::complete(Pending& pending) {
  return finish(static_cast<Queued&>(pending));
}

void KserveRoutes::count_response(int status) {
  const size_t index = status >= 100 && status < 600 ? static_cast<size_t>(status) : 0;
  responses_[this_thread_shard()].by_status[index].fetch_add(1, std::memory_order_relaxed);
}

MetricsInput KserveRoutes::metrics_input() const {
  MetricsInput input;
  input.stats = service_.stats();
  input.queue_depth = service_.queue_size();
  input.max_batch = service_.max_batch();
  for (size_t status = 0; status < responses_.front().by_status.size(); ++status) {
    uint64_t count = 0;
    for (const ResponseCounts& shard : responses_) {
      count += shard.by_status[status].load(std::memory_order_relaxed);
    }
    if (count > 0) input.http_responses[static_cast<int>(status)] = count;
  }
  input.request_latency = &request_latency_;
  input.queue_wait = &queue_wait_;
  input.backend_snapshots = service_.backend_snapshots();
  return input;
}

std::string KserveRoutes::metrics_text() const {
  std::string text = prometheus_text(metrics_input());
  if (more_metrics_) text += more_metrics_();
  return text;
}

}  // namespace grove::serving
