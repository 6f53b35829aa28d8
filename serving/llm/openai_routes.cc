#include "serving/llm/openai_routes.h"

#include <chrono>
#include <set>

#include "serving/kserve_protocol.h"
#include "serving/llm/completion_answer.h"
#include "serving/llm/completion_request.h"

namespace grove::serving::llm {
namespace {

// Fields OpenAI defines that grove takes only at their default value.
void refuse_unless_default(const nlohmann::json& request) {
  auto check = [&](const char* key, auto&& is_default, const char* wanted) {
    auto found = request.find(key);
    if (found == request.end() || found->is_null()) return;
    GROVE_CHECK_AS(CompletionError, is_default(*found), key, " ", brief_json(*found),
                   " is not supported; send ", wanted, " or leave it out");
  };
  auto one = [](const nlohmann::json& v) { return v.is_number() && v.get<double>() == 1; };
  auto zero = [](const nlohmann::json& v) { return v.is_number() && v.get<double>() == 0; };
  check("n", one, "1");
  check("best_of", one, "1");
  check(
      "echo", [](const nlohmann::json& v) { return v.is_boolean() && !v.get<bool>(); }, "false");
  check(
      "logprobs", [](const nlohmann::json&) { return false; }, "null");
  check(
      "suffix",
      [](const nlohmann::json& v) { return v.is_string() && v.get<std::string>().empty(); },
      "null");
  check("presence_penalty", zero, "0");
  check("frequency_penalty", zero, "0");
  check(
      "logit_bias", [](const nlohmann::json& v) { return v.is_object() && v.empty(); }, "{}");
}

const std::set<std::string>& known_keys() {
  static const std::set<std::string> keys = {"model",
                                             "prompt",
                                             "max_tokens",
                                             "temperature",
                                             "top_p",
                                             "top_k",
                                             "seed",
                                             "stop",
                                             "ignore_eos",
                                             "stream",
                                             "n",
                                             "best_of",
                                             "echo",
                                             "logprobs",
                                             "suffix",
                                             "presence_penalty",
                                             "frequency_penalty",
                                             "logit_bias",
                                             "user",
                                             "stream_options"};
  return keys;
}

std::vector<int64_t> read_prompt(LlmService& service, const nlohmann::json& prompt) {
  if (prompt.is_string()) return service.encode(prompt.get_ref<const std::string&>());
  GROVE_CHECK_AS(CompletionError, prompt.is_array(),
                 "prompt must be text or a list of token ids, found ", brief_json(prompt));
  if (prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array())) {
    return read_prompt(service, prompt[0]);  // a batch of one
  }
  GROVE_CHECK_AS(
      CompletionError, prompt.empty() || !(prompt[0].is_string() || prompt[0].is_array()),
      "prompt holds ", prompt.size(), " prompts; this server takes one prompt per request");
  return read_token_ids(prompt, "prompt");
}

nlohmann::json usage(const CompletionSummary& summary) {
  return {{"prompt_tokens", summary.prompt_tokens},
          {"completion_tokens", summary.completion_tokens},
          {"total_tokens", summary.prompt_tokens + summary.completion_tokens}};
}

const char* finish_reason(CompletionEnd end) {
  return end == CompletionEnd::kLength ? "length" : "stop";
}

}  // namespace

