// KServe v2's generate extension for an LLM: POST /v2/models/{name}/generate
// answers one JSON object, /generate_stream the same as server-sent events.
//
//   {"text_input": "Once upon", "parameters": {"max_tokens": 8, "temperature": 0}}
//   {"input_ids": [1, 412, 9], "max_tokens": 8, "seed": 7, "stop": ["\n"]}
//   -> {"model_name": "m", "text_output": " a time", "output_ids": [...],
//       "finish_reason": "length", "usage": {"prompt_tokens": 3, "completion_tokens": 8}}
//
// The prompt is text_input (needs a tokenizer; BOS is put first when the
// tokenizer has one) or input_ids; the sampling fields (max_tokens default 16,
// temperature default 0: greedy, top_p, top_k, seed, stop, ignore_eos) may
// stand at the top level or in "parameters". A stream sends one event per
// token, {"text_output": new text, "output_ids": [token], "index": i}, then
// one with "finish_reason" and "usage" (or {"error": ...}). An "id" (a string
// of at most kMostIdBytes) is echoed in the answer and in every event.
#pragma once

#include <cstdint>
#include <string>

#include "serving/http_message.h"
#include "serving/llm/llm_service.h"

namespace grove::serving::llm {

// Throws CompletionError (400) or CompletionUnavailable (503) with nothing queued.
HttpResponse kserve_generate(LlmService& service, const std::string& model_name,
                             const std::string& body, bool stream, uint64_t default_seed);

}  // namespace grove::serving::llm
