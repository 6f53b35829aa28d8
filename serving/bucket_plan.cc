#include "serving/bucket_plan.h"

#include <algorithm>
#include <limits>

#include "runtime/error.h"

namespace grove::serving {

uint64_t padded_rows(const std::vector<int64_t>& buckets,
                     const std::map<int64_t, uint64_t>& batches_by_rows) {
  uint64_t padding = 0;
  auto bucket = buckets.begin();
  for (const auto& [rows, count] : batches_by_rows) {
    while (bucket != buckets.end() && *bucket < rows) ++bucket;
    GROVE_CHECK_AS(ConfigError, bucket != buckets.end(), "padded_rows: batches of ", rows,
                   " rows fit no bucket (largest ", buckets.empty() ? 0 : buckets.back(), ")");
    padding += count * static_cast<uint64_t>(*bucket - rows);
  }
  return padding;
}

std::vector<int64_t> plan_buckets(const std::map<int64_t, uint64_t>& batches_by_rows,
                                  int64_t max_batch, size_t count) {
  // Note [Bucket planning].
  GROVE_CHECK_AS(ConfigError, count >= 1, "plan_buckets: count is 0; a server needs a bucket");
  GROVE_CHECK_AS(ConfigError, max_batch >= 1, "plan_buckets: max_batch ", max_batch, " < 1");
  std::vector<int64_t> sizes;
  std::vector<uint64_t> counts;
  for (const auto& [rows, seen] : batches_by_rows) {
    GROVE_CHECK_AS(ConfigError, rows >= 1 && rows <= max_batch, "plan_buckets: batches of ", rows,
                   " rows are outside [1, ", max_batch, "]");
    if (seen == 0) continue;
    sizes.push_back(rows);
    counts.push_back(seen);
  }
  if (sizes.empty() || sizes.back() != max_batch) {
    sizes.push_back(max_batch);  // always a bucket, even if no batch was that large
    counts.push_back(0);
  }
  const size_t n = sizes.size();
  const size_t k = std::min(count, n);
  // cost(i, j): padding of sizes i..j (0-based, inclusive) all run in bucket sizes[j].
  // Prefix sums of counts and of count * rows make it O(1).
  std::vector<uint64_t> prefix_count(n + 1, 0), prefix_rows(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    prefix_count[i + 1] = prefix_count[i] + counts[i];
    prefix_rows[i + 1] = prefix_rows[i] + counts[i] * static_cast<uint64_t>(sizes[i]);
  }
  auto cost = [&](size_t i, size_t j) {
    const uint64_t batches = prefix_count[j + 1] - prefix_count[i];
    return batches * static_cast<uint64_t>(sizes[j]) - (prefix_rows[j + 1] - prefix_rows[i]);
  };
  constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
  // best[m][j]: least padding of sizes 0..j with m + 1 buckets, the last at j.
  std::vector<std::vector<uint64_t>> best(k, std::vector<uint64_t>(n, kNone));
  std::vector<std::vector<size_t>> previous(k, std::vector<size_t>(n, 0));
  for (size_t j = 0; j < n; ++j) best[0][j] = cost(0, j);
  for (size_t m = 1; m < k; ++m) {
    for (size_t j = m; j < n; ++j) {
      for (size_t p = m - 1; p < j; ++p) {
        if (best[m - 1][p] == kNone) continue;
        const uint64_t total = best[m - 1][p] + cost(p + 1, j);
        if (total < best[m][j]) {
          best[m][j] = total;
          previous[m][j] = p;
        }
      }
    }
  }
  size_t used = 0;  // fewest buckets reaching the least padding
  for (size_t m = 1; m < k; ++m) {
    if (best[m][n - 1] < best[used][n - 1]) used = m;
  }
  std::vector<int64_t> buckets;
  for (size_t m = used + 1, j = n - 1; m-- > 0;) {
    buckets.push_back(sizes[j]);
    if (m > 0) j = previous[m][j];
  }
  std::reverse(buckets.begin(), buckets.end());
  return buckets;
}

std::vector<int64_t> power_of_two_buckets(int64_t max_batch) {
  std::vector<int64_t> buckets;
  for (int64_t size = 1; size < max_batch; size *= 2) buckets.push_back(size);
  buckets.push_back(max_batch);
  return buckets;
}

}  // namespace grove::serving
