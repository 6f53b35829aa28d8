// Keys naming an output's memory and layout exactly, so that a binding can
// keep one tensor of its own per key and hand out views of it (Note [Outputs
// over cached storage], capi/handout.cc).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/tensor.h"

namespace grove::capi {

// Interns (address of element 0, device, dtype, shape, strides) as a 64-bit
// key: two outputs of one model get the same key exactly when all five are
// equal. Keys are never reused: past kMaxKeys layouts the table starts over
// with new keys, so a binding's cache only misses. Thread-safe.
class OutputKeys {
 public:
  static constexpr size_t kMaxKeys = 4096;

  uint64_t key_of(const runtime::Tensor& value);

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, uint64_t> keys_;
  uint64_t next_ = 1;
};

}  // namespace grove::capi
