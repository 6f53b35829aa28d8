// Token sampling: greedy, top-k, top-p and seeded draws (Note [Sampling draws]).
#include "serving/llm/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "runtime/error.h"

namespace grove::serving::llm {
namespace {

const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 1.5f, 1.9f, 0.0f};

TEST(Sampler, GreedyIsArgmaxWithTheLowestIdOnTies) {
  EXPECT_EQ(sample_token(kLogits, {}, 0), 1);
  EXPECT_EQ(sample_token({1.0f, 3.0f, 3.0f}, {}, 7), 1);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  for (uint64_t draw = 0; draw < 50; ++draw) {
    EXPECT_EQ(sample_token(kLogits, {.temperature = 1, .top_k = 1, .seed = 3}, draw), 1);
    EXPECT_EQ(sample_token(kLogits, {.temperature = 1, .top_p = 0.01, .seed = 3}, draw), 1);
  }
}

// A value just out of range is named as sent, not rounded into the range
// ("top_p 1 must lie in (0, 1]" for 1.0000001 before).
TEST(Sampler, VerifyNamesTheValueAsSent) {
  try {
    SamplingParams{.top_p = 1.0000001}.verify();
    ADD_FAILURE() << "top_p 1.0000001 was taken";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("top_p 1.0000001 must lie in (0, 1]"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(SamplingParams{.temperature = -1e-300}.verify(), Error);
  SamplingParams{.temperature = 5e-324, .top_p = 5e-324}.verify();
}

TEST(Sampler, TopKKeepsOnlyTheKMostLikely) {
  for (uint64_t draw = 0; draw < 200; ++draw) {
    int64_t token = sample_token(kLogits, {.temperature = 2, .top_k = 3, .seed = 9}, draw);
    EXPECT_TRUE(token == 1 || token == 4 || token == 3) << token;
  }
}

TEST(Sampler, SameSeedAndDrawGiveTheSameTokenAndDrawsFollowTheSoftmax) {
  SamplingParams params{.temperature = 1, .seed = 1234};
  std::vector<int> counts(kLogits.size());
  const int draws = 20000;
  for (int draw = 0; draw < draws; ++draw) {
    int64_t token = sample_token(kLogits, params, static_cast<uint64_t>(draw));
    EXPECT_EQ(token, sample_token(kLogits, params, static_cast<uint64_t>(draw)));
    ++counts[static_cast<size_t>(token)];
  }
  double total = 0;
  for (float logit : kLogits) total += std::exp(logit);
  for (size_t i = 0; i < kLogits.size(); ++i) {
    double expected = std::exp(kLogits[i]) / total;
    EXPECT_NEAR(counts[i] / double(draws), expected, 0.015) << "token " << i << " seed 1234";
  }
}

TEST(Sampler, OtherSeedsGiveOtherSequences) {
  int differences = 0;
  for (uint64_t draw = 0; draw < 64; ++draw) {
    differences += sample_token(kLogits, {.temperature = 1, .seed = 1}, draw) !=
                   sample_token(kLogits, {.temperature = 1, .seed = 2}, draw);
  }
  EXPECT_GT(differences, 10);
}

}  // namespace
}  // namespace grove::serving::llm
