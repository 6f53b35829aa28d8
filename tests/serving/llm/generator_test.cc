// The Generator's continuous batching on sim: requests join and leave between
// decode steps and get the tokens they get alone (greedy and seeded sampling),
// slots are freed when requests end, EOS and max tokens stop a request
// (Note [Continuous batching steps], Note [Sampling draws]).
#include "serving/llm/generator.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "compiler/backends/backend_stats_json.h"
#include "runtime/device.h"
#include "tests/serving/llm/llm_test_util.h"

namespace grove::serving::llm {
namespace {

using testing::generation_request;

constexpr uint64_t kSeed = 83;

std::unique_ptr<Decoder> tiny_decoder() {
  return testing::warmed_tiny_decoder(runtime::kSimDevice, Architecture::kLlama,
                                      runtime::DType::kF32, kSeed);
}

std::vector<GenerationRequest> mixed_requests() {
  SamplingParams hot{.temperature = 0.9, .top_k = 20, .top_p = 0.9, .seed = 5};
  SamplingParams warm{.temperature = 0.7, .top_k = 0, .top_p = 1, .seed = 6};
  return {generation_request({1, 2, 3}, 6),
          generation_request({40, 41, 42, 43, 44, 45, 46, 47, 48, 49}, 3, hot),
          generation_request({7}, 9, warm), generation_request({90, 3, 3, 12, 55}, 4),
          generation_request({13, 14}, 5, hot)};  // five requests, four slots: one waits
}

TEST(Generator, RequestsGetTheSameTokensAloneAsInAnyBatch) {
  auto decoder = tiny_decoder();
  std::vector<std::vector<int64_t>> alone;
  {
    Generator generator(*decoder);
    for (const GenerationRequest& r : mixed_requests()) alone.push_back(generator.generate(r));
  }
  Generator generator(*decoder);
  std::vector<RequestId> ids;
  std::vector<GenerationRequest> requests = mixed_requests();
  // Two join at once, one joins after two steps, the rest after four.
  ids.push_back(generator.submit(requests[0]));
  ids.push_back(generator.submit(requests[1]));
  generator.step();
  generator.step();
  ids.push_back(generator.submit(requests[2]));
  generator.step();
  generator.step();
  ids.push_back(generator.submit(requests[3]));
  ids.push_back(generator.submit(requests[4]));
  while (!generator.idle()) generator.step();
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(generator.result(ids[i]).tokens, alone[i]) << "request " << i << " seed " << kSeed;
    EXPECT_EQ(generator.result(ids[i]).finish, FinishReason::kLength);
    EXPECT_EQ(static_cast<int64_t>(alone[i].size()), requests[i].max_new_tokens);
  }
  EXPECT_EQ(generator.slots_in_use(), 0);
  // Some steps ran three rows, padded to the bucket of four.
  EXPECT_GT(generator.stats().rows_per_step.count(3), 0u);
  EXPECT_GT(generator.stats().steps_per_bucket.count(4), 0u);
  // No bucket recorded again while requests came and went.
  nlohmann::json tree = grove::compiler::backends::stats_json(decoder->backend_stats()).at("tree");
  EXPECT_EQ(tree.at("recordings").get<int64_t>(), 3 + 2) << tree.dump();
}

TEST(Generator, MoreRequestsThanSlotsWaitAndSlotsAreFreed) {
  auto decoder = tiny_decoder();
  Generator generator(*decoder);
  std::vector<RequestId> ids;
  for (int i = 0; i < 6; ++i)
    ids.push_back(generator.submit(generation_request({i + 1, 2}, 3 + i % 3)));
  generator.step();
  EXPECT_EQ(generator.running(), 4);
  EXPECT_EQ(generator.waiting(), 2);
  EXPECT_EQ(generator.slots_in_use(), 4);
  while (!generator.idle()) generator.step();
  EXPECT_EQ(generator.slots_in_use(), 0);
  for (RequestId id : ids) EXPECT_TRUE(generator.done(id));
}

TEST(Generator, StopsAtEosIncludingTheEosToken) {
  auto decoder = tiny_decoder();
  Generator generator(*decoder);
  std::vector<int64_t> free_run = generator.generate(generation_request({3, 1, 4, 1, 5}, 8));
  GenerationRequest stopping = generation_request({3, 1, 4, 1, 5}, 8);
  stopping.eos_token_ids = {free_run[2]};
  RequestId id = generator.submit(stopping);
  while (!generator.done(id)) generator.step();
  // Stops at the first occurrence of the EOS token.
  size_t first = std::find(free_run.begin(), free_run.end(), free_run[2]) - free_run.begin();
  EXPECT_EQ(generator.result(id).tokens,
            std::vector<int64_t>(free_run.begin(), free_run.begin() + first + 1));
  EXPECT_EQ(generator.result(id).finish, FinishReason::kEos);
  EXPECT_EQ(generator.slots_in_use(), 0);
}

TEST(Generator, CancelFreesTheSlotForAWaitingRequest) {
  auto decoder = tiny_decoder();
  Generator generator(*decoder);
  std::vector<RequestId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(generator.submit(generation_request({i + 1}, 20)));
  generator.step();
  EXPECT_EQ(generator.waiting(), 1);
  generator.cancel(ids[1]);
  EXPECT_EQ(generator.result(ids[1]).finish, FinishReason::kCancelled);
  EXPECT_EQ(generator.slots_in_use(), 3);
  generator.step();
  EXPECT_EQ(generator.waiting(), 0);
  EXPECT_EQ(generator.running(), 4);
}

// Note [A request ends in a token callback]: the callback cancels and forgets
// a request on its last token (as LlmService does when that token completes a
// stop string); the step goes on, the slot is freed, and the other request
// gets the tokens it gets alone. Step by step and in device loops. Before, the
// step threw std::out_of_range.
TEST(Generator, TokenCallbackMayCancelAndForgetARequestOnItsLastToken) {
  auto decoder = tiny_decoder();
  std::vector<int64_t> alone;
  {
    Generator generator(*decoder);
    alone = generator.generate(generation_request({9, 8, 7}, 10));
  }
  for (int64_t loop_steps : {0, 4}) {
    SCOPED_TRACE(::testing::Message() << "loop_steps " << loop_steps);
    Generator generator(*decoder, {.loop_steps = loop_steps});
    const RequestId ending = generator.submit(generation_request({1, 2, 3}, 3));
    const RequestId other = generator.submit(generation_request({9, 8, 7}, 10));
    int64_t ending_tokens = 0;
    std::vector<int64_t> other_tokens;
    bool forgotten = false;
    auto on_token = [&](RequestId id, int64_t token) {
      if (id == other) other_tokens.push_back(token);
      if (id != ending) return;
      ASSERT_FALSE(forgotten) << "a token after the request was forgotten";
      if (++ending_tokens == 3) {
        EXPECT_TRUE(generator.done(ending));  // ended by length with this token
        generator.cancel(ending);
        generator.forget(ending);
        forgotten = true;
      }
    };
    while (!generator.idle()) ASSERT_NO_THROW(generator.step(on_token));
    EXPECT_TRUE(forgotten);
    EXPECT_EQ(other_tokens, alone);
    EXPECT_EQ(generator.slots_in_use(), 0);
    generator.forget(other);
    // The freed slot takes a new request.
    EXPECT_EQ(generator.generate(generation_request({9, 8, 7}, 10)), alone);
  }
}

// Note [Every EOS token stops a row]: of three EOS tokens the free run meets
// only the last, and the request stops there, on the host's path and in
// device loops.
TEST(Generator, AnyOfSeveralEosTokensStopsARequest) {
  auto decoder = tiny_decoder();
  std::vector<int64_t> free_run;
  {
    Generator generator(*decoder);
    free_run = generator.generate(generation_request({3, 1, 4, 1, 5}, 8));
  }
  const std::vector<int64_t> unseen = testing::tokens_not_in(free_run, 2);
  const size_t first = std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin();
  for (int64_t loop_steps : {0, 4}) {
    SCOPED_TRACE(::testing::Message() << "loop_steps " << loop_steps);
    Generator generator(*decoder, {.loop_steps = loop_steps});
    GenerationRequest stopping = generation_request({3, 1, 4, 1, 5}, 8);
    stopping.eos_token_ids = {unseen[0], unseen[1], free_run[3]};
    RequestId id = generator.submit(stopping);
    while (!generator.done(id)) generator.step();
    EXPECT_EQ(generator.result(id).tokens,
              std::vector<int64_t>(free_run.begin(), free_run.begin() + first + 1));
    EXPECT_EQ(generator.result(id).finish, FinishReason::kEos);
  }
  Generator generator(*decoder);
  GenerationRequest too_many = generation_request({3, 1, 4, 1, 5}, 8);
  too_many.eos_token_ids.assign(kMaxEosTokens + 1, 7);
  EXPECT_THROW(generator.submit(too_many), Error);
}

// Note [Decode runs on the device]: the same requests, joining and leaving
// as in RequestsGetTheSameTokensAloneAsInAnyBatch, plus one that stops at
// EOS, get the same tokens from device loops of up to 4 steps as step by step.
TEST(Generator, DeviceLoopGivesThePerStepTokens) {
  auto decoder = tiny_decoder();
  std::vector<GenerationRequest> requests = mixed_requests();
  std::vector<int64_t> free_run;
  {
    Generator generator(*decoder);
    free_run = generator.generate(generation_request({3, 1, 4, 1, 5}, 12));
  }
  GenerationRequest stopping = generation_request({3, 1, 4, 1, 5}, 12);
  stopping.eos_token_ids = {free_run[5]};
  requests.push_back(stopping);
  auto run_all = [&](Generator& generator) {
    std::vector<RequestId> ids;
    ids.push_back(generator.submit(requests[0]));
    ids.push_back(generator.submit(requests[1]));
    generator.step();
    ids.push_back(generator.submit(requests[2]));
    generator.step();
    for (size_t i = 3; i < requests.size(); ++i) ids.push_back(generator.submit(requests[i]));
    while (!generator.idle()) generator.step();
    std::vector<GenerationResult> results;
    for (RequestId id : ids) results.push_back(generator.result(id));
    return results;
  };
  Generator per_step(*decoder);
  std::vector<GenerationResult> expected = run_all(per_step);
  // Note [Steps per WHILE iteration]: 3 copies of the step per iteration, launches of 4 steps.
  for (int64_t copies : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << copies << " steps per WHILE iteration");
    Generator looped(*decoder, {.loop_steps = 4, .while_steps_per_iteration = copies});
    looped.warm_up();
    std::vector<GenerationResult> got = run_all(looped);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, expected[i].tokens) << "request " << i << " seed " << kSeed;
      EXPECT_EQ(got[i].finish, expected[i].finish) << "request " << i;
    }
    EXPECT_EQ(got.back().finish, FinishReason::kEos);
    EXPECT_EQ(looped.slots_in_use(), 0);
    EXPECT_GT(looped.stats().loop_launches, 0);
    EXPECT_GT(looped.stats().loop_steps, looped.stats().loop_launches);  // launches of many steps
    EXPECT_EQ(looped.stats().generated_tokens, per_step.stats().generated_tokens);
  }
}

