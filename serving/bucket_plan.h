// Choosing a server's batch buckets from the batch sizes its traffic makes,
// instead of the fixed powers of two: the sizes that waste the fewest padded
// rows, with no more buckets (so no more compiled models, params copies and
// recorded graphs) and the same largest bucket (so every batch still fits and
// the graph pool, sized by the largest recording, does not grow).
//
//   std::map<int64_t, uint64_t> seen = server.stats().batches_by_rows;
//   std::vector<int64_t> buckets = plan_buckets(seen, /*max_batch=*/16, /*count=*/5);
//   uint64_t waste = padded_rows(buckets, seen);
//
// Note [Bucket planning]
// With batches of r rows seen c(r) times and buckets b_1 < ... < b_k = max
// batch, a batch runs in the smallest bucket holding it, so the padding is
// sum over r of c(r) * (bucket(r) - r). An optimal set only holds sizes that
// batches had (lowering a bucket to the largest batch size it serves never adds
// padding) plus max_batch, so plan_buckets() runs a dynamic program over the
// distinct observed sizes: best[j][m] is the least padding of the j smallest
// sizes with m buckets, the last one at size j. Ties keep fewer buckets. Tests:
// BucketPlan.* in tests/serving/bucket_plan_test.cc, among them
// BucketPlan.NeverPadsMoreThanPowersOfTwoOnRandomTraces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace grove::serving {

// Padded rows `buckets` (increasing, largest >= every size seen) would add.
uint64_t padded_rows(const std::vector<int64_t>& buckets,
                     const std::map<int64_t, uint64_t>& batches_by_rows);

// At most `count` buckets (count >= 1), increasing, the largest = max_batch,
// minimising padded_rows() for `batches_by_rows` (sizes in [1, max_batch]).
// Throws ConfigError on a size outside [1, max_batch] or count 0.
std::vector<int64_t> plan_buckets(const std::map<int64_t, uint64_t>& batches_by_rows,
                                  int64_t max_batch, size_t count);

// The powers of two below max_batch, then max_batch (grove serve's default).
std::vector<int64_t> power_of_two_buckets(int64_t max_batch);

}  // namespace grove::serving
