// LlmService puts a Generator on a thread of its own for many clients: any
// thread submits a completion (with the callbacks its tokens go to) or cancels
// one; the service's thread admits them between decode steps, steps the
// Generator while anything runs, turns tokens into text (TextStream) and
// keeps the counters /metrics reports.
//
//   LlmService service(*decoder, tokenizer.get(), {});
//   auto ticket = service.submit(request, {.on_token = ..., .on_end = ...});
//   service.cancel(ticket);  // the client went away: its slot is free after this step
//
// Note [Completions on the service thread]
// The Generator is touched only by the service's thread. submit() checks the
// request against the limits at once (CompletionError, a 400: nothing was
// queued) and puts it in an inbox; cancel() puts its ticket in another. Each
// turn of the thread takes both inboxes (new requests first, so a request
// cancelled at once is still known), cancels, then runs one Generator step
// and hands each token to its request's on_token, in order; a stop string
// cancels the request in the same turn. A request ends exactly once, with
// on_end, after which its callbacks are dropped. So a cancelled request's
// slot is free before the next decode step, and a request's tokens are the
// Generator's (Note [Continuous batching steps]). The thread runs the decoder
// in the graph trees of the thread that made the service (Note [Trees of
// another thread]), which warmed the decoder up: the graphs recorded then
// replay, and none records while serving; that thread must not call the
// decoder while the service runs. Tests: LlmService.* (tests/serving/llm/llm_service_test.cc).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cudagraph_trees/backend/thread_trees.h"
#include "runtime/error.h"
#include "serving/llm/generator.h"
#include "serving/llm/text_stream.h"
#include "serving/llm/tokenizer.h"
#include "serving/metrics.h"

namespace grove::serving::llm {

// A completion the service refuses as asked (prompt too long, max_tokens over
// the limit, ...): nothing was queued. The HTTP routes answer 400.
class CompletionError : public Error {
 public:
  using Error::Error;
};

// The service takes no completion now (more wait than it queues, or it is
// stopping): the routes answer 503.
class CompletionUnavailable : public Error {
 public:
  using Error::Error;
};

struct CompletionRequest {
  std::vector<int64_t> prompt;
  int64_t max_tokens = 16;
  SamplingParams sampling;
  bool ignore_eos = false;
  std::vector<std::string> stop;  // stop strings (Note [Stop strings over detokenized text])
};

enum class CompletionEnd : uint8_t { kEos, kLength, kStop, kCancelled, kFailed };
const char* completion_end_name(CompletionEnd end);  // "eos", "length", "stop", ...

struct CompletionSummary {
  CompletionEnd end = CompletionEnd::kLength;
  // Text held back until the end (Note [Stop strings over detokenized text]).
  std::string text_rest;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::string error;  // kFailed
};

// Called on the service's thread; they must not block.
struct CompletionEvents {
  std::function<void(int64_t token, const std::string& text)> on_token;
  std::function<void(const CompletionSummary& summary)> on_end;
};

struct LlmServiceConfig {
  int64_t max_new_tokens = 0;  // the most max_tokens a request may ask; 0: the cache's positions
  size_t max_waiting = 1024;   // queued requests beyond the running ones
  // Note [Decode runs on the device]: up to this many decode steps per device
  // launch (a WHILE graph) while no request joins or leaves; 0: step by step
  // with host sampling. Tokens are the same either way.
  int64_t decode_loop_steps = 8;
  // Note [Prefills between decode steps]: at most this many new requests are
  // prefilled before each decode step; 0: all that free slots take.
  int64_t max_prefills_per_step = 0;
  // Note [Chunked prefill]: prompts are prefilled this many tokens per call
  // (each call counts against max_prefills_per_step); 0: whole prompts.
  int64_t prefill_chunk = 0;
  // Note [Steps per WHILE iteration]: copies of the step per WHILE iteration.
  int64_t while_steps_per_iteration = 1;
  // Note [Running requests move to low slots]: off by default (no gain measured).
  bool compact_slots = false;
};

// Note [Text prompts are bounded before tokenizing]
// A text prompt longer than kMostTextBytesPerToken bytes for each token of
// the largest prompt bucket is refused (a 400) before the tokenizer sees it:
// it could only fit if its tokens averaged more than 64 bytes (a LLaMA piece
// is at most 16 characters), and tokenizing the 15 MiB of text a body may
// carry took 26 s of an HTTP thread and 1.2 GB (this machine's CPU, the
// tests' tokenizer). Test: test_hostile_bodies_get_a_400_and_the_server_goes_on
// (llm_http_test.py).
inline constexpr int64_t kMostTextBytesPerToken = 64;

// What a request may ask for, from the decoder's buckets and cache.
struct CompletionLimits {
  int64_t max_prompt_tokens = 0;  // the largest prompt bucket, at most the positions
  int64_t max_prompt_bytes = 0;   // of a text prompt: max_prompt_tokens * kMostTextBytesPerToken
  int64_t max_new_tokens = 0;
  int64_t positions = 0;  // prompt + max_tokens - 1 must fit
  int64_t vocab_size = 0;
};

struct LlmStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t slots_used = 0;
  int64_t slots = 0;
  int64_t prefills = 0;
  int64_t decode_steps = 0;
  int64_t loop_launches = 0;  // WHILE graph launches, each of several decode steps
  int64_t loop_steps = 0;
  int64_t generated_tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t slot_moves = 0;                      // Note [Running requests move to low slots]
  std::map<int64_t, int64_t> rows_per_step;    // running rows -> decode steps
  std::map<std::string, int64_t> ended;        // completion_end_name -> requests
  std::map<std::string, CallTime> call_times;  // Note [Where a turn's time goes]
};