// Note [Prefills between decode steps]: with at most one prefill per step,
// three requests submitted together are admitted over three steps (one
// prefill before each), and each still gets the tokens of the uncapped run.
TEST(Generator, PrefillsPerStepAreCappedAndTokensUnchanged) {
  auto decoder = tiny_decoder();
  const std::vector<GenerationRequest> requests = {generation_request({1, 2, 3}, 6),
                                                   generation_request({7}, 5),
                                                   generation_request({90, 3, 3, 12, 55}, 4)};
  for (int64_t loop_steps : {0, 4}) {
    SCOPED_TRACE(::testing::Message() << "loop_steps " << loop_steps);
    auto run_all = [&](Generator& generator, std::vector<int64_t>* prefills_per_step) {
      std::vector<RequestId> ids;
      for (const GenerationRequest& request : requests) ids.push_back(generator.submit(request));
      while (!generator.idle()) {
        const int64_t before = generator.stats().prefills;
        generator.step();
        if (prefills_per_step) prefills_per_step->push_back(generator.stats().prefills - before);
      }
      std::vector<std::vector<int64_t>> tokens;
      for (RequestId id : ids) tokens.push_back(generator.result(id).tokens);
      return tokens;
    };
    Generator uncapped(*decoder, {.loop_steps = loop_steps});
    Generator capped(*decoder, {.loop_steps = loop_steps, .max_prefills_per_step = 1});
    std::vector<int64_t> prefills;
    EXPECT_EQ(run_all(capped, &prefills), run_all(uncapped, nullptr)) << "seed " << kSeed;
    ASSERT_GE(prefills.size(), 3u);
    EXPECT_EQ(prefills[0], 1);
    EXPECT_EQ(prefills[1], 1);
    EXPECT_EQ(prefills[2], 1);
    EXPECT_EQ(capped.stats().prefills, 3);
  }
}

