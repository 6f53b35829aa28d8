// BatchBuckets, the one bucketing API (serving and BucketedFunction): checks
// the sizes naming their field, picks the smallest bucket that holds a batch,
// and splits a padded batch into real rows and zero rows.
#include "runtime/batch_buckets.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/error.h"

namespace grove::runtime {
namespace {

std::string error_of(std::vector<int64_t> sizes, int64_t max_rows = 64) {
  try {
    BatchBuckets buckets(std::move(sizes), "Config::buckets", max_rows);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(BatchBuckets, RejectsEmptyOutOfRangeAndUnorderedSizesNamingTheField) {
  EXPECT_NE(error_of({}).find("Config::buckets is empty"), std::string::npos);
  EXPECT_NE(error_of({0, 4}).find("bucket 0 is outside [1, 64]"), std::string::npos);
  EXPECT_NE(error_of({4, 128}).find("bucket 128 is outside [1, 64]"), std::string::npos);
  EXPECT_NE(error_of({4, 2}).find("[4, 2] must be strictly increasing"), std::string::npos);
  EXPECT_NE(error_of({2, 2}).find("strictly increasing"), std::string::npos);
  EXPECT_EQ(error_of({1, 2, 64}), "");
}

TEST(BatchBuckets, PicksTheSmallestBucketHoldingTheBatch) {
  BatchBuckets buckets({1, 4, 16}, "buckets");
  EXPECT_EQ(buckets.largest(), 16);
  EXPECT_EQ(buckets.bucket_for(1), 1);
  EXPECT_EQ(buckets.bucket_for(2), 4);
  EXPECT_EQ(buckets.bucket_for(4), 4);
  EXPECT_EQ(buckets.bucket_for(5), 16);
  EXPECT_EQ(buckets.bucket_for(16), 16);
  EXPECT_EQ(buckets.index_for(3), std::optional<size_t>(1));
  EXPECT_EQ(buckets.index_for(17), std::nullopt);
  EXPECT_THROW(buckets.bucket_for(17), Error);
  EXPECT_EQ(bucket_index_for({1, 4, 16}, 16), std::optional<size_t>(2));
}

TEST(BatchBuckets, PaddingPutsTheRealRowsFirstThenZeroRows) {
  BucketPadding padding = bucket_padding(3, 8, 12);
  EXPECT_EQ(padding.real_bytes, 36u);
  EXPECT_EQ(padding.padding_bytes, 60u);
  EXPECT_EQ(padding.padded_rows, 5);
  BucketPadding full = bucket_padding(8, 8, 12);
  EXPECT_EQ(full.real_bytes, 96u);
  EXPECT_EQ(full.padding_bytes, 0u);
  EXPECT_EQ(full.padded_rows, 0);
}

}  // namespace
}  // namespace grove::runtime
