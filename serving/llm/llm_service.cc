#include "serving/llm/llm_service.h"

#include <algorithm>

namespace grove::serving::llm {

const char* completion_end_name(CompletionEnd end) {
  switch (end) {
    case CompletionEnd::kEos:
      return "eos";
    case CompletionEnd::kLength:
      return "length";
    case CompletionEnd::kStop:
      return "stop";
    case CompletionEnd::kCancelled:
      return "cancelled";
    case CompletionEnd::kFailed:
      return "failed";
  }
  return "?";
}

LlmService::LlmService(Decoder& decoder, const Tokenizer* tokenizer, LlmServiceConfig config)
    : decoder_(decoder),
      tokenizer_(tokenizer),
      config_(config),
      generator_(decoder, {.loop_steps = config.decode_loop_steps,
                           .max_prefills_per_step = config.max_prefills_per_step,
                           .prefill_chunk = config.prefill_chunk,
                           .while_steps_per_iteration = config.while_steps_per_iteration,
                           .compact_slots = config.compact_slots}) {
  // The decode loops compile and record here, in the thread that warmed the
  // decoder up, not on the first request.
  generator_.warm_up();
  limits_.positions = decoder.state().cache().max_seq_len;
  limits_.max_prompt_tokens = std::min(decoder.prompt_buckets().back(), limits_.positions);
  limits_.max_prompt_bytes = limits_.max_prompt_tokens * kMostTextBytesPerToken;
  limits_.max_new_tokens = config.max_new_tokens > 0
                               ? std::min(config.max_new_tokens, limits_.positions)
                               : limits_.positions;
  limits_.vocab_size = decoder.config().vocab_size;
  GROVE_CHECK(tokenizer == nullptr || tokenizer->vocab_size() <= limits_.vocab_size, "tokenizer ",
              tokenizer->path(), " has ", tokenizer->vocab_size(),
              " pieces, more than the model's ", limits_.vocab_size,
              " tokens: it belongs to another model");
  publish_stats();
  trees_ = cudagraph_trees::backend::trees_of_calling_thread();
  thread_ = std::thread([this] { run(); });
}

LlmService::~LlmService() { shutdown(); }

void LlmService::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<int64_t> LlmService::encode(const std::string& text) const {
  GROVE_CHECK_AS(CompletionError, tokenizer_ != nullptr,
                 "this model has no tokenizer (no tokenizer.model in its directory): send the "
                 "prompt as token ids");
  GROVE_CHECK_AS(CompletionError, !text.empty(), "the prompt is empty: send text or token ids");
  // Note [Text prompts are bounded before tokenizing].
  GROVE_CHECK_AS(CompletionError, static_cast<int64_t>(text.size()) <= limits_.max_prompt_bytes,
                 "the prompt text of ", text.size(), " bytes is longer than the ",
                 limits_.max_prompt_bytes, " this server tokenizes (", kMostTextBytesPerToken,
                 " bytes for each of the ", limits_.max_prompt_tokens, " tokens it accepts)");
  std::vector<int64_t> ids;
  if (tokenizer_->bos_id()) ids.push_back(*tokenizer_->bos_id());
  std::vector<int64_t> pieces = tokenizer_->encode(text);
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  return ids;
}

void LlmService::check(const CompletionRequest& request) const {
  const int64_t length = static_cast<int64_t>(request.prompt.size());
  GROVE_CHECK_AS(CompletionError, length > 0,
                 "the prompt is empty: send text or at least one token id");
  GROVE_CHECK_AS(CompletionError, length <= limits_.max_prompt_tokens, "the prompt of ", length,
                 " tokens is longer than the ", limits_.max_prompt_tokens,
                 " this server accepts (its largest prompt bucket)");
  for (int64_t token : request.prompt) {
    GROVE_CHECK_AS(CompletionError, token >= 0 && token < limits_.vocab_size, "prompt token id ",
                   token, " is outside the model's vocabulary [0, ", limits_.vocab_size, ")");
  }
  GROVE_CHECK_AS(CompletionError, request.max_tokens >= 1, "max_tokens ", request.max_tokens,
                 " must be at least 1");
  GROVE_CHECK_AS(CompletionError, request.max_tokens <= limits_.max_new_tokens, "max_tokens ",
                 request.max_tokens, " is over this server's limit of ", limits_.max_new_tokens);
  GROVE_CHECK_AS(CompletionError, length + request.max_tokens - 1 <= limits_.positions,
                 "the prompt of ", length, " tokens and max_tokens ", request.max_tokens, " need ",
                 length + request.max_tokens - 1, " cache positions; this server has ",
                 limits_.positions, ": shorten the prompt or lower max_tokens");
  GROVE_CHECK_AS(CompletionError, request.stop.empty() || tokenizer_ != nullptr,
                 "stop strings need a tokenizer, and this model has none (no tokenizer.model)");
  try {
    request.sampling.verify();
  } catch (const Error& error) {
    throw CompletionError(error.what());
  }
}

LlmService::Ticket LlmService::submit(CompletionRequest request, CompletionEvents events) {
  check(request);
  Ticket ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    GROVE_CHECK_AS(CompletionUnavailable, !stopping_, "the server is stopping");
    const LlmStats now = stats();
    GROVE_CHECK_AS(CompletionUnavailable,
                   static_cast<size_t>(now.waiting) + inbox_.size() < config_.max_waiting,
                   "too many completions wait (", config_.max_waiting, "); retry later");
    ticket = next_ticket_++;
    inbox_.push_back({ticket, std::move(request), std::move(events), Clock::now()});
  }
  wake_.notify_one();
  return ticket;
}