// Note [Chunked prefill]: with prompts prefilled 4 tokens per call and one
// call per step, a 10-token prompt takes three steps' calls (4, 4, 2 tokens)
// while the streams already running keep decoding, and every request gets
// the tokens of whole-prompt prefills; a request cancelled mid-prefill
// frees its slot.
TEST(Generator, ChunkedPrefillGivesTheWholePromptTokens) {
  auto decoder = tiny_decoder();
  SamplingParams warm{.temperature = 0.7, .top_k = 0, .top_p = 1, .seed = 6};
  const std::vector<GenerationRequest> requests = {
      generation_request({40, 41, 42, 43, 44, 45, 46, 47, 48, 49}, 6),
      generation_request({1, 2, 3, 4, 5}, 5, warm), generation_request({7, 8, 9}, 4)};
  for (int64_t loop_steps : {0, 4}) {
    SCOPED_TRACE(::testing::Message() << "loop_steps " << loop_steps);
    auto run_all = [&](Generator& generator, std::vector<int64_t>* calls_per_step) {
      std::vector<RequestId> ids;
      for (const GenerationRequest& request : requests) ids.push_back(generator.submit(request));
      while (!generator.idle()) {
        const int64_t before = generator.stats().prefill_calls;
        generator.step();
        if (calls_per_step) calls_per_step->push_back(generator.stats().prefill_calls - before);
      }
      std::vector<std::vector<int64_t>> tokens;
      for (RequestId id : ids) tokens.push_back(generator.result(id).tokens);
      return tokens;
    };
    Generator whole(*decoder, {.loop_steps = loop_steps});
    Generator chunked(*decoder,
                      {.loop_steps = loop_steps, .max_prefills_per_step = 1, .prefill_chunk = 4});
    std::vector<int64_t> calls;
    EXPECT_EQ(run_all(chunked, &calls), run_all(whole, nullptr)) << "seed " << kSeed;
    EXPECT_EQ(chunked.stats().prefills, 3);
    EXPECT_EQ(chunked.stats().prefill_calls, 3 + 2 + 1);
    EXPECT_EQ(whole.stats().prefill_calls, 3);
    for (int64_t count : calls) EXPECT_LE(count, 1);
    EXPECT_EQ(chunked.slots_in_use(), 0);
  }
  Generator chunked(*decoder, {.max_prefills_per_step = 1, .prefill_chunk = 4});
  const RequestId id = chunked.submit(requests[0]);
  chunked.step();  // the first 4 tokens
  EXPECT_EQ(chunked.waiting(), 1);
  EXPECT_EQ(chunked.slots_in_use(), 1);
  chunked.cancel(id);
  EXPECT_EQ(chunked.result(id).finish, FinishReason::kCancelled);
  EXPECT_EQ(chunked.slots_in_use(), 0);
  EXPECT_TRUE(chunked.idle());
}

