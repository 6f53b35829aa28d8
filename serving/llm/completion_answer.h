// A completion answered over HTTP: LlmService's events for one request turned
// into an HttpStream, either as server-sent events (one per token, then the
// format's closing events) or as one JSON answer once the request ends. The
// API (KServe generate, OpenAI completions) supplies the JSON of each.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serving/http_message.h"
#include "serving/llm/llm_service.h"

namespace grove::serving::llm {

struct CompletionFormat {
  // A streamed event's JSON for the index-th generated token.
  std::function<nlohmann::json(int64_t token, const std::string& text, int64_t index)> token_event;
  // The streamed events after the last token ("data: " payloads; text_rest is the held-back text).
  std::function<std::vector<std::string>(const CompletionSummary& summary)> end_events;
  // The whole answer of a request that was not streamed.
  std::function<HttpResponse(const std::vector<int64_t>& tokens, const std::string& text,
                             const CompletionSummary& summary)>
      whole;
};

// Submits `request` and returns the answer to write: 200 with an HttpStream
// (Note [Streamed answers]) whose client going away cancels the request.
// Throws CompletionError or CompletionUnavailable with nothing queued.
HttpResponse answer_completion(LlmService& service, CompletionRequest request, bool stream,
                               CompletionFormat format);

// One server-sent event: "data: PAYLOAD\n\n".
std::string sse_event(const std::string& payload);

}  // namespace grove::serving::llm
