// LlmRoutes answers grove's HTTP front for a language model (grove serve
// MODEL_DIR), through an LlmService:
//   GET  /v2/health/live, /v2/health/ready, /v2, /v2/models/{name},
//        /v2/models/{name}/ready, /metrics (serving/llm/llm_metrics.h), /v1/models
//   POST /v2/models/{name}/generate, /v2/models/{name}/generate_stream
//        (serving/llm/generate_routes.h), /v1/completions (serving/llm/openai_routes.h)
// A refusal is 400 with a JSON body naming what was wrong (text that is not
// JSON, a body nesting too deep or holding too many values: Note [Bounded
// request bodies]; a bad field type, an empty prompt, a prompt over the
// largest prompt bucket or its text over max_prompt_bytes, max_tokens over the
// limit, a prompt and max_tokens beyond the cache's positions, an unknown
// model in an OpenAI body); an unknown path or model in the path is 404; a
// full queue or a stopping server is 503.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "serving/http_routes.h"
#include "serving/llm/llm_service.h"

namespace grove::serving::llm {

class LlmRoutes : public HttpRoutes {
 public:
  // `seed` starts the seeds of requests that name none.
  LlmRoutes(LlmService& service, std::string model_name, uint64_t seed);

  Answer respond(HttpRequest& request, std::function<void()> on_ready) override;
  HttpResponse complete(Pending& pending) override;  // nothing is ever pending
  void set_stopping() override { stopping_ = true; }
  void count_response(int status) override;
  std::string metrics_text() const override;

 private:
  HttpResponse route(HttpRequest& request);
  HttpResponse model_metadata() const;

  LlmService& service_;
  const std::string model_name_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> next_seed_;
  std::atomic<uint64_t> serial_{1};
  mutable std::mutex responses_mutex_;
  std::map<int, uint64_t> responses_;
};

}  // namespace grove::serving::llm
