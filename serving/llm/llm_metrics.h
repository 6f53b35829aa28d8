// What GET /metrics answers for an LLM server, in the Prometheus text format
// (serving/metrics.h): grove_llm_time_to_first_token_seconds and
// grove_llm_inter_token_latency_seconds (histograms), grove_llm_generated_tokens_total
// (its rate is tokens/s), grove_llm_prompt_tokens_total, grove_llm_requests_running
// and grove_llm_requests_waiting, grove_llm_kv_slots_used and grove_llm_kv_slots,
// grove_llm_decode_batch_rows (histogram of running rows per decode step),
// grove_llm_decode_steps_total, grove_llm_prefills_total,
// grove_llm_requests_total{end} (eos, length, stop, cancelled, failed) and
// grove_http_responses_total{code}.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "serving/llm/llm_service.h"

namespace grove::serving::llm {

std::string llm_metrics_text(const LlmService& service,
                             const std::map<int, uint64_t>& http_responses);

}  // namespace grove::serving::llm
