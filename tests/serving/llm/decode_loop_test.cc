// DecodeLoop on sim and (when present) cuda: the device decode loop, as one
// WHILE graph launch or one graph per step, gives the Generator's tokens (host
// sampling over per-step decode), stops rows at EOS and max tokens on the
// device, streams tokens as steps finish; the device sampler equals the host
// reference bit for bit; the KV write stores one position per row
// (Note [Decode loop on the device], Note [Sampling draws],
// Note [KV cache in static buffers]).
#include "serving/llm/decode_loop.h"

#include <gtest/gtest.h>

#include <random>

#include "runtime/device_context.h"
#include "serving/llm/decode_kernels.h"
#include "serving/llm/generator.h"
#include "tests/common/test_util.h"
#include "tests/serving/llm/llm_test_util.h"

namespace grove::serving::llm {
namespace {

using testing::generation_request;

namespace layout = decode_layout;
using runtime::Tensor;

constexpr uint64_t kWeightsSeed = 83;

class DecodeLoopTest : public ::grove::testing::DeviceTest {
 protected:
  std::unique_ptr<Decoder> tiny_decoder(Architecture architecture = Architecture::kLlama,
                                        runtime::DType dtype = runtime::DType::kF32) {
    return testing::warmed_tiny_decoder(device(), architecture, dtype, kWeightsSeed);
  }
};

std::vector<GenerationRequest> mixed_requests() {
  SamplingParams hot{.temperature = 0.9, .top_k = 20, .top_p = 0.9, .seed = 5};
  SamplingParams warm{.temperature = 0.7, .top_k = 0, .top_p = 1, .seed = 6};
  SamplingParams nucleus{.temperature = 1.3, .top_k = 0, .top_p = 0.8, .seed = 11};
  return {generation_request({1, 2, 3}, 9),
          generation_request({40, 41, 42, 43, 44, 45, 46, 47, 48, 49}, 5, hot),
          generation_request({7}, 12, warm), generation_request({13, 14}, 7, nucleus)};
}

// Prefills each request into its slot (row), samples its first token on the
// host, and starts the row; returns the tokens so far.
std::vector<std::vector<int64_t>> start_rows(Decoder& decoder, DecodeLoop& loop,
                                             const std::vector<GenerationRequest>& requests) {
  std::vector<std::vector<int64_t>> tokens(requests.size());
  for (size_t row = 0; row < requests.size(); ++row) {
    const GenerationRequest& r = requests[row];
    std::vector<float> logits = decoder.prefill(static_cast<int64_t>(row), r.prompt);
    int64_t first = sample_token(logits, r.sampling, 0);
    tokens[row].push_back(first);
    loop.set_row(static_cast<int64_t>(row), {.token = first,
                                             .position = static_cast<int64_t>(r.prompt.size()),
                                             .generated = 1,
                                             .max_new_tokens = r.max_new_tokens,
                                             .eos_token_ids = r.eos_token_ids,
                                             .sampling = r.sampling});
  }
  return tokens;
}

void collect(const DecodeRun& run, std::vector<std::vector<int64_t>>& tokens) {
  for (const std::vector<int64_t>& step : run.tokens) {
    for (size_t row = 0; row < tokens.size(); ++row) {
      if (step[row] >= 0) tokens[row].push_back(step[row]);
    }
  }
}

TEST_P(DecodeLoopTest, WhileLoopAndPerStepGraphsGiveTheGeneratorsTokens) {
  auto decoder = tiny_decoder();
  std::vector<GenerationRequest> requests = mixed_requests();
  std::vector<std::vector<int64_t>> expected;
  {
    Generator generator(*decoder);
    for (const GenerationRequest& r : requests) expected.push_back(generator.generate(r));
  }
  DecodeLoop loop(*decoder, {.bucket = 4, .max_steps = 16});
  loop.warm_up();
  for (DecodeMode mode : {DecodeMode::kWhileLoop, DecodeMode::kPerStepGraphs}) {
    SCOPED_TRACE(decode_mode_name(mode));
    std::vector<std::vector<int64_t>> tokens = start_rows(*decoder, loop, requests);
    std::vector<int64_t> streamed_steps;
    DecodeRun run = loop.run(16, mode, [&](int64_t step, const std::vector<int64_t>& row_tokens) {
      streamed_steps.push_back(step);
      EXPECT_EQ(row_tokens.size(), 4u);
    });
    collect(run, tokens);
    EXPECT_EQ(tokens, expected) << "weights seed " << kWeightsSeed;
    // The longest request (12 tokens, 1 from prefill) took 11 steps; then every row had stopped.
    EXPECT_EQ(run.steps, 11);
    EXPECT_EQ(streamed_steps.size(), 11u);
    for (size_t step = 0; step < streamed_steps.size(); ++step) {
      EXPECT_EQ(streamed_steps[step], static_cast<int64_t>(step));
    }
    for (int64_t row = 0; row < 4; ++row) {
      EXPECT_FALSE(loop.running(row));
      EXPECT_EQ(loop.finish(row), RowFinish::kLength);
    }
  }
}

// Note [Running requests move to low slots] on the device: two short requests
// in slots 0 and 1 end, the long one in slot 2 moves to slot 0 (its cache
// copied on the device) and keeps the tokens it gets without moving.
TEST_P(DecodeLoopTest, RequestsMovedToLowSlotsKeepTheirTokens) {
  auto decoder = tiny_decoder();
  SamplingParams warm{.temperature = 0.7, .top_k = 0, .top_p = 1, .seed = 6};
  const std::vector<GenerationRequest> requests = {
      generation_request({1, 2, 3}, 2), generation_request({7, 8}, 3),
      generation_request({90, 3, 3, 12, 55}, 10, warm)};
  auto run_all = [&](Generator& generator) {
    std::vector<RequestId> ids;
    for (const GenerationRequest& request : requests) ids.push_back(generator.submit(request));
    while (!generator.idle()) generator.step();
    std::vector<std::vector<int64_t>> tokens;
    for (RequestId id : ids) tokens.push_back(generator.result(id).tokens);
    return tokens;
  };
  Generator kept(*decoder, {.loop_steps = 4, .compact_slots = false});
  Generator moved(*decoder, {.loop_steps = 4, .compact_slots = true});
  EXPECT_EQ(run_all(moved), run_all(kept)) << "weights seed " << kWeightsSeed;
  EXPECT_EQ(moved.stats().slot_moves, 1);
  EXPECT_GT(moved.stats().steps_per_bucket.count(1), 0u);
  EXPECT_EQ(kept.stats().steps_per_bucket.count(1), 0u);
}

TEST_P(DecodeLoopTest, RunsInChunksContinueWhereTheLastStopped) {
  auto decoder = tiny_decoder(Architecture::kGpt2);
  std::vector<GenerationRequest> requests = {
      generation_request({5, 6, 7}, 10),
      generation_request({8}, 8, {.temperature = 0.8, .seed = 3})};
  std::vector<std::vector<int64_t>> expected;
  {
    Generator generator(*decoder);
    for (const GenerationRequest& r : requests) expected.push_back(generator.generate(r));
  }
  DecodeLoop loop(*decoder, {.bucket = 2, .max_steps = 3});
  std::vector<std::vector<int64_t>> tokens = start_rows(*decoder, loop, requests);
  int launches = 0;
  while (loop.running(0) || loop.running(1)) {
    DecodeRun run =
        loop.run(3, launches % 2 == 0 ? DecodeMode::kWhileLoop : DecodeMode::kPerStepGraphs);
    EXPECT_LE(run.steps, 3);
    collect(run, tokens);
    ASSERT_LT(++launches, 10);
  }
  EXPECT_EQ(tokens, expected);
  EXPECT_EQ(launches, 3);  // 9 steps for the 10-token request
}

// Note [Steps per WHILE iteration]: K copies of the step per WHILE iteration
// give the tokens of K = 1, where a launch's budget (5, not a multiple of K)
// or the last row's stop falls within an iteration, and the next launch (or a
// per-step run) continues from where the last one stopped.
TEST_P(DecodeLoopTest, StepsPerIterationGiveTheSameTokens) {
  auto decoder = tiny_decoder();
  std::vector<GenerationRequest> requests = mixed_requests();
  std::vector<std::vector<int64_t>> expected;
  {
    Generator generator(*decoder);
    for (const GenerationRequest& r : requests) expected.push_back(generator.generate(r));
  }
  for (int64_t copies : {2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << copies << " steps per iteration");
    DecodeLoop loop(*decoder, {.bucket = 4, .max_steps = 5, .steps_per_iteration = copies});
    std::vector<std::vector<int64_t>> tokens = start_rows(*decoder, loop, requests);
    int launches = 0;
    int64_t steps = 0;
    while (loop.running(0) || loop.running(1) || loop.running(2) || loop.running(3)) {
      const DecodeMode mode = launches == 1 ? DecodeMode::kPerStepGraphs : DecodeMode::kWhileLoop;
      int64_t streamed = 0;
      DecodeRun run = loop.run(
          5, mode, [&](int64_t step, const std::vector<int64_t>&) { EXPECT_EQ(step, streamed++); });
      EXPECT_EQ(run.steps, streamed);
      EXPECT_LE(run.steps, 5);
      steps += run.steps;
      collect(run, tokens);
      ASSERT_LT(++launches, 10);
    }
    EXPECT_EQ(tokens, expected) << "weights seed " << kWeightsSeed;
    EXPECT_EQ(steps, 11);  // the longest request's 11 decode steps, none more
    EXPECT_EQ(launches, 3);
  }
  EXPECT_THROW((void)DecodeLoop(*decoder, {.bucket = 4, .steps_per_iteration = 0}), Error);
}

// The tokens prompt {3, 1, 4, 1, 5} generates freely (8), and the index of a
// token the run meets after its first (prefill) token, to stop it with.
std::pair<std::vector<int64_t>, size_t> free_run_and_eos(Decoder& decoder) {
  Generator generator(decoder);
  std::vector<int64_t> free_run = generator.generate(generation_request({3, 1, 4, 1, 5}, 8));
  size_t eos_index = 2;
  while (eos_index + 1 < free_run.size() && free_run[eos_index] == free_run[0]) ++eos_index;
  return {free_run, eos_index};
}

TEST_P(DecodeLoopTest, StopsARowAtEosOnTheDeviceWhileOthersRun) {
  auto decoder = tiny_decoder();
  const auto [free_run, eos_index] = free_run_and_eos(*decoder);
  ASSERT_NE(free_run[eos_index], free_run[0]) << "weights seed " << kWeightsSeed;
  GenerationRequest stopping = generation_request({3, 1, 4, 1, 5}, 8);
  stopping.eos_token_ids = {free_run[eos_index]};
  const size_t first =
      std::find(free_run.begin() + 1, free_run.end(), free_run[eos_index]) - free_run.begin();
  DecodeLoop loop(*decoder, {.bucket = 2, .max_steps = 16});
  std::vector<std::vector<int64_t>> tokens =
      start_rows(*decoder, loop, {stopping, generation_request({3, 1, 4, 1, 5}, 8)});
  collect(loop.run(16, DecodeMode::kWhileLoop), tokens);
  EXPECT_EQ(tokens[0], std::vector<int64_t>(free_run.begin(), free_run.begin() + first + 1));
  EXPECT_EQ(tokens[1], free_run);
  EXPECT_EQ(loop.finish(0), RowFinish::kEos);
  EXPECT_EQ(loop.finish(1), RowFinish::kLength);
}

// Note [Every EOS token stops a row]: the row names three EOS tokens, the
// free run meets only the second, and the row stops there in both modes.
TEST_P(DecodeLoopTest, AnyOfSeveralEosTokensStopsTheRow) {
  auto decoder = tiny_decoder();
  const auto [free_run, eos_index] = free_run_and_eos(*decoder);
  ASSERT_NE(free_run[eos_index], free_run[0]) << "weights seed " << kWeightsSeed;
  const std::vector<int64_t> unseen = testing::tokens_not_in(free_run, 2);
  const size_t first =
      std::find(free_run.begin() + 1, free_run.end(), free_run[eos_index]) - free_run.begin();
  for (DecodeMode mode : {DecodeMode::kWhileLoop, DecodeMode::kPerStepGraphs}) {
    SCOPED_TRACE(decode_mode_name(mode));
    GenerationRequest stopping = generation_request({3, 1, 4, 1, 5}, 8);
    stopping.eos_token_ids = {unseen[0], free_run[eos_index], unseen[1]};
    GenerationRequest unseen_only = generation_request({3, 1, 4, 1, 5}, 8);
    unseen_only.eos_token_ids = unseen;
    DecodeLoop loop(*decoder, {.bucket = 2, .max_steps = 16});
    std::vector<std::vector<int64_t>> tokens = start_rows(*decoder, loop, {stopping, unseen_only});
    collect(loop.run(16, mode), tokens);
    EXPECT_EQ(tokens[0], std::vector<int64_t>(free_run.begin(), free_run.begin() + first + 1));
    EXPECT_EQ(tokens[1], free_run);
    EXPECT_EQ(loop.finish(0), RowFinish::kEos);
    EXPECT_EQ(loop.finish(1), RowFinish::kLength);
  }
  GenerationRequest too_many = generation_request({3, 1, 4, 1, 5}, 8);
  too_many.eos_token_ids.assign(kMaxEosTokens + 1, 7);
  DecodeLoop loop(*decoder, {.bucket = 2, .max_steps = 16});
  EXPECT_THROW(start_rows(*decoder, loop, {too_many}), Error);
}

TEST_P(DecodeLoopTest, DeviceSamplingMatchesTheHostReference) {
  GROVE_SEEDED_RNG(rng);
  for (int64_t vocab : {7, 300, 1000, 32000}) {
    SCOPED_TRACE(::testing::Message() << "vocab " << vocab);
    const int64_t rows = 6;
    std::vector<float> logits =
        ::grove::testing::random_floats(rng, static_cast<size_t>(rows * vocab), -6.0f, 6.0f);
    logits[3] = logits[5];  // a tie
    // Row 0 (greedy): the largest logit twice; the lower index wins, also
    // where a later thread of the kernel reads it (Note [Greedy token on the device]).
    const int64_t late = vocab > 256 ? 256 : vocab - 1;
    logits[static_cast<size_t>(late)] = 7.0f;
    logits[5] = 7.0f;
    std::vector<SamplingParams> params = {
        {},
        {.temperature = 1, .seed = 1},
        {.temperature = 0.7, .top_k = 5, .seed = 2},
        {.temperature = 1.5, .top_p = 0.6, .seed = 3},
        {.temperature = 0.9, .top_k = 40, .top_p = 0.9, .seed = 4},
        {.temperature = 2, .top_k = 1, .seed = 5}};
    std::vector<int64_t> state(static_cast<size_t>(rows * layout::kRowFields), 0);
    std::vector<int64_t> positions = {3, 4, 5, 6, 7, -1};
    for (int64_t row = 0; row < rows; ++row) {
      int64_t* s = state.data() + row * layout::kRowFields;
      s[layout::kDraws] = 2 + row;
      s[layout::kRemaining] = row == 2 ? 1 : 10;
      for (int64_t slot = 0; slot < layout::kEosSlots; ++slot) s[layout::kEos + slot] = -1;
      s[layout::kSeed] = static_cast<int64_t>(params[static_cast<size_t>(row)].seed);
      s[layout::kTopK] = params[static_cast<size_t>(row)].top_k;
      double temperature = params[static_cast<size_t>(row)].temperature;
      double top_p = params[static_cast<size_t>(row)].top_p;
      std::memcpy(&s[layout::kTemperatureBits], &temperature, sizeof(double));
      std::memcpy(&s[layout::kTopPBits], &top_p, sizeof(double));
    }
    // Note [Greedy token over several blocks]: one block a row, and several (more
    // than vocab 7 has elements), with one partials tensor (its counters reset each launch).
    Tensor partials = Tensor::from_vector(std::vector<int64_t>(sample_partials_size(rows), 0),
                                          {sample_partials_size(rows)}, device());
    for (const char* parts : {"1", "4", "33"}) {
      SCOPED_TRACE(::testing::Message() << "GROVE_SAMPLE_PARTS " << parts);
      ::grove::testing::ScopedEnv split("GROVE_SAMPLE_PARTS", parts);
      runtime::DeviceContext& context = runtime::device_context(device());
      Tensor logits_tensor = Tensor::from_vector(logits, {rows, vocab}, device());
      Tensor ids = Tensor::from_vector(std::vector<int64_t>(rows, 0), {rows}, device());
      Tensor positions_tensor = Tensor::from_vector(positions, {rows}, device());
      Tensor state_tensor = Tensor::from_vector(state, {rows, layout::kRowFields}, device());
      Tensor loop_state = Tensor::from_vector(std::vector<int64_t>{0, 1}, {2}, device());
      runtime::PinnedHostBuffer streamed(device(), sizeof(int64_t) * rows);
      auto* streamed_tokens = reinterpret_cast<int64_t*>(streamed.data());
      launch_sample(logits_tensor, ids, positions_tensor, state_tensor, 32, streamed_tokens,
                    loop_state, &partials);
      context.platform().synchronize_stream(context.current_stream());
      std::vector<int64_t> device_ids = ids.to_vector<int64_t>();
      std::vector<int64_t> new_positions = positions_tensor.to_vector<int64_t>();
      std::vector<int64_t> new_state = state_tensor.to_vector<int64_t>();
      for (int64_t row = 0; row < rows - 1; ++row) {
        SCOPED_TRACE(::testing::Message() << "row " << row);
        const std::vector<float> row_logits(logits.begin() + row * vocab,
                                            logits.begin() + (row + 1) * vocab);
        const int64_t expected = sample_token(row_logits, params[static_cast<size_t>(row)],
                                              static_cast<uint64_t>(2 + row));
        EXPECT_EQ(device_ids[static_cast<size_t>(row)], expected);
        EXPECT_EQ(streamed_tokens[row], expected);
        const int64_t* s = new_state.data() + row * layout::kRowFields;
        EXPECT_EQ(s[layout::kDraws], 3 + row);
        // Row 2 had one token left: it stops, its position becomes -1.
        EXPECT_EQ(new_positions[static_cast<size_t>(row)], row == 2 ? -1 : positions[row] + 1);
        EXPECT_EQ(s[layout::kFinish], row == 2 ? layout::kFinishedLength : layout::kRunning);
      }

      EXPECT_EQ(streamed_tokens[rows - 1], -1);  // the padding row
      EXPECT_EQ(new_positions[rows - 1], -1);
    }
  }
}

TEST_P(DecodeLoopTest, DecodeWritesOnlyEachRowsPosition) {
  auto decoder = tiny_decoder(Architecture::kLlama, runtime::DType::kBF16);
  decoder->prefill(0, std::vector<int64_t>{1, 2, 3, 4});
  decoder->prefill(2, std::vector<int64_t>{9, 8});
  std::vector<Tensor> caches = decoder->state().cache_tensors();
  std::vector<std::vector<uint16_t>> before;
  for (const Tensor& cache : caches) before.push_back(cache.to_vector<uint16_t>());
  decoder->decode({{.slot = 0, .token = 5, .position = 4}, {.slot = 2, .token = 7, .position = 2}});
  const DecoderConfig& config = decoder->config();
  const int64_t length = decoder->state().cache().max_seq_len;
  const int64_t d = config.head_dim();
  for (size_t c = 0; c < caches.size(); ++c) {
    std::vector<uint16_t> after = caches[c].to_vector<uint16_t>();
    int64_t changed_elsewhere = 0, changed_here = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(after.size()); ++i) {
      const int64_t slot = i / (config.num_kv_heads * length * d);
      const int64_t position = (i / d) % length;
      const bool target = (slot == 0 && position == 4) || (slot == 2 && position == 2);
      if (after[static_cast<size_t>(i)] != before[c][static_cast<size_t>(i)]) {
        (target ? changed_here : changed_elsewhere) += 1;
      }
    }
    EXPECT_EQ(changed_elsewhere, 0) << "cache " << c;
    EXPECT_GT(changed_here, 0) << "cache " << c;
  }
}

TEST_P(DecodeLoopTest, BadRowsAndRunsAreClearErrors) {
  auto decoder = tiny_decoder();
  EXPECT_THROW((void)DecodeLoop(*decoder, {.bucket = 3}), Error);  // not a bucket
  DecodeLoop loop(*decoder, {.bucket = 2, .max_steps = 4});
  EXPECT_THROW(loop.set_row(2, {}), Error);
  EXPECT_THROW(loop.set_row(0, {.token = 1, .position = 40}), Error);  // beyond max_seq_len
  EXPECT_THROW(loop.set_row(0, {.token = 1000}), Error);               // outside the vocabulary
  EXPECT_THROW(loop.set_row(0, {.sampling = {.top_p = 0}}), Error);
  EXPECT_THROW(loop.run(5, DecodeMode::kWhileLoop), Error);  // beyond max_steps
  // No row runs: no step, no launch.
  EXPECT_EQ(loop.run(4, DecodeMode::kWhileLoop).steps, 0);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(DecodeLoopTest);

}  // namespace
}  // namespace grove::serving::llm
