#include "serving/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "serving/kserve_protocol.h"
#include "serving/metrics.h"

namespace grove::serving {
namespace {

constexpr const char* kJson = "application/json";

void reply(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, kJson);
}

}  // namespace

struct HttpServer::Impl {
  Impl(InferenceService& server, HttpConfig config) : server(server), config(std::move(config)) {}

  void install_routes();
  void infer(const httplib::Request& req, httplib::Response& res);
  bool known_model(const httplib::Request& req, httplib::Response& res) const;
  MetricsInput metrics_input() const;

  InferenceService& server;
  HttpConfig config;
  httplib::Server http;
  int port = 0;
  int listening_socket = -1;  // Note [Listen backlog]
  std::atomic<bool> stopping{false};
  LatencyHistogram request_latency;
  LatencyHistogram queue_wait;
  mutable std::mutex responses_mutex;
  std::map<int, uint64_t> responses;  // status -> count
};

bool HttpServer::Impl::known_model(const httplib::Request& req, httplib::Response& res) const {
  const std::string name = req.matches[1];
  if (name == config.model_name) return true;
  reply(res, 404,
        error_json(str_cat("no model '", name, "'; this server serves '", config.model_name, "'")));
  return false;
}

void HttpServer::Impl::infer(const httplib::Request& req, httplib::Response& res) {
  // Note [HTTP status of a refusal].
  const auto received = std::chrono::steady_clock::now();
  if (!known_model(req, res)) return;
  InferRequest parsed;
  try {
    std::optional<size_t> json_length;
    if (req.has_header("Inference-Header-Content-Length")) {
      const std::string text = req.get_header_value("Inference-Header-Content-Length");
      size_t value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      GROVE_CHECK_AS(ProtocolError, error == std::errc() && end == text.data() + text.size(),
                     "Inference-Header-Content-Length '", text, "' is not a byte count");
      json_length = value;
    }
    parsed = parse_infer_request(req.body, server.signature(), server.max_batch(), json_length);
  } catch (const Error& error) {
    reply(res, 400, error_json(error.what()));
    return;
  }
  std::future<Response> answer;
  try {
    answer = server.submit(std::move(parsed.request));
  } catch (const QueueFullError& error) {
    res.set_header("Retry-After", std::to_string(config.retry_after_s));
    reply(res, 503, error_json(error.what()));
    return;
  } catch (const ServerClosedError& error) {
    reply(res, 503, error_json(error.what()));
    return;
  } catch (const ShapeError& error) {
    reply(res, 400, error_json(error.what()));
    return;
  } catch (const DTypeError& error) {
    reply(res, 400, error_json(error.what()));
    return;
  }
  try {
    Response response = answer.get();
    queue_wait.observe(
        std::chrono::duration<double>(response.timing.dispatched - response.timing.submitted)
            .count());
    size_t json_length = 0;
    std::string body =
        infer_response_json(config.model_name, parsed, server.signature(), response, &json_length);
    if (json_length > 0) {
      res.status = 200;
      res.set_header("Inference-Header-Content-Length", std::to_string(json_length));
      res.set_content(std::move(body), "application/octet-stream");
    } else {
      reply(res, 200, body);
    }
  } catch (const RequestCancelledError& error) {
    reply(res, 503, error_json(error.what()));
    return;
  } catch (const std::exception& error) {
    reply(res, 500, error_json(str_cat("the batch failed: ", error.what())));
    return;
  }
  request_latency.observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - received).count());
}

MetricsInput HttpServer::Impl::metrics_input() const {
  MetricsInput input;
  input.stats = server.stats();
  input.queue_depth = server.queue_size();
  input.max_batch = server.max_batch();
  {
    std::lock_guard<std::mutex> lock(responses_mutex);
    input.http_responses = responses;
  }
  input.request_latency = &request_latency;
  input.queue_wait = &queue_wait;
  input.backend_snapshots = server.backend_snapshots();
  return input;
}

