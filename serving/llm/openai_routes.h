// OpenAI-compatible POST /v1/completions (and GET /v1/models) for an LLM.
//
//   {"model": "m", "prompt": "Once upon", "max_tokens": 8, "temperature": 0, "stream": false}
//   -> {"id": "cmpl-1", "object": "text_completion", "created": 1764150000, "model": "m",
//       "choices": [{"index": 0, "text": " a time", "token_ids": [...], "logprobs": null,
//                    "finish_reason": "length"}],
//       "usage": {"prompt_tokens": 3, "completion_tokens": 8, "total_tokens": 11}}
//
// prompt is text (needs a tokenizer; BOS first when it has one), a list of
// token ids, or a list holding one of those. max_tokens (default 16),
// temperature (default 1, as OpenAI's), top_p, top_k (an extension), seed,
// stop, ignore_eos (an extension). n, best_of, echo, logprobs, suffix,
// presence_penalty, frequency_penalty and logit_bias are refused unless they
// ask for the default; user is ignored. finish_reason is "stop" (EOS or a
// stop string) or "length". A stream sends one chunk per token (choices[0]
// with text and token_ids), a last one with finish_reason and usage, then
// "data: [DONE]". A refusal is 400 with {"error": {"message", "type":
// "invalid_request_error", "param", "code"}}.
#pragma once

#include <cstdint>
#include <string>

#include "serving/http_message.h"
#include "serving/llm/llm_service.h"

namespace grove::serving::llm {

// Every refusal (400, 503) answered in OpenAI's error shape.
HttpResponse openai_completions(LlmService& service, const std::string& model_name,
                                const std::string& body, uint64_t default_seed, uint64_t serial);

// GET /v1/models: the one model served.
HttpResponse openai_models(const std::string& model_name);

// An error body in OpenAI's shape.
HttpResponse openai_error(int status, const std::string& message, const std::string& type,
                          const std::string& param = "");

}  // namespace grove::serving::llm