// Note [Running requests move to low slots]: two short requests in slots 0
// and 1 end, leaving a long one in slot 2 (bucket 4); it moves to slot 0 and
// runs the 1-row program with the tokens it gets without moving, and alone.
TEST(Generator, RequestsMoveToLowSlotsWithTheirTokens) {
  auto decoder = tiny_decoder();
  const std::vector<GenerationRequest> requests = {
      generation_request({1, 2, 3}, 2), generation_request({7, 8}, 2),
      generation_request({90, 3, 3, 12, 55}, 9,
                         {.temperature = 0.7, .top_k = 0, .top_p = 1, .seed = 6})};
  std::vector<int64_t> alone;
  {
    Generator generator(*decoder);
    alone = generator.generate(requests[2]);
  }
  for (int64_t loop_steps : {0, 4}) {
    SCOPED_TRACE(::testing::Message() << "loop_steps " << loop_steps);
    auto run_all = [&](Generator& generator) {
      std::vector<RequestId> ids;
      for (const GenerationRequest& request : requests) ids.push_back(generator.submit(request));
      while (!generator.idle()) generator.step();
      std::vector<std::vector<int64_t>> tokens;
      for (RequestId id : ids) tokens.push_back(generator.result(id).tokens);
      return tokens;
    };
    Generator kept(*decoder, {.loop_steps = loop_steps, .compact_slots = false});
    Generator compacted(*decoder, {.loop_steps = loop_steps, .compact_slots = true});
    const std::vector<std::vector<int64_t>> tokens = run_all(compacted);
    EXPECT_EQ(tokens, run_all(kept)) << "seed " << kSeed;
    EXPECT_EQ(tokens[2], alone);
    EXPECT_EQ(compacted.stats().slot_moves, 1);
    EXPECT_EQ(kept.stats().slot_moves, 0);
    EXPECT_GT(compacted.stats().steps_per_bucket.count(1), 0u);
    EXPECT_EQ(kept.stats().steps_per_bucket.count(1), 0u);
    EXPECT_EQ(compacted.slots_in_use(), 0);
  }
}

