#include "runtime/collectives/host_reduction.h"

#include <cstring>

namespace grove::runtime::collectives {
namespace {

template <typename Int>
void reduce_integers(const std::vector<const uint8_t*>& sources, uint8_t* destination,
                     int64_t count, ReduceOp op) {
  const auto ranks = static_cast<Int>(sources.size());
  for (int64_t i = 0; i < count; ++i) {
    Int total = 0;
    for (const uint8_t* source : sources) {
      Int v;
      std::memcpy(&v, source + i * sizeof(Int), sizeof(Int));
      total += v;
    }
    if (op == ReduceOp::kMean) {
      total /= ranks;
    }
    std::memcpy(destination + i * sizeof(Int), &total, sizeof(Int));
  }
}

}  // namespace

void reduce_in_rank_order(const std::vector<const uint8_t*>& sources, uint8_t* destination,
                          int64_t count, DType dtype, ReduceOp op) {
  if (dtype == DType::kI32) {
    return reduce_integers<int32_t>(sources, destination, count, op);
  }
  if (dtype == DType::kI64) {
    return reduce_integers<int64_t>(sources, destination, count, op);
  }
  const size_t size = dtype_size(dtype);
  const double ranks = static_cast<double>(sources.size());
  for (int64_t i = 0; i < count; ++i) {
    double total = 0;
    for (const uint8_t* source : sources) {
      total += load_element(source + i * size, dtype);
    }
    if (op == ReduceOp::kMean) {
      total /= ranks;
    }
    store_element(destination + i * size, dtype, total);
  }
}

void check_reducible(const std::vector<Buffer>& buffers, ReduceOp op) {
  for (const Buffer& buffer : buffers) {
    GROVE_CHECK_AS(DTypeError, buffer.dtype != DType::kBool, "all_reduce: bool buffers cannot be ",
                   reduce_op_name(op), "-reduced; cast to an integer dtype first");
  }
}

void check_same_layouts(const std::string& group, int rank, const std::vector<Buffer>& mine,
                        int other, const std::vector<Buffer>& theirs) {
  GROVE_CHECK_AS(CommunicationError, theirs.size() == mine.size(), "all_reduce of group '", group,
                 "': rank ", rank, " reduces ", mine.size(), " buffers but rank ", other,
                 " reduces ", theirs.size(), "; every rank must issue the same collectives");
  for (size_t b = 0; b < mine.size(); ++b) {
    GROVE_CHECK_AS(CommunicationError,
                   theirs[b].count == mine[b].count && theirs[b].dtype == mine[b].dtype,
                   "all_reduce of group '", group, "': buffer ", b, " is ", mine[b].count, " x ",
                   dtype_name(mine[b].dtype), " on rank ", rank, " but ", theirs[b].count, " x ",
                   dtype_name(theirs[b].dtype), " on rank ", other,
                   "; every rank must reduce buffers of the same shapes");
  }
}

}  // namespace grove::runtime::collectives
