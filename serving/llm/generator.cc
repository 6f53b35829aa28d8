#include "serving/llm/generator.h"

#include "runtime/error.h"

namespace grove::serving::llm {

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

Generator::Generator(Decoder& decoder) : decoder_(decoder), slots_(decoder.state().cache().slots) {}

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
  if (!request.eos_token_id && !request.ignore_eos) {
    request.eos_token_id = decoder_.config().eos_token_id;
  }
  RequestId id = next_id_++;
  results_[id] = GenerationResult{};
  waiting_.emplace_back(id, std::move(request));
  return id;
}

void Generator::cancel(RequestId id) {
  GROVE_CHECK(results_.count(id), "cancel of unknown request ", id);
  GenerationResult& result = results_.at(id);
  if (result.finish != FinishReason::kRunning) return;
  result.finish = FinishReason::kCancelled;
  for (auto waiting = waiting_.begin(); waiting != waiting_.end(); ++waiting) {
    if (waiting->first == id) {
      waiting_.erase(waiting);
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
  if (!active.request.ignore_eos && active.request.eos_token_id &&
      token == *active.request.eos_token_id) {
    result.finish = FinishReason::kEos;
  } else if (static_cast<int64_t>(result.tokens.size()) >= active.request.max_new_tokens) {
    result.finish = FinishReason::kLength;
  }
}

void Generator::admit() {
  while (!waiting_.empty()) {
    std::optional<int64_t> slot = slots_.take();
    if (!slot) return;
    auto [id, request] = std::move(waiting_.front());
    waiting_.pop_front();
    std::vector<float> logits = decoder_.prefill(*slot, request.prompt);
    ++stats_.prefills;
    Active active{.request = std::move(request), .slot = *slot};
    active.position = static_cast<int64_t>(active.request.prompt.size());
    int64_t token = sample_token(logits, active.request.sampling, 0);
    Active& placed = running_.emplace(id, std::move(active)).first->second;
    append(id, placed, token);
  }
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

std::vector<std::pair<RequestId, int64_t>> Generator::step() {
  produced_.clear();
  admit();
  retire_finished();
  if (running_.empty()) return produced_;
  std::vector<DecodeRow> rows;
  rows.reserve(running_.size());
  for (const auto& [id, active] : running_) {
    rows.push_back(
        {.slot = active.slot, .token = results_.at(id).tokens.back(), .position = active.position});
  }
  const int64_t bucket = decoder_.batch_bucket(slots_.extent());
  std::vector<std::vector<float>> logits = decoder_.decode(rows);
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
  retire_finished();
  return produced_;
}

std::vector<int64_t> Generator::generate(GenerationRequest request) {
  RequestId id = submit(std::move(request));
  while (!done(id)) step();
  return result(id).tokens;
}

void Generator::forget(RequestId id) {
  GROVE_CHECK(done(id), "forget of generation request ", id, " while it runs; cancel it first");
  results_.erase(id);
}

bool Generator::done(RequestId id) const { return result(id).finish != FinishReason::kRunning; }

const GenerationResult& Generator::result(RequestId id) const {
  auto found = results_.find(id);
  GROVE_CHECK(found != results_.end(), "unknown generation request ", id);
  return found->second;
}

}  // namespace grove::serving::llm