class LlmService {
 public:
  using Ticket = uint64_t;
  // `decoder` (warmed up on this thread) and `tokenizer` (may be null: token
  // ids only) outlive the service.
  LlmService(Decoder& decoder, const Tokenizer* tokenizer, LlmServiceConfig config);
  ~LlmService();
  LlmService(const LlmService&) = delete;
  LlmService& operator=(const LlmService&) = delete;

  // Throws CompletionError (a bad request) or CompletionUnavailable (full, stopping).
  Ticket submit(CompletionRequest request, CompletionEvents events);
  // Any thread; a ticket that ended (or never was) is ignored.
  void cancel(Ticket ticket);
  // Cancels what runs or waits and stops the thread.
  void shutdown();

  // BOS (when the tokenizer has one) and the pieces of `text`; CompletionError
  // without a tokenizer.
  std::vector<int64_t> encode(const std::string& text) const;
  const Tokenizer* tokenizer() const { return tokenizer_; }
  const CompletionLimits& limits() const { return limits_; }
  const DecoderConfig& model_config() const { return decoder_.config(); }
  LlmStats stats() const;
  const LatencyHistogram& time_to_first_token() const { return time_to_first_token_; }
  const LatencyHistogram& inter_token_latency() const { return inter_token_latency_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Submitted {
    Ticket ticket;
    CompletionRequest request;
    CompletionEvents events;
    Clock::time_point received;
  };
  struct Tracked {
    Ticket ticket;
    CompletionEvents events;
    std::optional<TextStream> text;
    int64_t prompt_tokens = 0;
    int64_t tokens = 0;
    Clock::time_point received;
    Clock::time_point last_token;
  };
  void check(const CompletionRequest& request) const;
  void run();
  void admit(Submitted submitted);
  void deliver(RequestId id, int64_t token);
  void cancel_during_step();
  void end_cancelled(const std::vector<Ticket>& tickets);
  void end(RequestId id, CompletionSummary summary);
  void publish_stats();

  Decoder& decoder_;
  const Tokenizer* tokenizer_;
  const LlmServiceConfig config_;
  CompletionLimits limits_;
  Generator generator_;  // the service thread's only (Note [Completions on the service thread])
  std::map<RequestId, Tracked> tracked_;
  std::map<Ticket, RequestId> by_ticket_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Submitted> inbox_;
  std::vector<Ticket> cancels_;
  Ticket next_ticket_ = 1;
  bool stopping_ = false;

  mutable std::mutex stats_mutex_;
  LlmStats stats_;
  int64_t prompt_tokens_ = 0;
  std::map<std::string, int64_t> ended_;
  LatencyHistogram time_to_first_token_;
  LatencyHistogram inter_token_latency_;
  cudagraph_trees::backend::SharedTrees trees_;  // the making thread's
  std::thread thread_;
};

}  // namespace grove::serving::llm
