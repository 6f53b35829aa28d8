// Generator turns a Decoder into a continuously batching text generator:
// requests wait in FIFO order for a KV slot, join the running batch between
// decode steps (their prompt is prefilled and gives their first token), and
// leave it when they stop (EOS or max tokens) or are cancelled, freeing their
// slot for the next waiting request.
//
//   Generator generator(decoder);
//   RequestId id = generator.submit({.prompt = {1, 2, 3}, .max_new_tokens = 16});
//   while (!generator.idle()) generator.step();
//   generator.result(id).tokens;
//
// Note [Continuous batching steps]
// step() does, in order: admit waiting requests into free slots (one prefill
// each, which also samples the request's first token), retire requests that
// are already done, then one decode step over every running request, each row
// feeding its last token at its next position in its own slot, and retire
// again. A decode step runs the batch bucket covering the highest slot in use
// (rows of free slots are padding). Tokens depend only on each request's
// prompt, sampling params and seed (Note [Sampling draws]), so a request gets
// the same tokens alone or in any batch. Tests: Generator.* in
// tests/serving/llm/generator_test.cc.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "serving/llm/decoder.h"
#include "serving/llm/kv_slots.h"
#include "serving/llm/sampler.h"

namespace grove::serving::llm {

using RequestId = int64_t;

struct GenerationRequest {
  std::vector<int64_t> prompt;
  int64_t max_new_tokens = 16;
  std::optional<int64_t> eos_token_id;  // unset: the model config's eos_token_id, if any
  bool ignore_eos = false;
  SamplingParams sampling;
};

enum class FinishReason : uint8_t { kRunning, kEos, kLength, kCancelled };
const char* finish_reason_name(FinishReason reason);  // "running", "eos", "length", "cancelled"

struct GenerationResult {
  std::vector<int64_t> tokens;  // generated tokens (the EOS token included when it stopped there)
  FinishReason finish = FinishReason::kRunning;
};

struct GeneratorStats {
  int64_t prefills = 0;
  int64_t decode_steps = 0;
  int64_t generated_tokens = 0;
  std::map<int64_t, int64_t> steps_per_bucket;  // batch bucket -> decode steps
  std::map<int64_t, int64_t> rows_per_step;     // running rows -> decode steps
};

class Generator {
 public:
  explicit Generator(Decoder& decoder);

  // Queues a request; throws grove::Error when it can never run (empty prompt,
  // prompt + max_new_tokens beyond the cache's positions, bad sampling params).
  RequestId submit(GenerationRequest request);
  // Stops a request (a client that went away): its slot is freed now.
  void cancel(RequestId id);
  // One scheduling step (Note [Continuous batching steps]). Returns the
  // tokens it produced, by request.
  std::vector<std::pair<RequestId, int64_t>> step();
  // Drops a finished request's result, so a long-running server's results do
  // not pile up; throws grove::Error while it still runs.
  void forget(RequestId id);
  // Submits, steps until the request is done, and returns its tokens.
  std::vector<int64_t> generate(GenerationRequest request);

  bool idle() const { return waiting_.empty() && running_.empty(); }
  bool done(RequestId id) const;
  const GenerationResult& result(RequestId id) const;
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t slots_in_use() const { return slots_.taken(); }
  const GeneratorStats& stats() const { return stats_; }

 private:
  struct Active {
    GenerationRequest request;
    int64_t slot = -1;
    int64_t position = 0;  // where the last token goes in the next decode step
  };
  void admit();
  void retire_finished();
  void append(RequestId id, Active& active, int64_t token);

  Decoder& decoder_;
  KvSlots slots_;
  RequestId next_id_ = 0;
  std::deque<std::pair<RequestId, GenerationRequest>> waiting_;
  std::map<RequestId, Active> running_;
  std::map<RequestId, GenerationResult> results_;
  GeneratorStats stats_;
  std::vector<std::pair<RequestId, int64_t>> produced_;
};

}  // namespace grove::serving::llm
