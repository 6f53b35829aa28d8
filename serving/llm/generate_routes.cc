#include "serving/llm/generate_routes.h"

#include <set>

#include "serving/kserve_protocol.h"
#include "serving/llm/completion_answer.h"
#include "serving/llm/completion_request.h"

namespace grove::serving::llm {
namespace {

const std::set<std::string>& sampling_keys() {
  static const std::set<std::string> keys = {"max_tokens", "temperature", "top_p",      "top_k",
                                             "seed",       "stop",        "ignore_eos", "stream"};
  return keys;
}

nlohmann::json usage(const CompletionSummary& summary) {
  return {{"prompt_tokens", summary.prompt_tokens},
          {"completion_tokens", summary.completion_tokens}};
}

}  // namespace

HttpResponse kserve_generate(LlmService& service, const std::string& model_name,
                             const std::string& body, bool stream, uint64_t default_seed) {
  const nlohmann::json request =
      parse_json_object(body, most_body_values(service.limits().max_prompt_tokens));
  static const nlohmann::json kNull;
  const nlohmann::json* parameters = &kNull;
  for (const auto& [key, value] : request.items()) {
    GROVE_CHECK_AS(CompletionError,
                   key == "text_input" || key == "input_ids" || key == "parameters" ||
                       key == "id" || sampling_keys().count(key),
                   "unknown field \"", key,
                   "\"; generate takes text_input or input_ids, parameters, id, max_tokens, "
                   "temperature, top_p, top_k, seed, stop, ignore_eos");
  }
  if (auto found = request.find("parameters"); found != request.end()) {
    GROVE_CHECK_AS(CompletionError, found->is_object(), "parameters must be an object, found ",
                   brief_json(*found));
    for (const auto& [key, value] : found->items()) {
      GROVE_CHECK_AS(CompletionError, sampling_keys().count(key), "unknown parameter \"", key,
                     "\"; parameters are max_tokens, temperature, top_p, top_k, seed, stop, "
                     "ignore_eos");
    }
    parameters = &*found;
  }
  auto lookup = [&](const char* key) -> const nlohmann::json& {
    if (auto found = request.find(key); found != request.end()) return *found;
    if (parameters->is_object()) {
      if (auto found = parameters->find(key); found != parameters->end()) return *found;
    }
    return kNull;
  };
  if (const nlohmann::json& flag = lookup("stream"); !flag.is_null()) {
    GROVE_CHECK_AS(CompletionError, read_bool(flag, "stream") == stream, "stream ", flag.dump(),
                   " contradicts the route: use ",
                   stream ? "/generate for one answer" : "/generate_stream to stream");
  }
  const bool has_text = request.contains("text_input");
  const bool has_ids = request.contains("input_ids");
  GROVE_CHECK_AS(CompletionError, has_text != has_ids,
                 has_text
                     ? "send text_input or input_ids, not both"
                     : "the prompt is missing: send text_input (text) or input_ids (token ids)");
  CompletionRequest completion;
  completion.prompt = has_text ? service.encode(read_string(request["text_input"], "text_input"))
                               : read_token_ids(request["input_ids"], "input_ids");
  read_sampling_fields(lookup, /*default_temperature=*/0, default_seed, completion);

  nlohmann::json id;
  if (auto found = request.find("id"); found != request.end() && !found->is_null()) {
    id = read_request_id(*found);
  }
  const bool with_text = service.tokenizer() != nullptr;
  auto head = [model_name, id] {
    nlohmann::json event = {{"model_name", model_name}};
    if (!id.is_null()) event["id"] = id;
    return event;
  };
  CompletionFormat format;
  format.token_event = [head, with_text](int64_t token, const std::string& text, int64_t index) {
    nlohmann::json event = head();
    if (with_text) event["text_output"] = text;
    event["output_ids"] = {token};
    event["index"] = index;
    return event;
  };
  format.end_events = [head, with_text](const CompletionSummary& summary) {
    nlohmann::json event = head();
    if (summary.end == CompletionEnd::kFailed || summary.end == CompletionEnd::kCancelled) {
      event["error"] = summary.end == CompletionEnd::kFailed
                           ? "the generation failed: " + summary.error
                           : std::string("the server stopped the generation");
    } else {
      if (with_text) event["text_output"] = summary.text_rest;
      event["output_ids"] = nlohmann::json::array();
      event["finish_reason"] = completion_end_name(summary.end);
    }
    event["usage"] = usage(summary);
    return std::vector<std::string>{json_text(event)};
  };
  format.whole = [head, with_text](const std::vector<int64_t>& tokens, const std::string& text,
                                   const CompletionSummary& summary) {
    if (summary.end == CompletionEnd::kFailed) {
      return error_response(500, "the generation failed: " + summary.error);
    }
    if (summary.end == CompletionEnd::kCancelled) {
      return error_response(503, "the server stopped the generation");
    }
    nlohmann::json answer = head();
    if (with_text) answer["text_output"] = text;
    answer["output_ids"] = tokens;
    answer["finish_reason"] = completion_end_name(summary.end);
    answer["usage"] = usage(summary);
    HttpResponse response;
    response.body = json_text(answer);
    return response;
  };
  return answer_completion(service, std::move(completion), stream, std::move(format));
}

}  // namespace grove::serving::llm