HttpResponse openai_error(int status, const std::string& message, const std::string& type,
                          const std::string& param) {
  HttpResponse response;
  response.status = status;
  response.body = json_text({{"error",
                              {{"message", message},
                               {"type", type},
                               {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                               {"code", nlohmann::json()}}}});
  return response;
}

HttpResponse openai_models(const std::string& model_name) {
  HttpResponse response;
  response.body = json_text(
      {{"object", "list"},
       {"data",
        {{{"id", model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "grove"}}}}});
  return response;
}

HttpResponse openai_completions(LlmService& service, const std::string& model_name,
                                const std::string& body, uint64_t default_seed, uint64_t serial) {
  try {
    const nlohmann::json request =
        parse_json_object(body, most_body_values(service.limits().max_prompt_tokens));
    for (const auto& [key, value] : request.items()) {
      GROVE_CHECK_AS(CompletionError, known_keys().count(key), "unknown field \"", key, "\"");
    }
    auto model = request.find("model");
    GROVE_CHECK_AS(CompletionError, model != request.end(),
                   "model is missing; this server serves \"", model_name, "\"");
    const std::string asked = read_string(*model, "model");
    if (asked != model_name) {
      return openai_error(400,
                          str_cat("the model \"", asked, "\" does not exist; this server serves \"",
                                  model_name, "\""),
                          "invalid_request_error", "model");
    }
    refuse_unless_default(request);
    auto prompt = request.find("prompt");
    GROVE_CHECK_AS(CompletionError, prompt != request.end() && !prompt->is_null(),
                   "prompt is missing: send text or a list of token ids");
    bool stream = false;
    if (auto found = request.find("stream"); found != request.end() && !found->is_null()) {
      stream = read_bool(*found, "stream");
    }
    if (auto found = request.find("user"); found != request.end() && !found->is_null()) {
      read_string(*found, "user");
    }
    if (auto found = request.find("stream_options"); found != request.end() && !found->is_null()) {
      GROVE_CHECK_AS(CompletionError, found->is_object(), "stream_options must be an object");
    }
    static const nlohmann::json kNull;
    auto lookup = [&](const char* key) -> const nlohmann::json& {
      auto found = request.find(key);
      return found == request.end() ? kNull : *found;
    };
    CompletionRequest completion;
    completion.prompt = read_prompt(service, *prompt);
    read_sampling_fields(lookup, /*default_temperature=*/1, default_seed, completion);

    const std::string id = str_cat("cmpl-", serial);
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    auto chunk = [id, created, model_name](nlohmann::json choice) {
      return nlohmann::json{{"id", id},
                            {"object", "text_completion"},
                            {"created", created},
                            {"model", model_name},
                            {"choices", {std::move(choice)}}};
    };
    CompletionFormat format;
    format.token_event = [chunk](int64_t token, const std::string& text, int64_t) {
      return chunk({{"index", 0},
                    {"text", text},
                    {"token_ids", {token}},
                    {"logprobs", nullptr},
                    {"finish_reason", nullptr}});
    };
    format.end_events = [chunk](const CompletionSummary& summary) {
      std::vector<std::string> events;
      if (summary.end == CompletionEnd::kFailed || summary.end == CompletionEnd::kCancelled) {
        events.push_back(
            json_text({{"error",
                        {{"message", summary.end == CompletionEnd::kFailed
                                         ? "the generation failed: " + summary.error
                                         : std::string("the server stopped the generation")},
                         {"type", "server_error"}}}}));
      } else {
        nlohmann::json last = chunk({{"index", 0},
                                     {"text", summary.text_rest},
                                     {"token_ids", nlohmann::json::array()},
                                     {"logprobs", nullptr},
                                     {"finish_reason", finish_reason(summary.end)}});
        last["usage"] = usage(summary);
        events.push_back(json_text(last));
      }
      events.emplace_back("[DONE]");
      return events;
    };
    format.whole = [chunk](const std::vector<int64_t>& tokens, const std::string& text,
                           const CompletionSummary& summary) {
      if (summary.end == CompletionEnd::kFailed) {
        return openai_error(500, "the generation failed: " + summary.error, "server_error");
      }
      if (summary.end == CompletionEnd::kCancelled) {
        return openai_error(503, "the server stopped the generation", "server_error");
      }
      nlohmann::json answer = chunk({{"index", 0},
                                     {"text", text},
                                     {"token_ids", tokens},
                                     {"logprobs", nullptr},
                                     {"finish_reason", finish_reason(summary.end)}});
      answer["usage"] = usage(summary);
      HttpResponse response;
      response.body = json_text(answer);
      return response;
    };
    return answer_completion(service, std::move(completion), stream, std::move(format));
  } catch (const CompletionUnavailable& error) {
    return openai_error(503, error.what(), "server_error");
  } catch (const CompletionError& error) {
    return openai_error(400, error.what(), "invalid_request_error");
  }
}

}  // namespace grove::serving::llm
