// The decoder's prefill and decode programs on sim: decode equals a
// full-sequence recompute, every bucket records once and then replays, and the
// KV cache is written in place by the graphs (Note [KV cache in static
// buffers], Note [Decode buckets share one pool]).
#include "serving/llm/decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <span>

#include "compiler/backends/backend_stats_json.h"
#include "runtime/device.h"
#include "tests/serving/llm/llm_test_util.h"

namespace grove::serving::llm {
namespace {

using runtime::DType;
using testing::argmax;
using testing::fill_random_weights;
using testing::tiny_config;

constexpr uint64_t kSeed = 38;

std::unique_ptr<Decoder> tiny_decoder(Architecture architecture, DType dtype,
                                      const std::string& backend, bool fused_attention = true,
                                      bool chunked_prefill = false) {
  DecoderOptions options;
  options.fused_attention = fused_attention;
  options.chunked_prefill = chunked_prefill;
  options.backend = backend;
  options.device = runtime::kSimDevice;
  options.max_seq_len = 32;
  options.batch_buckets = {1, 2, 4};
  options.prompt_buckets = {8, 16, 32};
  auto decoder = std::make_unique<Decoder>(tiny_config(architecture, dtype), options);
  fill_random_weights(decoder->state(), kSeed);
  return decoder;
}

nlohmann::json tree_counters(const Decoder& decoder) {
  return grove::compiler::backends::stats_json(decoder.backend_stats()).at("tree");
}

float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

struct Case {
  Architecture architecture;
  DType dtype;
  bool fused_attention = true;  // Note [Decode attention kernel] (LLaMA)
};

class DecoderRecompute : public ::testing::TestWithParam<Case> {};

// Greedy decode through the cache gives, at every step, the token (and nearly
// the logits) of running the whole sequence so far through a fresh prefill.
TEST_P(DecoderRecompute, GreedyDecodeEqualsFullSequenceRecompute) {
  const Case c = GetParam();
  auto decoder = tiny_decoder(c.architecture, c.dtype, "cudagraphs", c.fused_attention);
  decoder->warm_up();
  std::vector<int64_t> sequence = {5, 17, 3, 88, 41};
  std::vector<float> logits = decoder->prefill(0, sequence);
  // bf16: the fused attention rounds as prefill's attention does (equal
  // logits on sim); the unfused ops round their own partial products and
  // sums (0.16 off measured), a comparison mode only.
  const float tolerance = c.dtype == DType::kF32 ? 2e-4f : (c.fused_attention ? 0.15f : 0.25f);
  for (int step = 0; step < 12; ++step) {
    int64_t next = argmax(logits);
    std::vector<float> recomputed = decoder->prefill(1, sequence);  // slot 1: a scratch slot
    EXPECT_LE(max_abs_difference(logits, recomputed), tolerance)
        << "step " << step << " seed " << kSeed;
    if (c.dtype == DType::kF32 || testing::top_margin(recomputed) > 2 * tolerance) {
      EXPECT_EQ(next, argmax(recomputed)) << "step " << step << " seed " << kSeed;
    }
    sequence.push_back(next);
    logits = decoder->decode(
        {{.slot = 0, .token = next, .position = static_cast<int64_t>(sequence.size()) - 1}})[0];
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, DecoderRecompute,
                         ::testing::Values(Case{Architecture::kLlama, DType::kF32},
                                           Case{Architecture::kLlama, DType::kF32, false},
                                           Case{Architecture::kGpt2, DType::kF32},
                                           Case{Architecture::kLlama, DType::kBF16},
                                           Case{Architecture::kLlama, DType::kBF16, false},
                                           Case{Architecture::kGpt2, DType::kBF16}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(architecture_name(info.param.architecture)) + "_" +
                                  runtime::dtype_name(info.param.dtype) +
                                  (info.param.fused_attention ? "" : "_unfused");
                         });

TEST(DecoderGraphs, EachBucketRecordsOnceThenReplays) {
  auto decoder = tiny_decoder(Architecture::kLlama, DType::kF32, "cudagraphs");
  decoder->warm_up();
  nlohmann::json warm = tree_counters(*decoder);
  const int64_t buckets =
      static_cast<int64_t>(decoder->batch_buckets().size() + decoder->prompt_buckets().size());
  EXPECT_EQ(warm.at("recordings").get<int64_t>(), buckets) << warm.dump();
  // Two requests in slots 0 and 3 (bucket 4), then slot 0 alone (bucket 1).
  std::vector<int64_t> a = {1, 2, 3};
  std::vector<int64_t> b = {9, 8, 7, 6, 5, 4, 3, 2, 1, 60};
  int64_t token_a = argmax(decoder->prefill(0, a));
  int64_t token_b = argmax(decoder->prefill(3, b));
  for (int step = 0; step < 4; ++step) {
    auto out = decoder->decode({{0, token_a, 3 + step}, {3, token_b, 10 + step}});
    token_a = argmax(out[0]);
    token_b = argmax(out[1]);
  }
  for (int step = 0; step < 3; ++step)
    token_a = argmax(decoder->decode({{0, token_a, 7 + step}})[0]);
  nlohmann::json after = tree_counters(*decoder);
  EXPECT_EQ(after.at("recordings"), warm.at("recordings")) << after.dump();
  EXPECT_EQ(after.at("rerecords"), warm.at("rerecords")) << after.dump();
  EXPECT_EQ(after.at("eager_calls").get<int64_t>(), 0) << after.dump();
  EXPECT_EQ(after.at("replays").get<int64_t>() - warm.at("replays").get<int64_t>(), 2 + 4 + 3)
      << after.dump();
}

TEST(DecoderGraphs, DecodeWritesTheCacheInPlaceWithoutCopies) {
  auto decoder = tiny_decoder(Architecture::kLlama, DType::kF32, "cudagraphs");
  decoder->warm_up();
  const runtime::Tensor& keys = decoder->state().tensor(key_cache_name(1));
  void* address = keys.data_ptr();
  nlohmann::json warm = tree_counters(*decoder);
  std::vector<int64_t> prompt = {4, 4, 2};
  int64_t token = argmax(decoder->prefill(2, prompt));
  for (int step = 0; step < 3; ++step) token = argmax(decoder->decode({{2, token, 3 + step}})[0]);
  EXPECT_EQ(keys.data_ptr(), address);
  // Slot 2 holds keys at positions 0..5 and zeros after; other slots stay zero.
  const int64_t t = decoder->state().cache().max_seq_len;
  const int64_t row = decoder->config().num_kv_heads * t * decoder->config().head_dim();
  std::vector<float> all = keys.to_vector<float>();
  for (int64_t slot = 0; slot < 4; ++slot) {
    for (int64_t position = 0; position < t; ++position) {
      float first = all[static_cast<size_t>(slot * row + position * decoder->config().head_dim())];
      if (slot == 2 && position < 6) {
        EXPECT_NE(first, 0.0f) << "slot " << slot << " position " << position;
      } else {
        EXPECT_EQ(first, 0.0f) << "slot " << slot << " position " << position;
      }
    }
  }
  nlohmann::json after = tree_counters(*decoder);
  for (const char* counter : {"input_copy_backs", "copy_back_inputs", "fallback_calls"}) {
    EXPECT_EQ(after.at(counter), warm.at(counter)) << counter << ": " << after.dump();
  }
  // Only the step's token ids and positions (and the prefill's three inputs) are copied.
  EXPECT_LE(after.at("input_copies").get<int64_t>() - warm.at("input_copies").get<int64_t>(),
            3 * 2 + 3)
      << after.dump();
}

TEST(DecoderGraphs, WarmUpLeavesTheCacheUntouched) {
  auto decoder = tiny_decoder(Architecture::kGpt2, DType::kF32, "cudagraphs");
  decoder->warm_up();
  for (int64_t layer = 0; layer < decoder->config().num_layers; ++layer) {
    for (const std::string& name : {key_cache_name(layer), value_cache_name(layer)}) {
      for (float value : decoder->state().tensor(name).to_vector<float>()) {
        ASSERT_EQ(value, 0.0f) << name;
      }
    }
  }
}

// Note [Decode attention kernel]: the one-kernel attention gives the unfused
// ops' logits (f32: within rounding) for rows at different positions, with
// a padding row in the bucket (3 rows run as bucket 4).
TEST(DecoderGraphs, FusedAttentionMatchesTheUnfusedOps) {
  auto fused = tiny_decoder(Architecture::kLlama, DType::kF32, "cudagraphs", true);
  auto unfused = tiny_decoder(Architecture::kLlama, DType::kF32, "cudagraphs", false);
  ASSERT_TRUE(decode_attention_fuses(fused->config(), fused->state().cache()));
  const std::vector<std::vector<int64_t>> prompts = {{4, 8, 15}, {16, 23, 42, 7, 1}, {9}};
  std::vector<DecodeRow> rows;
  for (int64_t slot = 0; slot < 3; ++slot) {
    const auto& prompt = prompts[static_cast<size_t>(slot)];
    std::vector<float> a = fused->prefill(slot, prompt);
    ASSERT_EQ(a, unfused->prefill(slot, prompt)) << "prefill runs the same program";
    rows.push_back({.slot = slot, .token = argmax(a), .position = int64_t(prompt.size())});
  }
  for (int step = 0; step < 6; ++step) {
    std::vector<std::vector<float>> a = fused->decode(rows);
    std::vector<std::vector<float>> b = unfused->decode(rows);
    for (size_t row = 0; row < rows.size(); ++row) {
      EXPECT_LE(max_abs_difference(a[row], b[row]), 1e-4f)
          << "step " << step << " row " << row << " seed " << kSeed;
      rows[row].token = argmax(b[row]);
      ++rows[row].position;
    }
  }
}

// The graphs replay exactly what the eager programs compute.
TEST(DecoderGraphs, CudagraphsEqualEagerBitwise) {
  auto eager = tiny_decoder(Architecture::kLlama, DType::kF32, "eager");
  auto graphs = tiny_decoder(Architecture::kLlama, DType::kF32, "cudagraphs");
  graphs->warm_up();
  std::vector<int64_t> prompt = {10, 20, 30, 40};
  std::vector<float> a = eager->prefill(1, prompt);
  std::vector<float> b = graphs->prefill(1, prompt);
  EXPECT_EQ(a, b);
  int64_t token = argmax(a);
  for (int step = 0; step < 4; ++step) {
    a = eager->decode({{1, token, 4 + step}})[0];
    b = graphs->decode({{1, token, 4 + step}})[0];
    ASSERT_EQ(a, b) << "step " << step;
    token = argmax(a);
  }
}

class DecoderChunks : public ::testing::TestWithParam<Case> {};

// Note [Chunked prefill], Note [Prefill cache writes]: a prompt prefilled in
// chunks (5, 5 and 3 tokens: the first an ordinary prefill, the others chunk
// programs attending over the slot's earlier positions) gives the whole
// prompt's last logits, writes the same keys and values into its slot (zeros
// after them), and decodes on to the same tokens.
TEST_P(DecoderChunks, ChunkedPrefillWritesTheCacheOfTheWholePrompt) {
  const Case c = GetParam();
  auto decoder = tiny_decoder(c.architecture, c.dtype, "cudagraphs", true, true);
  decoder->warm_up();
  nlohmann::json warm = tree_counters(*decoder);
  const std::vector<int64_t> prompt = {5, 17, 3, 88, 41, 7, 7, 60, 2, 19, 33, 71, 8};
  const float tolerance = c.dtype == DType::kF32 ? 2e-4f : 0.15f;
  std::vector<float> whole = decoder->prefill(0, prompt);
  std::span<const int64_t> all(prompt);
  decoder->prefill(1, all.subspan(0, 5));
  decoder->prefill_chunk(1, all.subspan(5, 5), 5);
  std::vector<float> chunked = decoder->prefill_chunk(1, all.subspan(10), 10);
  EXPECT_LE(max_abs_difference(whole, chunked), tolerance) << "seed " << kSeed;
  const int64_t t = decoder->state().cache().max_seq_len;
  const int64_t d = decoder->config().head_dim();
  const int64_t kv_heads = decoder->config().num_kv_heads;
  for (const runtime::Tensor& cache : decoder->state().cache_tensors()) {
    std::vector<double> values = cache.to_doubles();
    for (int64_t head = 0; head < kv_heads; ++head) {
      for (int64_t position = 0; position < t; ++position) {
        for (int64_t j = 0; j < d; ++j) {
          auto at = [&](int64_t slot) {
            return values[static_cast<size_t>(((slot * kv_heads + head) * t + position) * d + j)];
          };
          if (position < static_cast<int64_t>(prompt.size())) {
            ASSERT_NEAR(at(0), at(1), tolerance) << "head " << head << " position " << position;
          } else {
            ASSERT_EQ(at(1), 0.0) << "head " << head << " position " << position;
          }
        }
      }
    }
  }
  std::vector<DecodeRow> rows = {{.slot = 0, .token = argmax(whole), .position = 13},
                                 {.slot = 1, .token = argmax(whole), .position = 13}};
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<float>> logits = decoder->decode(rows);
    EXPECT_LE(max_abs_difference(logits[0], logits[1]), tolerance) << "step " << step;
    if (c.dtype == DType::kF32 || testing::top_margin(logits[0]) > 2 * tolerance) {
      EXPECT_EQ(argmax(logits[0]), argmax(logits[1])) << "step " << step << " seed " << kSeed;
    }
    for (DecodeRow& row : rows) {
      row.token = argmax(logits[0]);
      ++row.position;
    }
  }
  // Every chunk bucket was recorded by warm_up: serving records nothing.
  EXPECT_EQ(tree_counters(*decoder).at("recordings"), warm.at("recordings"));
}

// A chunk that does not fit the cache, or an empty one, is refused.
TEST(DecoderChunksInput, RefusesChunksOutsideTheCache) {
  auto decoder = tiny_decoder(Architecture::kLlama, DType::kF32, "cudagraphs", true, true);
  const std::vector<int64_t> tokens = {1, 2, 3, 4};
  EXPECT_THROW(decoder->prefill_chunk(0, tokens, 30), Error);  // 30 + 4 > 32 positions
  EXPECT_THROW(decoder->prefill_chunk(0, {}, 4), Error);
  EXPECT_THROW(decoder->prefill_chunk(0, tokens, -1), Error);
  EXPECT_THROW(decoder->prefill_chunk(7, tokens, 4), Error);  // slots 0..3
  EXPECT_NO_THROW(decoder->prefill_chunk(0, tokens, 28));
}

INSTANTIATE_TEST_SUITE_P(Architectures, DecoderChunks,
                         ::testing::Values(Case{Architecture::kLlama, DType::kF32},
                                           Case{Architecture::kGpt2, DType::kF32},
                                           Case{Architecture::kLlama, DType::kBF16}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(architecture_name(info.param.architecture)) + "_" +
                                  runtime::dtype_name(info.param.dtype);
                         });

}  // namespace
}  // namespace grove::serving::llm
