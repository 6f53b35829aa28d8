#include "serving/llm/generator.h"

#include <algorithm>
#include <chrono>
#include <span>

#include "runtime/error.h"

namespace grove::serving::llm {

namespace {

using Clock = std::chrono::steady_clock;

// Note [Where a turn's time goes]
// A serving turn is host-driven: each prefill call returns its logits to the
// host (it synchronizes), and a decode run returns when its last step's
// tokens arrived, so the host time around each call is the device time it
// took plus the host's own share (uploads, launch, the read-back). The
// Generator adds it up per kind of call (GeneratorStats::call_times), which
// tells an open-loop load's wall time apart: prefill calls against decode
// steps of each batch bucket. Test: Generator.CallTimesCountEveryCall
// (tests/serving/llm/generator_test.cc).
void add_call_time(std::map<std::string, CallTime>& times, const std::string& key,
                   Clock::time_point start, int64_t steps) {
  CallTime& time = times[key];
  ++time.calls;
  time.steps += steps;
  time.seconds += std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kRunning:
      return "running";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "?";
}

Generator::Generator(Decoder& decoder, GeneratorOptions options)
    : decoder_(decoder), options_(options), slots_(decoder.state().cache().slots) {
  GROVE_CHECK(options_.loop_steps >= 0, "Generator loop_steps ", options_.loop_steps,
              " must be >= 0 (0: step by step)");
  // DecodeLoop records graphs: a device without them (cpu) steps through the Decoder.
  if (!decoder.state().device().supports_graphs()) options_.loop_steps = 0;
}

Generator::~Generator() = default;

void Generator::warm_up() {
  if (options_.loop_steps == 0) return;
  for (int64_t bucket : decoder_.batch_buckets()) loop_for(bucket).warm_up();
}

DecodeLoop& Generator::loop_for(int64_t bucket) {
  std::unique_ptr<DecodeLoop>& loop = loops_[bucket];
  if (!loop) {
    loop = std::make_unique<DecodeLoop>(
        decoder_, DecodeLoopOptions{.bucket = bucket,
                                    .max_steps = options_.loop_steps,
                                    .steps_per_iteration = options_.while_steps_per_iteration});
  }
  return *loop;
}

RequestId Generator::submit(GenerationRequest request) {
  const int64_t length = static_cast<int64_t>(request.prompt.size());
  const int64_t positions = decoder_.state().cache().max_seq_len;
  GROVE_CHECK(length > 0, "generation request with an empty prompt; send at least one token");
  GROVE_CHECK(request.max_new_tokens > 0, "generation request for ", request.max_new_tokens,
              " new tokens; ask for at least one");
  GROVE_CHECK(length <= decoder_.prompt_buckets().back(), "prompt of ", length,
              " tokens exceeds the largest prompt bucket ", decoder_.prompt_buckets().back());
  GROVE_CHECK(length + request.max_new_tokens - 1 <= positions, "prompt of ", length,
              " tokens plus ", request.max_new_tokens, " new tokens needs ",
              length + request.max_new_tokens - 1, " cache positions; the decoder has ", positions,
              " (max_seq_len): shorten the request or raise max_seq_len");
  for (int64_t token : request.prompt) {
    GROVE_CHECK(token >= 0 && token < decoder_.config().vocab_size, "prompt token ", token,
                " is outside the vocabulary [0, ", decoder_.config().vocab_size, ")");
  }
  request.sampling.verify();
  if (request.eos_token_ids.empty() && !request.ignore_eos) {
    request.eos_token_ids = decoder_.config().eos_token_ids;
  }
  GROVE_CHECK(request.eos_token_ids.size() <= kMaxEosTokens, "a request names ",
              request.eos_token_ids.size(), " EOS tokens; grove stops at up to ", kMaxEosTokens);
  RequestId id = next_id_++;
  results_[id] = GenerationResult{};
  waiting_.emplace_back(id, std::move(request));
  return id;
}

// Note [A request ends in a token callback]
// step()'s on_token may cancel and forget the request it is given, also on
// the token that ended it (by length or EOS: a stop string completed by a
// request's last token). Such a request is finished but still in running_
// until the step retires it, so cancel() retires finished requests even when
// the request itself had already finished, and forget() takes a finished
// request out of running_ (freeing its slot) before dropping its result:
// every request in running_ keeps its result. Before, the step's next
// retire_finished() looked up the forgotten result, threw std::out_of_range,
// and LlmService's handler, cancelling through the same lookup, threw again
// on its thread: `grove serve` died (a hostile-client probe, session 24).
// Test: Generator.TokenCallbackMayCancelAndForgetARequestOnItsLastToken.
void Generator::cancel(RequestId id) {
  GROVE_CHECK(results_.count(id), "cancel of unknown request ", id);
  GenerationResult& result = results_.at(id);
  if (result.finish != FinishReason::kRunning) {
    retire_finished();  // its slot is free now, as a running request's would be
    return;
  }
  result.finish = FinishReason::kCancelled;
  for (auto waiting = waiting_.begin(); waiting != waiting_.end(); ++waiting) {
    if (waiting->first == id) {
      waiting_.erase(waiting);
      return;
    }
  }
  for (auto prefilling = prefilling_.begin(); prefilling != prefilling_.end(); ++prefilling) {
    if (prefilling->id == id) {
      slots_.release(prefilling->slot);
      prefilling_.erase(prefilling);
      return;
    }
  }
  retire_finished();
}

void Generator::append(RequestId id, Active& active, int64_t token) {
  GenerationResult& result = results_.at(id);
  result.tokens.push_back(token);
  produced_.emplace_back(id, token);
  ++stats_.generated_tokens;
  const std::vector<int64_t>& eos = active.request.eos_token_ids;
  if (!active.request.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
    result.finish = FinishReason::kEos;
  } else if (static_cast<int64_t>(result.tokens.size()) >= active.request.max_new_tokens) {
    result.finish = FinishReason::kLength;
  }
}

// Note [Prefills between decode steps]
// Each prefill in a turn delays every running request's next token by its
// time, so a burst of arrivals admitted at once stalls the streams for the
// sum of their prefills: their inter-token latency's tail. With
// max_prefills_per_step = P a turn makes at most P prefill calls, and while
// more wait for a free slot's prefill (or a prompt is prefilled in chunks)
// the decode runs one step per turn (not a multi-step WHILE launch), so the
// rest are admitted step by step: a stream waits at most P prefill calls
// between two tokens, and with prefill_chunk = C (Note [Chunked prefill]) a
// call is at most C tokens, however long the prompt. Tests:
// Generator.PrefillsPerStepAreCappedAndTokensUnchanged,
// Generator.ChunkedPrefillGivesTheWholePromptTokens (generator_test.cc).
void Generator::admit() {
  int64_t calls = 0;
  while (options_.max_prefills_per_step == 0 || calls < options_.max_prefills_per_step) {
    // Prompts already being prefilled go first (oldest first), then waiting
    // requests that a free slot takes.
    if (prefilling_.empty()) {
      if (waiting_.empty()) return;
      std::optional<int64_t> slot = slots_.take();
      if (!slot) return;
      auto [id, request] = std::move(waiting_.front());
      waiting_.pop_front();
      prefilling_.push_back({.id = id, .request = std::move(request), .slot = *slot});
    }
    ++calls;
    if (prefill_next_chunk()) prefilling_.pop_front();
  }
}

// Note [Chunked prefill].
bool Generator::prefill_next_chunk() {
  Prefilling& next = prefilling_.front();
  const std::vector<int64_t>& prompt = next.request.prompt;
  const auto length = static_cast<int64_t>(prompt.size());
  int64_t count = length - next.done;
  if (options_.prefill_chunk > 0) count = std::min(count, options_.prefill_chunk);
  const std::span<const int64_t> tokens(prompt.data() + next.done, static_cast<size_t>(count));
  const Clock::time_point start = Clock::now();
  std::vector<float> logits = next.done == 0 ? decoder_.prefill(next.slot, tokens)
                                             : decoder_.prefill_chunk(next.slot, tokens, next.done);
  add_call_time(stats_.call_times,
                str_cat(next.done == 0 ? "prefill " : "chunk ", decoder_.prompt_bucket(count)),
                start, 0);
  ++stats_.prefill_calls;
  next.done += count;
  if (next.done < length) return false;
  ++stats_.prefills;
  Active active{.request = std::move(next.request), .slot = next.slot, .position = length};
  const int64_t token = sample_token(logits, active.request.sampling, 0);
  Active& placed = running_.emplace(next.id, std::move(active)).first->second;
  append(next.id, placed, token);
  return true;
}

void Generator::retire_finished() {
  for (auto it = running_.begin(); it != running_.end();) {
    if (results_.at(it->first).finish != FinishReason::kRunning) {
      slots_.release(it->second.slot);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
}

// Note [Running requests move to low slots]
// A decode step runs the batch bucket covering the highest slot in use (Note
// [Continuous batching steps]), and slots free in any order, so a few
// long requests left in high slots keep every step at a large bucket: at the
// end of an open-loop load, steps of a handful of rows ran the 64-row program.
// When no waiting request fills the holes (admission takes the lowest free slot
// first) and the slots in use fit a smaller bucket than the highest one
// needs, the request (running, or holding its slot mid-prefill) in the
// highest slot moves to the lowest free slot: Decoder::move_slot copies its
// keys and values there (a few MiB, on the device), its old slot is freed.
// A row's tokens do not depend on its slot (each row attends over its own
// slot only), and the device loop sets every row's state again each run
// (Note [Decode runs on the device]). On with GeneratorOptions::compact_slots.
// Measured, it gains nothing, so it is off by default: H200, session 23 round
// 1 (decode load, 1b, 256 requests at 400/s, buckets 16,32,64, 2 prefills a
// step, chunk 32, one process): 11931 tokens/s without, 11933 with (24 moves;
// 82 instead of 22 steps ran the 16-row program, but the wall time is the
// prefills' and the full batches' and stayed 1.514 s). Tests:
// Generator.RequestsMoveToLowSlotsWithTheirTokens (tests/serving/llm/generator_test.cc),
// DecodeLoopTest.RequestsMovedToLowSlotsKeepTheirTokens (sim and cuda).
void Generator::compact_slots() {
  while (slots_.extent() > 0 &&
         decoder_.batch_bucket(slots_.extent()) > decoder_.batch_bucket(slots_.taken())) {
    const int64_t from = slots_.extent() - 1;
    const std::optional<int64_t> to = slots_.take();
    GROVE_CHECK(to && *to < from, "slot compaction found no free slot below ", from,
                " (a grove bug)");
    decoder_.move_slot(from, *to);
    bool moved = false;
    for (auto& [id, active] : running_) {
      if (active.slot == from) {
        active.slot = *to;
        moved = true;
        break;
      }
    }
    for (Prefilling& prefilling : prefilling_) {
      if (!moved && prefilling.slot == from) {
        prefilling.slot = *to;
        moved = true;
      }
    }
    GROVE_CHECK(moved, "slot ", from, " is taken by no request (a grove bug)");
    slots_.release(from);
    ++stats_.slot_moves;
  }
}

std::vector<std::pair<RequestId, int64_t>> Generator::step(const TokenCallback& on_token) {
  produced_.clear();
  delivered_ = 0;
  on_token_ = &on_token;
  try {
    admit();
    flush();
    retire_finished();
    if (options_.compact_slots && waiting_.empty()) compact_slots();
    if (!running_.empty()) {
      if (options_.loop_steps > 0) {
        decode_on_device();
      } else {
        decode_host_sampled();
      }
      flush();
      retire_finished();
    }
  } catch (...) {
    on_token_ = nullptr;
    throw;
  }
  on_token_ = nullptr;
  return produced_;
}

void Generator::flush() {
  while (delivered_ < produced_.size()) {
    const auto [id, token] = produced_[delivered_++];
    if (on_token_ != nullptr && *on_token_) (*on_token_)(id, token);
  }
}

// Note [Decode runs on the device].
void Generator::decode_on_device() {
  const int64_t bucket = decoder_.batch_bucket(slots_.extent());
  DecodeLoop& loop = loop_for(bucket);
  std::vector<RequestId> by_row(static_cast<size_t>(bucket), -1);
  int64_t steps = options_.loop_steps;
  for (const auto& [id, active] : running_) {
    const GenerationResult& result = results_.at(id);
    const auto generated = static_cast<int64_t>(result.tokens.size());
    by_row[static_cast<size_t>(active.slot)] = id;
    std::span<const int64_t> eos;
    if (!active.request.ignore_eos) eos = active.request.eos_token_ids;
    loop.set_row(active.slot, {.token = result.tokens.back(),
                               .position = active.position,
                               .generated = generated,
                               .max_new_tokens = active.request.max_new_tokens,
                               .eos_token_ids = eos,
                               .sampling = active.request.sampling});
    if (!waiting_.empty()) steps = std::min(steps, active.request.max_new_tokens - generated);
  }
  // Note [Prefills between decode steps]: requests that a free slot could
  // take wait only for the prefill cap; they come in after this one step.
  // A prompt being prefilled in chunks continues after this one step too.
  if (!prefilling_.empty() || (!waiting_.empty() && slots_.taken() < slots_.count())) steps = 1;
  for (int64_t row = 0; row < bucket; ++row) {
    if (by_row[static_cast<size_t>(row)] < 0) loop.clear_row(row);
  }
  steps = std::max<int64_t>(steps, 1);
  // Each step's tokens as the device publishes them; a request that ended
  // meanwhile (a callback cancelled it) takes no more.
  auto on_step = [&](int64_t, const std::vector<int64_t>& tokens) {
    int64_t rows = 0;
    for (int64_t row = 0; row < bucket; ++row) {
      const RequestId id = by_row[static_cast<size_t>(row)];
      const int64_t token = tokens[static_cast<size_t>(row)];
      if (id < 0 || token < 0) continue;
      ++rows;
      auto active = running_.find(id);
      if (active == running_.end() || results_.at(id).finish != FinishReason::kRunning) continue;
      ++active->second.position;
      append(id, active->second, token);
    }
    ++stats_.decode_steps;
    ++stats_.steps_per_bucket[bucket];
    ++stats_.rows_per_step[rows];
    flush();
  };
  const Clock::time_point start = Clock::now();
  DecodeRun run =
      loop.run(steps, steps > 1 ? DecodeMode::kWhileLoop : DecodeMode::kPerStepGraphs, on_step);
  add_call_time(stats_.call_times, str_cat("decode ", bucket), start, run.steps);
  if (run.mode == DecodeMode::kWhileLoop) {
    ++stats_.loop_launches;
    stats_.loop_steps += run.steps;
  }
}

void Generator::decode_host_sampled() {
  std::vector<DecodeRow> rows;
  rows.reserve(running_.size());
  for (const auto& [id, active] : running_) {
    rows.push_back(
        {.slot = active.slot, .token = results_.at(id).tokens.back(), .position = active.position});
  }
  const int64_t bucket = decoder_.batch_bucket(slots_.extent());
  const Clock::time_point start = Clock::now();
  std::vector<std::vector<float>> logits = decoder_.decode(rows);
  add_call_time(stats_.call_times, str_cat("decode ", bucket), start, 1);
  ++stats_.decode_steps;
  ++stats_.steps_per_bucket[bucket];
  ++stats_.rows_per_step[static_cast<int64_t>(rows.size())];
  size_t row = 0;
  for (auto& [id, active] : running_) {
    const uint64_t draw = results_.at(id).tokens.size();
    int64_t token = sample_token(logits[row++], active.request.sampling, draw);
    ++active.position;
    append(id, active, token);
  }
}

std::vector<int64_t> Generator::generate(GenerationRequest request) {
  RequestId id = submit(std::move(request));
  while (!done(id)) step();
  return result(id).tokens;
}

void Generator::forget(RequestId id) {
  GROVE_CHECK(done(id), "forget of generation request ", id, " while it runs; cancel it first");
  // Note [A request ends in a token callback].
  if (auto active = running_.find(id); active != running_.end()) {
    slots_.release(active->second.slot);
    running_.erase(active);
  }
  results_.erase(id);
}

bool Generator::done(RequestId id) const { return result(id).finish != FinishReason::kRunning; }

const GenerationResult& Generator::result(RequestId id) const {
  auto found = results_.find(id);
  GROVE_CHECK(found != results_.end(), "unknown generation request ", id);
  return found->second;
}

}  // namespace grove::serving::llm
