// BatchBuckets are the few batch sizes a row-independent model is compiled
// or recorded for (Note [Shape buckets], shape_buckets.h): a batch of n rows
// runs in the smallest bucket that holds it, padded with zero rows. This is
// the one bucketing API; it knows nothing of the tree manager, so the server
// (one compiled model per bucket) and BucketedFunction (one recorded function
// per bucket) both pick buckets and pad through it.
//
//   BatchBuckets buckets({1, 2, 4, 8}, "ServerConfig::buckets");  // throws ConfigError
//   int64_t rows_run = buckets.bucket_for(3);                     // 4
//   BucketPadding pad = bucket_padding(3, rows_run, row_bytes);    // 3 rows, then 1 zero row
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace grove::runtime {

class BatchBuckets {
 public:
  // Throws ConfigError naming `what` (the field the sizes came from) when
  // `sizes` is empty, holds a size outside [1, max_rows], or is not strictly
  // increasing.
  BatchBuckets(std::vector<int64_t> sizes, const std::string& what,
               int64_t max_rows = std::numeric_limits<int64_t>::max());

  const std::vector<int64_t>& sizes() const { return sizes_; }
  size_t count() const { return sizes_.size(); }
  int64_t largest() const { return sizes_.back(); }
  // The position of the smallest bucket holding `rows`; nullopt when `rows`
  // is above the largest.
  std::optional<size_t> index_for(int64_t rows) const;
  // The smallest bucket holding `rows`; throws Error when `rows` is above the largest.
  int64_t bucket_for(int64_t rows) const;

 private:
  std::vector<int64_t> sizes_;
};

// The position in `sizes` (strictly increasing) of the smallest bucket holding
// `rows`; nullopt when `rows` is above the largest.
std::optional<size_t> bucket_index_for(const std::vector<int64_t>& sizes, int64_t rows);

// `rows` real rows of `row_bytes` each run in a bucket of `bucket_rows` rows
// (rows <= bucket_rows): the real rows' bytes come first, then the padding,
// which must be zeros (Note [Shape buckets]).
struct BucketPadding {
  size_t real_bytes = 0;
  size_t padding_bytes = 0;
  int64_t padded_rows = 0;
};
BucketPadding bucket_padding(int64_t rows, int64_t bucket_rows, size_t row_bytes);

}  // namespace grove::runtime
