#include "serving/llm/llm_routes.h"

#include "serving/kserve_protocol.h"
#include "serving/llm/generate_routes.h"
#include "serving/llm/llm_metrics.h"
#include "serving/llm/openai_routes.h"

namespace grove::serving::llm {
LlmRoutes::LlmRoutes(LlmService& service, std::string model_name, uint64_t seed)
    : service_(service), model_name_(std::move(model_name)), next_seed_(seed) {}

HttpRoutes::Answer LlmRoutes::respond(HttpRequest& request, std::function<void()>) {
  try {
    return route(request);
  } catch (const CompletionUnavailable& error) {
    HttpResponse response = error_response(503, error.what());
    response.headers.emplace_back("Retry-After", "1");
    return response;
  } catch (const CompletionError& error) {
    return error_response(400, error.what());
  } catch (const std::exception& error) {
    return error_response(500, str_cat("internal error: ", error.what()));
  }
}

HttpResponse LlmRoutes::complete(Pending&) {
  return error_response(500, "internal error: the LLM routes hold no pending answer");
}

HttpResponse LlmRoutes::route(HttpRequest& request) {
  const std::string& path = request.path;
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  if (get && path == "/v2/health/live") return json_response(200, R"({"live":true})");
  if (get && path == "/v2/health/ready") {
    return stopping_ ? json_response(503, R"({"ready":false,"error":"the server is stopping"})")
                     : json_response(200, R"({"ready":true})");
  }
  if (get && path == "/v2") {
    return json_response(200, R"({"name":"grove","extensions":["generate"]})");
  }
  if (get && path == "/metrics") {
    HttpResponse response = json_response(200, metrics_text());
    response.content_type = "text/plain; version=0.0.4";
    return response;
  }
  if (get && path == "/v1/models") return openai_models(model_name_);
  if (path == "/v1/completions") {
    if (!post) return openai_error(405, "use POST /v1/completions", "invalid_request_error");
    if (stopping_) return openai_error(503, "the server is stopping", "server_error");
    const uint64_t seed = next_seed_.fetch_add(1);
    return openai_completions(service_, model_name_, request.body, seed, serial_.fetch_add(1));
  }
  std::optional<std::string> name;
  enum class Kind { kMetadata, kReady, kGenerate, kStream } kind = Kind::kMetadata;
  if ((name = model_in_path(path, "/generate_stream"))) {
    kind = Kind::kStream;
  } else if ((name = model_in_path(path, "/generate"))) {
    kind = Kind::kGenerate;
  } else if ((name = model_in_path(path, "/ready"))) {
    kind = Kind::kReady;
  } else {
    name = model_in_path(path, "");
  }
  const bool generating = kind == Kind::kGenerate || kind == Kind::kStream;
  if (!name || (generating ? !post : !get)) {
    return error_response(404, str_cat("no route ", request.method, " ", path, "; see /v2/models/",
                                       model_name_, "/generate and /v1/completions"));
  }
  if (*name != model_name_) {
    return error_response(
        404, str_cat("no model '", *name, "'; this server serves '", model_name_, "'"));
  }
  if (kind == Kind::kReady) {
    return json_response(stopping_ ? 503 : 200,
                         json_text({{"name", model_name_}, {"ready", !stopping_.load()}}));
  }
  if (kind == Kind::kMetadata) return model_metadata();
  if (stopping_) return error_response(503, "the server is stopping");
  return kserve_generate(service_, model_name_, request.body, kind == Kind::kStream,
                         next_seed_.fetch_add(1));
}

HttpResponse LlmRoutes::model_metadata() const {
  const DecoderConfig& config = service_.model_config();
  const CompletionLimits& limits = service_.limits();
  nlohmann::json inputs = {{{"name", "input_ids"}, {"datatype", "INT64"}, {"shape", {-1}}}};
  nlohmann::json outputs = {{{"name", "output_ids"}, {"datatype", "INT64"}, {"shape", {-1}}}};
  if (service_.tokenizer() != nullptr) {
    inputs.push_back({{"name", "text_input"}, {"datatype", "BYTES"}, {"shape", {1}}});
    outputs.push_back({{"name", "text_output"}, {"datatype", "BYTES"}, {"shape", {1}}});
  }
  return json_response(
      200, json_text({{"name", model_name_},
                      {"platform", str_cat("grove-llm-", architecture_name(config.architecture))},
                      {"versions", {"1"}},
                      {"inputs", inputs},
                      {"outputs", outputs},
                      {"parameters",
                       {{"vocab_size", config.vocab_size},
                        {"max_prompt_tokens", limits.max_prompt_tokens},
                        {"max_prompt_bytes", limits.max_prompt_bytes},
                        {"max_tokens", limits.max_new_tokens},
                        {"max_positions", limits.positions},
                        {"tokenizer", service_.tokenizer() != nullptr}}}}));
}

void LlmRoutes::count_response(int status) {
  std::lock_guard<std::mutex> lock(responses_mutex_);
  ++responses_[status];
}

std::string LlmRoutes::metrics_text() const {
  std::map<int, uint64_t> responses;
  {
    std::lock_guard<std::mutex> lock(responses_mutex_);
    responses = responses_;
  }
  return llm_metrics_text(service_, responses);
}

}  // namespace grove::serving::llm
