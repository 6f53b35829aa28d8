// Bucket planning (Note [Bucket planning]): the least padding for a trace's
// batch sizes, never more buckets, always the max batch, never worse than
// the powers of two; checked against brute force on small cases.
#include "serving/bucket_plan.h"

#include <gtest/gtest.h>

#include <random>

#include "runtime/error.h"

namespace grove::serving {
namespace {

// The least padding over every bucket set of at most `count` sizes ending at max_batch.
uint64_t brute_force(const std::map<int64_t, uint64_t>& seen, int64_t max_batch, size_t count) {
  uint64_t best = UINT64_MAX;
  for (uint64_t mask = 0; mask < (uint64_t{1} << (max_batch - 1)); ++mask) {
    std::vector<int64_t> buckets;
    for (int64_t size = 1; size < max_batch; ++size) {
      if (mask >> (size - 1) & 1) buckets.push_back(size);
    }
    buckets.push_back(max_batch);
    if (buckets.size() <= count) best = std::min(best, padded_rows(buckets, seen));
  }
  return best;
}

TEST(BucketPlan, SkewedTraceGetsBucketsWhereTheBatchesAre) {
  // Mostly 3-row and 12-row batches: powers of two pad each to 4 and 16.
  std::map<int64_t, uint64_t> seen{{1, 10}, {3, 500}, {12, 400}, {16, 20}};
  std::vector<int64_t> pow2 = power_of_two_buckets(16);
  EXPECT_EQ(pow2, (std::vector<int64_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(padded_rows(pow2, seen), 500u * 1 + 400u * 4);
  std::vector<int64_t> planned = plan_buckets(seen, 16, pow2.size());
  EXPECT_EQ(planned, (std::vector<int64_t>{1, 3, 12, 16}));
  EXPECT_EQ(padded_rows(planned, seen), 0u);
  // Fewer buckets than sizes: the rare sizes share.
  EXPECT_EQ(plan_buckets(seen, 16, 2), (std::vector<int64_t>{3, 16}));
}

TEST(BucketPlan, AlwaysEndsAtMaxBatchEvenWhenNoBatchWasThatLarge) {
  std::map<int64_t, uint64_t> seen{{2, 5}};
  EXPECT_EQ(plan_buckets(seen, 64, 3), (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(plan_buckets({}, 8, 4), (std::vector<int64_t>{8}));
  EXPECT_EQ(plan_buckets(seen, 64, 1), (std::vector<int64_t>{64}));
}

TEST(BucketPlan, BadInputsAreConfigErrors) {
  EXPECT_THROW(plan_buckets({{0, 1}}, 8, 2), ConfigError);
  EXPECT_THROW(plan_buckets({{9, 1}}, 8, 2), ConfigError);
  EXPECT_THROW(plan_buckets({{1, 1}}, 8, 0), ConfigError);
  EXPECT_THROW(padded_rows({1, 2}, {{3, 1}}), ConfigError);
}

TEST(BucketPlan, MatchesBruteForceOnSmallRandomTraces) {
  const uint32_t seed = 4242;
  std::mt19937 random(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t max_batch = 2 + static_cast<int64_t>(random() % 11);  // up to 12
    std::map<int64_t, uint64_t> seen;
    for (int i = 0; i < 1 + static_cast<int>(random() % 8); ++i) {
      seen[1 + static_cast<int64_t>(random() % static_cast<uint32_t>(max_batch))] +=
          1 + random() % 50;
    }
    const size_t count = 1 + random() % 5;
    std::vector<int64_t> planned = plan_buckets(seen, max_batch, count);
    ASSERT_LE(planned.size(), count) << "seed " << seed << " trial " << trial;
    ASSERT_EQ(planned.back(), max_batch);
    ASSERT_TRUE(std::is_sorted(planned.begin(), planned.end()));
    ASSERT_EQ(padded_rows(planned, seen), brute_force(seen, max_batch, count))
        << "seed " << seed << " trial " << trial;
  }
}

TEST(BucketPlan, NeverPadsMoreThanPowersOfTwoOnRandomTraces) {
  const uint32_t seed = 99;
  std::mt19937 random(seed);
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t max_batch = int64_t{1} << (1 + random() % 7);  // 2..128
    std::map<int64_t, uint64_t> seen;
    // Skewed: a few popular sizes and a thin tail.
    for (int i = 0; i < 200; ++i) {
      int64_t rows = random() % 4 ? 1 + static_cast<int64_t>(random() % 3) * (max_batch / 4)
                                  : 1 + static_cast<int64_t>(random() % max_batch);
      ++seen[std::min(rows, max_batch)];
    }
    std::vector<int64_t> pow2 = power_of_two_buckets(max_batch);
    std::vector<int64_t> planned = plan_buckets(seen, max_batch, pow2.size());
    EXPECT_LE(planned.size(), pow2.size());
    EXPECT_EQ(planned.back(), pow2.back());
    EXPECT_LE(padded_rows(planned, seen), padded_rows(pow2, seen))
        << "seed " << seed << " trial " << trial;
  }
}

}  // namespace
}  // namespace grove::serving