// Note [Where a turn's time goes]: every prefill call and decode run is
// counted under its kind and bucket, chunks apart from first calls.
TEST(Generator, CallTimesCountEveryCall) {
  auto decoder = tiny_decoder();
  for (int64_t loop_steps : {0, 4}) {
    SCOPED_TRACE(::testing::Message() << "loop_steps " << loop_steps);
    Generator generator(*decoder,
                        {.loop_steps = loop_steps, .max_prefills_per_step = 1, .prefill_chunk = 4});
    generator.submit(generation_request({40, 41, 42, 43, 44, 45, 46, 47, 48, 49}, 6));
    generator.submit(generation_request({7, 8, 9}, 4));
    while (!generator.idle()) generator.step();
    const GeneratorStats& stats = generator.stats();
    int64_t prefill_calls = 0;
    int64_t chunk_calls = 0;
    int64_t decode_steps = 0;
    for (const auto& [key, time] : stats.call_times) {
      EXPECT_GE(time.seconds, 0.0) << key;
      if (key.starts_with("prefill ")) prefill_calls += time.calls;
      if (key.starts_with("chunk ")) chunk_calls += time.calls;
      if (key.starts_with("decode ")) {
        decode_steps += time.steps;
        EXPECT_GE(time.steps, time.calls) << key;
      }
    }
    EXPECT_EQ(prefill_calls, 2);  // each prompt's first call
    EXPECT_EQ(chunk_calls, 2);    // the 10-token prompt's 4 and 2 tokens after its first 4
    EXPECT_EQ(prefill_calls + chunk_calls, stats.prefill_calls);
    EXPECT_EQ(decode_steps, stats.decode_steps);
    EXPECT_EQ(stats.call_times.count("prefill " + std::to_string(decoder->prompt_bucket(4))), 1u);
  }
}

TEST(Generator, RefusesRequestsThatCannotFitTheCache) {
  auto decoder = tiny_decoder();
  Generator generator(*decoder);
  EXPECT_THROW(generator.submit(generation_request({}, 4)), Error);
  EXPECT_THROW(generator.submit(generation_request({1, 2, 3}, 31)), Error);  // 3 + 31 - 1 > 32
  EXPECT_THROW(generator.submit(generation_request({1, 2, 3}, 0)), Error);
  EXPECT_THROW(generator.submit(generation_request({1000}, 2)), Error);  // outside the vocabulary
  EXPECT_THROW(generator.submit(generation_request({1}, 2, {.temperature = 1, .top_p = 0})), Error);
  EXPECT_NO_THROW(generator.submit(generation_request({1, 2, 3}, 30)));
}

}  // namespace
}  // namespace grove::serving::llm