void HttpServer::Impl::install_routes() {
  http.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, R"({"live":true})");
  });
  http.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
    if (stopping) {
      reply(res, 503, R"({"ready":false,"error":"the server is stopping"})");
    } else {
      reply(res, 200, R"({"ready":true})");
    }
  });
  http.Get("/v2", [](const httplib::Request&, httplib::Response& res) {
    reply(res, 200,
          nlohmann::json{{"name", "grove"}, {"extensions", nlohmann::json::array()}}.dump());
  });
  http.Get(R"(/v2/models/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (!known_model(req, res)) return;
    reply(res, 200,
          model_metadata(config.model_name, server.signature(), server.max_batch()).dump());
  });
  http.Get(R"(/v2/models/([^/]+)/ready)",
           [this](const httplib::Request& req, httplib::Response& res) {
             if (!known_model(req, res)) return;
             reply(res, stopping ? 503 : 200,
                   nlohmann::json{{"name", config.model_name}, {"ready", !stopping}}.dump());
           });
  http.Post(R"(/v2/models/([^/]+)/infer)",
            [this](const httplib::Request& req, httplib::Response& res) { infer(req, res); });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(prometheus_text(metrics_input()), "text/plain; version=0.0.4");
  });
  // Refusals httplib makes itself (413 over the body limit, 404 for an
  // unknown path, 400 for a malformed request line) get a JSON body too.
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    if (res.status == 413) {
      message = str_cat("request body over the limit of ", config.max_body_bytes,
                        " bytes (--max-body-bytes)");
    } else if (res.status == 404) {
      message =
          str_cat("no route ", req.method, " ", req.path, "; see /v2/models/", config.model_name);
    } else {
      message = str_cat("HTTP ", res.status);
    }
    res.set_content(error_json(message), kJson);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    std::lock_guard<std::mutex> lock(responses_mutex);
    ++responses[res.status];
  });
}

HttpServer::HttpServer(InferenceService& server, HttpConfig config)
    : impl_(std::make_unique<Impl>(server, std::move(config))) {
  HttpConfig& c = impl_->config;
  GROVE_CHECK_AS(ConfigError, !c.model_name.empty(), "HttpServer: model_name is empty");
  GROVE_CHECK_AS(ConfigError, c.port >= 0 && c.port <= 65535, "HttpServer: port ", c.port,
                 " is outside [0, 65535]");
  GROVE_CHECK_AS(ConfigError, c.max_body_bytes >= 64, "HttpServer: max_body_bytes ",
                 c.max_body_bytes, " is below 64");
  const int threads =
      c.threads > 0 ? c.threads : static_cast<int>(std::max<int64_t>(32, 4 * server.max_batch()));
  impl_->http.new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  impl_->http.set_payload_max_length(c.max_body_bytes);
  impl_->http.set_keep_alive_max_count(1 << 20);
  impl_->http.set_keep_alive_timeout(2);
  // An answer is written in more than one send (headers, body): with Nagle's
  // algorithm the second waits for the client's delayed ACK, about 40 ms per
  // request on Linux (measured on the H200 host: 72 answered/s from 8 clients).
  impl_->http.set_tcp_nodelay(true);
  impl_->install_routes();
  // Note [Listen backlog]
  // cpp-httplib listens with a backlog of 5 (Debian's library is built with
  // CPPHTTPLIB_LISTEN_BACKLOG 5). Clients that connect at once overflow it; a
  // connection whose handshake the kernel dropped is accepted only when its
  // request is retransmitted, and httplib closed it unanswered after the
  // keep-alive timeout: 6 to 53 of 64 connections opened together got no answer
  // (serve_http's clients and a plain socket test alike). listen(2) again on
  // the bound socket raises the backlog to the system's maximum. Test:
  // test_connections_opened_at_once_are_all_answered.
  impl_->http.set_socket_options([impl = impl_.get()](socket_t sock) {
    httplib::default_socket_options(sock);
    impl->listening_socket = sock;  // the last one made is the one bound
  });
  if (c.port == 0) {
    impl_->port = impl_->http.bind_to_any_port(c.host);
  } else {
    impl_->port = impl_->http.bind_to_port(c.host, c.port) ? c.port : -1;
  }
  GROVE_CHECK(impl_->port > 0, "cannot listen on ", c.host, ":", c.port,
              " (in use, or not an address of this machine); choose another --port or --host");
  GROVE_CHECK(impl_->listening_socket >= 0 && ::listen(impl_->listening_socket, SOMAXCONN) == 0,
              "cannot raise the listen backlog of ", c.host, ":", impl_->port, ": ",
              std::strerror(errno));
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->port; }

void HttpServer::serve() {
  const bool clean = impl_->http.listen_after_bind();
  GROVE_CHECK(clean || impl_->stopping, "HttpServer on ", impl_->config.host, ":", impl_->port,
              " stopped accepting connections without stop() (the listening socket failed)");
}

void HttpServer::stop() {
  // Note [Draining on stop].
  impl_->stopping = true;
  impl_->http.stop();
}

std::string HttpServer::metrics_text() const { return prometheus_text(impl_->metrics_input()); }

}  // namespace grove::serving
