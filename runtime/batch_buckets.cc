#include "runtime/batch_buckets.h"

#include <algorithm>

#include "runtime/error.h"

namespace grove::runtime {
namespace {

std::string list_str(const std::vector<int64_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

}  // namespace

BatchBuckets::BatchBuckets(std::vector<int64_t> sizes, const std::string& what, int64_t max_rows)
    : sizes_(std::move(sizes)) {
  GROVE_CHECK_AS(ConfigError, !sizes_.empty(), what,
                 " is empty; give the batch sizes to compile, e.g. {1, 2, 4, 8, 16, 32, 64}");
  for (size_t i = 0; i < sizes_.size(); ++i) {
    GROVE_CHECK_AS(ConfigError, sizes_[i] >= 1 && sizes_[i] <= max_rows, what, " ",
                   list_str(sizes_), ": bucket ", sizes_[i], " is outside [1, ", max_rows, "]");
    GROVE_CHECK_AS(ConfigError, i == 0 || sizes_[i] > sizes_[i - 1], what, " ", list_str(sizes_),
                   " must be strictly increasing; sort them and drop duplicates");
  }
}

std::optional<size_t> bucket_index_for(const std::vector<int64_t>& sizes, int64_t rows) {
  auto found = std::lower_bound(sizes.begin(), sizes.end(), rows);
  if (found == sizes.end()) return std::nullopt;
  return static_cast<size_t>(found - sizes.begin());
}

std::optional<size_t> BatchBuckets::index_for(int64_t rows) const {
  return bucket_index_for(sizes_, rows);
}

int64_t BatchBuckets::bucket_for(int64_t rows) const {
  std::optional<size_t> index = index_for(rows);
  GROVE_CHECK(index.has_value(), "bucket_for: ", rows, " rows exceed the largest bucket ",
              largest());
  return sizes_[*index];
}

BucketPadding bucket_padding(int64_t rows, int64_t bucket_rows, size_t row_bytes) {
  BucketPadding padding;
  int64_t real_rows = std::min(rows, bucket_rows);
  padding.real_bytes = static_cast<size_t>(real_rows) * row_bytes;
  padding.padded_rows = bucket_rows - real_rows;
  padding.padding_bytes = static_cast<size_t>(padding.padded_rows) * row_bytes;
  return padding;
}

}  // namespace grove::runtime