void LlmService::cancel(Ticket ticket) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.push_back(ticket);
  }
  wake_.notify_one();
}

void LlmService::run() {
  // Note [Completions on the service thread].
  cudagraph_trees::backend::UseTrees in_the_warm_trees(trees_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] {
      return stopping_ || !inbox_.empty() || !cancels_.empty() || !generator_.idle();
    });
    if (stopping_) break;
    std::vector<Submitted> inbox;
    std::vector<Ticket> cancels;
    inbox.swap(inbox_);
    cancels.swap(cancels_);
    lock.unlock();
    for (Submitted& submitted : inbox) admit(std::move(submitted));
    // Published before the step that may deliver their first tokens: a client
    // that has a token never reads /metrics without its request (waiting or
    // running). Before, the snapshot of the previous turn could show an idle
    // service to a client holding tokens (llm_http_test's disconnect test).
    if (!inbox.empty()) publish_stats();
    end_cancelled(cancels);
    if (!generator_.idle()) {
      try {
        // Tokens go out as the device publishes them (Note [Decode runs on the
        // device]); a cancel that comes in meanwhile ends its request before
        // its next token.
        generator_.step([this](RequestId id, int64_t token) {
          cancel_during_step();
          deliver(id, token);
        });
        std::vector<RequestId> finished;
        for (const auto& [id, tracked] : tracked_) {
          if (generator_.done(id)) finished.push_back(id);
        }
        for (RequestId id : finished) {
          const FinishReason reason = generator_.result(id).finish;
          end(id, {.end = reason == FinishReason::kEos      ? CompletionEnd::kEos
                          : reason == FinishReason::kLength ? CompletionEnd::kLength
                                                            : CompletionEnd::kCancelled});
        }
      } catch (const std::exception& error) {
        // A step that failed on the device: every request in it fails, the service goes on.
        std::vector<RequestId> all;
        for (const auto& [id, tracked] : tracked_) all.push_back(id);
        for (RequestId id : all) {
          generator_.cancel(id);
          end(id, {.end = CompletionEnd::kFailed, .error = error.what()});
        }
      }
    }
    publish_stats();
    lock.lock();
  }
  // Stopping: nothing more runs; every request still known ends cancelled,
  // those never admitted too (Note [Completions on the service thread]: a
  // request ends exactly once).
  std::vector<Submitted> inbox;
  inbox.swap(inbox_);
  lock.unlock();
  std::vector<RequestId> all;
  for (const auto& [id, tracked] : tracked_) all.push_back(id);
  for (RequestId id : all) {
    generator_.cancel(id);
    end(id, {.end = CompletionEnd::kCancelled});
  }
  for (Submitted& submitted : inbox) {
    ++ended_[completion_end_name(CompletionEnd::kCancelled)];
    publish_stats();
    CompletionSummary summary{.end = CompletionEnd::kCancelled};
    summary.prompt_tokens = static_cast<int64_t>(submitted.request.prompt.size());
    if (submitted.events.on_end) submitted.events.on_end(summary);
  }
  publish_stats();
}

