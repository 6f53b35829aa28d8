// Shape buckets (Note [Shape buckets]): a row-wise function called with batch
// sizes 1..64 in random order records once per bucket, pads and slices
// exactly, and keeps the pool at the largest bucket's size.
#include "cudagraph_trees/shape_buckets.h"

#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

using cudagraph_trees::BucketedFunction;
using cudagraph_trees::BucketSpec;

class TreeShapeBuckets : public TreeTest {};

constexpr int64_t kWidth = 256;

// Row-wise: out0 = 2x + 3x (an intermediate kept across kernels), out1 = 2x + w
// (w [n, d] is batched too), out2 = the static input s, passed through.
BucketSpec rowwise_spec(std::vector<int64_t> buckets, const CountedBody& counted) {
  BucketSpec bucket;
  bucket.function = spec("rowwise", counted.wrap([](const TensorList& in) {
    Tensor doubled = scale(in[0], 2.0f);
    Tensor five = add(doubled, scale(in[0], 3.0f));
    return TensorList{five, add(doubled, in[1]), in[2]};
  }),
                         /*static*/ {2});
  bucket.batched_inputs = {0, 1};
  bucket.batched_outputs = {0, 1};
  bucket.buckets = std::move(buckets);
  return bucket;
}

TEST_P(TreeShapeBuckets, RandomSizesRecordOncePerBucketWithExactResultsAndOnePoolSize) {
  GROVE_SEEDED_RNG(rng);
  const std::vector<int64_t> buckets = {1, 2, 4, 8, 16, 32, 64};

  // The largest bucket alone, in a manager of its own.
  size_t largest_alone = 0;
  size_t largest_alone_peak = 0;
  {
    TreeManager alone(device(), TreeConfig{});
    CountedBody counted;
    BucketedFunction only(alone, rowwise_spec({64}, counted));
    Tensor scalar = random_tensor(rng, {1});
    only({random_tensor(rng, {64, kWidth}), random_tensor(rng, {64, kWidth}), scalar});
    runtime::PoolStats stats = runtime::device_context(device()).allocator().stats(alone.pool());
    largest_alone = stats.reserved_bytes;
    largest_alone_peak = stats.peak_allocated_bytes;
    EXPECT_EQ(alone.counters().recordings, 1u);
    alone.shutdown();
  }
  ASSERT_GT(largest_alone, 0u);

  TreeManager& trees = make_manager();
  CountedBody counted;
  BucketedFunction rowwise(trees, rowwise_spec(buckets, counted));
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= 64; ++n) sizes.push_back(n);
  std::shuffle(sizes.begin(), sizes.end(), rng);
  Tensor scalar = random_tensor(rng, {1});
  for (int64_t n : sizes) {
    SCOPED_TRACE(n);
    Tensor x = random_tensor(rng, {n, kWidth});
    Tensor w = random_tensor(rng, {n, kWidth});
    TensorList out = rowwise({x, w, scalar});
    ASSERT_EQ(out[0].shape(), (runtime::Shape{n, kWidth}));
    ASSERT_EQ(out[1].shape(), (runtime::Shape{n, kWidth}));
    Floats xs = host(x);
    Floats five(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) five[i] = xs[i] * 2.0f + xs[i] * 3.0f;
    EXPECT_VALUES(out[0], five);
    EXPECT_VALUES(out[1], host_add(host_scale(xs, 2.0f), host(w)));
    EXPECT_VALUES(out[2], host(scalar));
  }
  trees.verify();
  EXPECT_EQ(trees.counters().recordings, buckets.size());
  EXPECT_EQ(trees.counters().warmups, buckets.size());
  EXPECT_EQ(trees.counters().replays, sizes.size());
  EXPECT_EQ(trees.counters().eager_calls, 0u);
  EXPECT_EQ(trees.counters().input_copies, 0u);  // staging buffers are static inputs
  EXPECT_EQ(counted.count(), static_cast<int>(2 * buckets.size()));
  for (size_t b = 0; b < buckets.size(); ++b) {
    EXPECT_EQ(trees.roots(rowwise.bucket_function(b)).size(), 1u) << "bucket " << buckets[b];
  }
  nlohmann::json stats = rowwise.stats();
  EXPECT_EQ(stats["calls_per_bucket"], (std::vector<uint64_t>{1, 1, 2, 4, 8, 16, 32}));
  size_t shared = pool_stats().reserved_bytes;
  EXPECT_LE(static_cast<double>(shared), 1.25 * static_cast<double>(largest_alone))
      << "bucket pool " << shared << " bytes vs " << largest_alone << " for the largest alone";
  EXPECT_LE(static_cast<double>(pool_stats().peak_allocated_bytes),
            1.25 * static_cast<double>(largest_alone_peak));
}

TEST_P(TreeShapeBuckets, SizesAboveTheLargestBucketRunEagerlyWithReason) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  CountedBody counted;
  BucketedFunction rowwise(trees, rowwise_spec({2, 4}, counted));
  Tensor scalar = random_tensor(rng, {1});
  Tensor x = random_tensor(rng, {5, 8});
  Tensor w = random_tensor(rng, {5, 8});
  TensorList out = rowwise({x, w, scalar});
  EXPECT_VALUES(out[1], host_add(host_scale(host(x), 2.0f), host(w)));
  EXPECT_EQ(rowwise.stats()["eager_calls"], 1u);
  EXPECT_EQ(trees.counters().recordings, 0u);
  EXPECT_NE(recent_log().find("batch size 5 is above the largest bucket (4)"), std::string::npos)
      << recent_log();
  // Other widths than the buckets were made for are rejected with what to do.
  rowwise({random_tensor(rng, {3, 8}), random_tensor(rng, {3, 8}), scalar});
  EXPECT_THROW(rowwise({random_tensor(rng, {3, 9}), random_tensor(rng, {3, 9}), scalar}),
               ShapeError);
}

TEST_P(TreeShapeBuckets, BadSpecsAreRejected) {
  TreeManager& trees = make_manager();
  CountedBody counted;
  EXPECT_THROW(BucketedFunction(trees, rowwise_spec({}, counted)), ConfigError);
  EXPECT_THROW(BucketedFunction(trees, rowwise_spec({4, 2}, counted)), ConfigError);
  BucketSpec mutated = rowwise_spec({2}, counted);
  mutated.function.mutated_input_indices = {0};
  EXPECT_THROW(BucketedFunction(trees, mutated), Error);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeShapeBuckets);

}  // namespace
}  // namespace grove::testing
