// Reading a completion request's JSON body (KServe generate, OpenAI
// completions) into a CompletionRequest, with a message that names the field
// for anything of the wrong type or out of range (CompletionError, a 400).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serving/llm/llm_service.h"

namespace grove::serving::llm {

// Note [Bounded request bodies]
// A completion body is parsed with a callback that refuses, as a 400, a body
// nesting deeper than kMaxRequestDepth (deeper text would crash the parser
// or the message's own dump by recursion) or holding more than `max_values`
// JSON values (keys, values, containers: a prompt of token ids is at most the
// largest prompt bucket, so a larger array is refused after max_values
// values instead of becoming a tree of millions of nodes). Text that is not
// JSON (invalid UTF-8 included) is refused with the parser's reason and the
// byte it stopped at, never the client's bytes. Tests:
// test_hostile_bodies_get_a_400_and_the_server_goes_on (llm_http_test.py),
// CompletionRequest.* (tests/serving/llm/completion_request_test.cc).
//
// The body as a JSON object, or CompletionError.
nlohmann::json parse_json_object(const std::string& body, size_t max_values);
// The most JSON values of a body whose prompt may hold `max_prompt_tokens`
// token ids: those, plus room for every other field.
size_t most_body_values(int64_t max_prompt_tokens);

// Sampling and stop fields shared by both APIs, looked up by `lookup` (a
// field's value, or null when absent): max_tokens, temperature, top_p, top_k
// (-1 or 0: none), seed, stop (a string or a list of strings), ignore_eos.
// `default_temperature` and `default_seed` apply when those are absent.
template <typename Lookup>
void read_sampling_fields(const Lookup& lookup, double default_temperature, uint64_t default_seed,
                          CompletionRequest& request);

// Each field is one of these readers; `name` names it in the message.
int64_t read_integer(const nlohmann::json& value, const std::string& name);
double read_number(const nlohmann::json& value, const std::string& name);
bool read_bool(const nlohmann::json& value, const std::string& name);
// read_string's answer is `value`'s own text (no copy of a long prompt).
const std::string& read_string(const nlohmann::json& value, const std::string& name);
std::vector<std::string> read_stop(const nlohmann::json& value, const std::string& name);
// A KServe request id (echoed in every event of a stream): a string of at
// most kMostIdBytes bytes.
inline constexpr size_t kMostIdBytes = 256;
std::string read_request_id(const nlohmann::json& value);
// A list of token ids (integers >= 0).
std::vector<int64_t> read_token_ids(const nlohmann::json& value, const std::string& name);

// `value` as JSON text cut to 80 characters, for a message.
std::string brief_json(const nlohmann::json& value);

template <typename Lookup>
void read_sampling_fields(const Lookup& lookup, double default_temperature, uint64_t default_seed,
                          CompletionRequest& request) {
  if (const nlohmann::json& v = lookup("max_tokens"); !v.is_null()) {
    request.max_tokens = read_integer(v, "max_tokens");
  }
  request.sampling.temperature = default_temperature;
  if (const nlohmann::json& v = lookup("temperature"); !v.is_null()) {
    request.sampling.temperature = read_number(v, "temperature");
  }
  if (const nlohmann::json& v = lookup("top_p"); !v.is_null()) {
    request.sampling.top_p = read_number(v, "top_p");
  }
  if (const nlohmann::json& v = lookup("top_k"); !v.is_null()) {
    const int64_t top_k = read_integer(v, "top_k");
    GROVE_CHECK_AS(CompletionError, top_k >= -1, "top_k ", top_k,
                   " must be -1 or 0 (every token) or a positive count");
    request.sampling.top_k = top_k < 0 ? 0 : top_k;
  }
  request.sampling.seed = default_seed;
  if (const nlohmann::json& v = lookup("seed"); !v.is_null()) {
    const int64_t seed = read_integer(v, "seed");
    GROVE_CHECK_AS(CompletionError, seed >= 0, "seed ", seed, " must be >= 0");
    request.sampling.seed = static_cast<uint64_t>(seed);
  }
  if (const nlohmann::json& v = lookup("stop"); !v.is_null()) request.stop = read_stop(v, "stop");
  if (const nlohmann::json& v = lookup("ignore_eos"); !v.is_null()) {
    request.ignore_eos = read_bool(v, "ignore_eos");
  }
}

}  // namespace grove::serving::llm