void LlmService::admit(Submitted submitted) {
  GenerationRequest request;
  request.prompt = submitted.request.prompt;
  request.max_new_tokens = submitted.request.max_tokens;
  request.ignore_eos = submitted.request.ignore_eos;
  request.sampling = submitted.request.sampling;
  RequestId id = 0;
  try {
    id = generator_.submit(std::move(request));
  } catch (const std::exception& error) {
    CompletionSummary summary{.end = CompletionEnd::kFailed, .error = error.what()};
    summary.prompt_tokens = static_cast<int64_t>(submitted.request.prompt.size());
    ++ended_[completion_end_name(CompletionEnd::kFailed)];
    if (submitted.events.on_end) submitted.events.on_end(summary);
    return;
  }
  Tracked tracked{.ticket = submitted.ticket, .events = std::move(submitted.events)};
  tracked.prompt_tokens = static_cast<int64_t>(submitted.request.prompt.size());
  tracked.received = submitted.received;
  if (tokenizer_ != nullptr) {
    const std::vector<int64_t>& prompt = submitted.request.prompt;
    const size_t tail = std::min(prompt.size(), TextStream::kPromptTail);
    tracked.text.emplace(
        [tokenizer = tokenizer_](std::span<const int64_t> ids) { return tokenizer->decode(ids); },
        std::vector<int64_t>(prompt.end() - static_cast<ptrdiff_t>(tail), prompt.end()),
        std::move(submitted.request.stop));
  }
  prompt_tokens_ += tracked.prompt_tokens;
  by_ticket_[submitted.ticket] = id;
  tracked_.emplace(id, std::move(tracked));
}

// Note [Completions on the service thread]: cancels of admitted requests
// that came in during a step of several decode steps end them now, so a
// client that went away gets no more tokens; the rest wait for the next turn
// (their requests are still in the inbox).
void LlmService::cancel_during_step() {
  std::vector<Ticket> cancels;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cancels_.empty()) return;
    cancels.swap(cancels_);
    std::erase_if(cancels, [&](Ticket ticket) {
      if (by_ticket_.count(ticket)) return false;
      cancels_.push_back(ticket);
      return true;
    });
  }
  end_cancelled(cancels);
}

// The admitted requests of `tickets` end cancelled (their slots free now);
// tickets of requests that already ended are ignored.
void LlmService::end_cancelled(const std::vector<Ticket>& tickets) {
  for (Ticket ticket : tickets) {
    auto found = by_ticket_.find(ticket);
    if (found == by_ticket_.end()) continue;
    const RequestId id = found->second;
    generator_.cancel(id);
    end(id, {.end = CompletionEnd::kCancelled});
  }
}

void LlmService::deliver(RequestId id, int64_t token) {
  auto found = tracked_.find(id);
  if (found == tracked_.end()) return;  // ended in this turn (a stop string)
  Tracked& tracked = found->second;
  const Clock::time_point now = Clock::now();
  if (tracked.tokens == 0) {
    time_to_first_token_.observe(std::chrono::duration<double>(now - tracked.received).count());
  } else {
    inter_token_latency_.observe(std::chrono::duration<double>(now - tracked.last_token).count());
  }
  tracked.last_token = now;
  ++tracked.tokens;
  TextStream::Step step;
  if (tracked.text) step = tracked.text->add(token);
  if (tracked.events.on_token) tracked.events.on_token(token, step.released);
  if (step.stopped) {
    generator_.cancel(id);  // frees the slot now
    end(id, {.end = CompletionEnd::kStop});
  }
}

void LlmService::end(RequestId id, CompletionSummary summary) {
  auto found = tracked_.find(id);
  if (found == tracked_.end()) return;
  Tracked& tracked = found->second;
  if (tracked.text &&
      (summary.end == CompletionEnd::kEos || summary.end == CompletionEnd::kLength)) {
    summary.text_rest = tracked.text->finish();
  }
  summary.prompt_tokens = tracked.prompt_tokens;
  summary.completion_tokens = tracked.tokens;
  CompletionEvents events = std::move(tracked.events);
  ++ended_[completion_end_name(summary.end)];
  by_ticket_.erase(tracked.ticket);
  tracked_.erase(found);
  generator_.forget(id);
  publish_stats();  // what on_end's caller then reads of stats() includes this end
  if (events.on_end) events.on_end(summary);
}

void LlmService::publish_stats() {
  const GeneratorStats& generator = generator_.stats();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.running = generator_.running();
  stats_.waiting = generator_.waiting();
  stats_.slots_used = generator_.slots_in_use();
  stats_.slots = decoder_.state().cache().slots;
  stats_.prefills = generator.prefills;
  stats_.decode_steps = generator.decode_steps;
  stats_.loop_launches = generator.loop_launches;
  stats_.loop_steps = generator.loop_steps;
  stats_.generated_tokens = generator.generated_tokens;
  stats_.prompt_tokens = prompt_tokens_;
  stats_.rows_per_step = generator.rows_per_step;
  stats_.call_times = generator.call_times;
  stats_.slot_moves = generator.slot_moves;
  stats_.ended = ended_;
}

LlmStats LlmService::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

}  // namespace grove::serving::llm
