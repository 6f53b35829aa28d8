// HttpRoutes is what grove's HTTP front (serving/http_connection.h) asks of
// the thing that answers requests: KserveRoutes for a batching Server, the
// LLM routes (serving/llm/llm_routes.h) for a Generator. Apart from sockets.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "serving/http_message.h"

namespace grove::serving {

class HttpRoutes {
 public:
  // A request whose answer is not ready yet (KserveRoutes::Queued).
  struct Pending {
    virtual ~Pending() = default;
  };
  using Answer = std::variant<HttpResponse, std::unique_ptr<Pending>>;

  virtual ~HttpRoutes() = default;
  // The answer to `request` (which may carry an HttpStream, Note [Streamed
  // answers]), or a Pending one: then `on_ready` is called once complete()
  // can answer without waiting. Never throws for anything a client sends.
  virtual Answer respond(HttpRequest& request, std::function<void()> on_ready) = 0;
  virtual HttpResponse complete(Pending& pending) = 0;
  // From now on the readiness routes answer 503.
  virtual void set_stopping() = 0;
  // Counts a response written (grove_http_responses_total{code}).
  virtual void count_response(int status) = 0;
  // The /metrics text.
  virtual std::string metrics_text() const = 0;
};

}  // namespace grove::serving
