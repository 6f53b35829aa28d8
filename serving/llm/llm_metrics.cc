#include "serving/llm/llm_metrics.h"

#include <algorithm>

#include "runtime/error.h"
#include "serving/metrics.h"

namespace grove::serving::llm {
namespace {

void one(std::string& out, const std::string& name, const char* type, const std::string& help,
         double value) {
  prometheus_family(out, name, type, help);
  prometheus_sample(out, name, "", value);
}

// Running rows per decode step, in power-of-two buckets up to the slot count.
void batch_rows(std::string& out, const LlmStats& stats) {
  const std::string name = "grove_llm_decode_batch_rows";
  prometheus_family(out, name, "histogram", "Running requests (rows) in each decode step.");
  uint64_t cumulative = 0;
  double sum = 0;
  auto rows = stats.rows_per_step.begin();
  const int64_t most = std::max<int64_t>(stats.slots, 1);
  for (int64_t bound = 1;; bound *= 2) {
    bound = std::min(bound, most);
    for (; rows != stats.rows_per_step.end() && rows->first <= bound; ++rows) {
      cumulative += static_cast<uint64_t>(rows->second);
      sum += static_cast<double>(rows->first * rows->second);
    }
    prometheus_sample(out, name + "_bucket", str_cat("le=\"", bound, "\""),
                      static_cast<double>(cumulative));
    if (bound >= most) break;
  }
  for (; rows != stats.rows_per_step.end(); ++rows) {
    cumulative += static_cast<uint64_t>(rows->second);
    sum += static_cast<double>(rows->first * rows->second);
  }
  prometheus_sample(out, name + "_bucket", "le=\"+Inf\"", static_cast<double>(cumulative));
  prometheus_sample(out, name + "_sum", "", sum);
  prometheus_sample(out, name + "_count", "", static_cast<double>(cumulative));
}

}  // namespace

std::string llm_metrics_text(const LlmService& service,
                             const std::map<int, uint64_t>& http_responses) {
  const LlmStats stats = service.stats();
  std::string out;
  service.time_to_first_token().write(
      out, "grove_llm_time_to_first_token_seconds",
      "Time from a completion's request to its first generated token.");
  service.inter_token_latency().write(out, "grove_llm_inter_token_latency_seconds",
                                      "Time between a completion's consecutive tokens.");
  one(out, "grove_llm_generated_tokens_total", "counter", "Tokens generated (rate: tokens/s).",
      static_cast<double>(stats.generated_tokens));
  one(out, "grove_llm_prompt_tokens_total", "counter", "Prompt tokens prefilled.",
      static_cast<double>(stats.prompt_tokens));
  one(out, "grove_llm_requests_running", "gauge", "Completions holding a KV-cache slot.",
      static_cast<double>(stats.running));
  one(out, "grove_llm_requests_waiting", "gauge", "Completions waiting for a KV-cache slot.",
      static_cast<double>(stats.waiting));
  one(out, "grove_llm_kv_slots_used", "gauge", "KV-cache slots in use.",
      static_cast<double>(stats.slots_used));
  one(out, "grove_llm_kv_slots", "gauge", "KV-cache slots (the largest decode batch bucket).",
      static_cast<double>(stats.slots));
  batch_rows(out, stats);
  one(out, "grove_llm_decode_steps_total", "counter", "Decode steps run.",
      static_cast<double>(stats.decode_steps));
  one(out, "grove_llm_decode_loop_launches_total", "counter",
      "WHILE graph launches of several decode steps (Note [Decode runs on the device]).",
      static_cast<double>(stats.loop_launches));
  one(out, "grove_llm_decode_loop_steps_total", "counter", "Decode steps run by those launches.",
      static_cast<double>(stats.loop_steps));
  one(out, "grove_llm_prefills_total", "counter", "Prompts prefilled.",
      static_cast<double>(stats.prefills));
  prometheus_family(out, "grove_llm_requests_total", "counter",
                    "Completions ended, by how they ended.");
  for (const char* end : {"eos", "length", "stop", "cancelled", "failed"}) {
    auto found = stats.ended.find(end);
    prometheus_sample(out, "grove_llm_requests_total", str_cat("end=\"", end, "\""),
                      found == stats.ended.end() ? 0.0 : static_cast<double>(found->second));
  }
  prometheus_family(out, "grove_http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto& [code, count] : http_responses) {
    prometheus_sample(out, "grove_http_responses_total", str_cat("code=\"", code, "\""),
                      static_cast<double>(count));
  }
  return out;
}

}  // namespace grove::serving::llm
