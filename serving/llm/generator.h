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
//
// Note [Decode runs on the device]
// With GeneratorOptions::loop_steps = K > 0, the decode steps run through a
// DecodeLoop per batch bucket (Note [Decode loop on the device]): the step,
// the KV write, sampling and the stop test on the device, tokens streamed
// through mapped host memory. When no request waits for a slot, one step()
// runs up to K steps as one WHILE graph launch (rows that stop on the way
// stop on the device; the launch ends early when every row stopped). While a
// request waits, a launch runs only until the first running request can end
// by its length, so that its slot is free for the waiter then; a single step
// (a request joins or leaves next) replays the per-step graph, as does every
// run where the device refused the WHILE body (Note [Refused WHILE bodies]).
// The device sampler picks the host sampler's tokens (Note [Sampling draws]),
// so tokens are those of loop_steps = 0. Tests:
// Generator.DeviceLoopGivesThePerStepTokens (tests/serving/llm/generator_test.cc).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serving/llm/decode_loop.h"
#include "serving/llm/decoder.h"
#include "serving/llm/kv_slots.h"
#include "serving/llm/sampler.h"

namespace grove::serving::llm {

using RequestId = int64_t;

struct GenerationRequest {
  std::vector<int64_t> prompt;
  int64_t max_new_tokens = 16;
  // Empty: the model's (Note [Every EOS token stops a row]).
  std::vector<int64_t> eos_token_ids;
  bool ignore_eos = false;
  SamplingParams sampling;
};

enum class FinishReason : uint8_t { kRunning, kEos, kLength, kCancelled };
const char* finish_reason_name(FinishReason reason);  // "running", "eos", "length", "cancelled"

struct GenerationResult {
  std::vector<int64_t> tokens;  // generated tokens (the EOS token included when it stopped there)
  FinishReason finish = FinishReason::kRunning;
};

struct GeneratorOptions {
  // Note [Decode runs on the device]: 0 decodes step by step through the
  // Decoder with host sampling; K > 0 runs up to K steps per device launch.
  int64_t loop_steps = 0;
  // Note [Prefills between decode steps]: at most this many waiting requests
  // are prefilled before each decode step; 0: every one a free slot takes.
  int64_t max_prefills_per_step = 0;
  // Note [Chunked prefill]: a prompt longer than this is prefilled this many
  // tokens per prefill call (each counts against max_prefills_per_step), its
  // slot held meanwhile; 0: a whole prompt per call. The decoder should be
  // made with DecoderOptions::chunked_prefill so warm_up records the chunk programs.
  int64_t prefill_chunk = 0;
  // Note [Steps per WHILE iteration]: copies of the step in each decode loop's WHILE body.
  int64_t while_steps_per_iteration = 1;
  // Note [Running requests move to low slots]: before a decode step whose
  // batch bucket the highest slot in use makes larger than the slots in use
  // need, requests in the highest slots move (their cache copied) to the lowest free ones.
  bool compact_slots = false;
};

// Host time of one kind of device call (Note [Where a turn's time goes]).
struct CallTime {
  int64_t calls = 0;
  int64_t steps = 0;  // decode steps those calls ran (decode runs only)
  double seconds = 0;
};

struct GeneratorStats {
  int64_t prefills = 0;
  int64_t prefill_calls = 0;  // prefills and chunks of prefills (Note [Chunked prefill])
  int64_t decode_steps = 0;
  int64_t loop_launches = 0;  // WHILE graph launches (Note [Decode runs on the device])
  int64_t loop_steps = 0;     // decode steps those launches ran
  int64_t generated_tokens = 0;
  int64_t slot_moves = 0;                       // Note [Running requests move to low slots]
  std::map<int64_t, int64_t> steps_per_bucket;  // batch bucket -> decode steps
  std::map<int64_t, int64_t> rows_per_step;     // running rows -> decode steps
  // Note [Where a turn's time goes]: host seconds of the prefill calls by
  // prompt bucket ("prefill 32", "chunk 32") and of the decode runs by batch
  // bucket ("decode 64").
  std::map<std::string, CallTime> call_times;
};

class Generator {
 public:
  explicit Generator(Decoder& decoder, GeneratorOptions options = {});
  ~Generator();
  // With loop_steps > 0: compiles and records every batch bucket's DecodeLoop
  // now (else the first step of each bucket does).
  void warm_up();

  // Queues a request; throws grove::Error when it can never run (empty prompt,
  // prompt + max_new_tokens beyond the cache's positions, bad sampling params).
  RequestId submit(GenerationRequest request);
  // Stops a request (a client that went away): its slot is freed now.
  void cancel(RequestId id);
  // One scheduling step (Note [Continuous batching steps]). Returns the
  // tokens it produced, by request. `on_token` (optional) gets each of them
  // in the same order as soon as it is known: during a device loop, as each
  // step's tokens arrive (Note [Decode runs on the device]). It may cancel
  // (and forget) the request it is given.
  using TokenCallback = std::function<void(RequestId, int64_t)>;
  std::vector<std::pair<RequestId, int64_t>> step(const TokenCallback& on_token = {});
  // Drops a finished request's result, so a long-running server's results do
  // not pile up; throws grove::Error while it still runs.
  void forget(RequestId id);
  // Submits, steps until the request is done, and returns its tokens.
  std::vector<int64_t> generate(GenerationRequest request);

  bool idle() const { return waiting_.empty() && prefilling_.empty() && running_.empty(); }
  bool done(RequestId id) const;
  const GenerationResult& result(RequestId id) const;
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  // Requests that have no token yet: queued, or holding a slot while their
  // prompt is prefilled chunk by chunk.
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size() + prefilling_.size()); }
  int64_t slots_in_use() const { return slots_.taken(); }
  const GeneratorStats& stats() const { return stats_; }

 private:
  struct Active {
    GenerationRequest request;
    int64_t slot = -1;
    int64_t position = 0;  // where the last token goes in the next decode step
  };
  // A request whose prompt is being prefilled into its slot (Note [Chunked prefill]).
  struct Prefilling {
    RequestId id = -1;
    GenerationRequest request;
    int64_t slot = -1;
    int64_t done = 0;  // prompt tokens already in the cache
  };
  void admit();
  // Runs the next prefill call of prefilling_.front(); true when it finished the prompt.
  bool prefill_next_chunk();
  void retire_finished();
  void compact_slots();
  void decode_host_sampled();
  void flush();  // hands produced_[delivered_..] to the step's on_token
  void decode_on_device();
  DecodeLoop& loop_for(int64_t bucket);
  void append(RequestId id, Active& active, int64_t token);

  Decoder& decoder_;
  GeneratorOptions options_;
  KvSlots slots_;
  std::map<int64_t, std::unique_ptr<DecodeLoop>> loops_;  // by batch bucket
  RequestId next_id_ = 0;
  std::deque<std::pair<RequestId, GenerationRequest>> waiting_;
  std::deque<Prefilling> prefilling_;
  std::map<RequestId, Active> running_;
  std::map<RequestId, GenerationResult> results_;
  GeneratorStats stats_;
  std::vector<std::pair<RequestId, int64_t>> produced_;
  size_t delivered_ = 0;
  const TokenCallback* on_token_ = nullptr;
};

}  // namespace grove::serving::llm
