#include "capi/output_keys.h"

#include <cstring>

namespace grove::capi {

namespace {

void append_word(std::string& bytes, int64_t word) {
  char raw[sizeof(word)];
  std::memcpy(raw, &word, sizeof(word));
  bytes.append(raw, sizeof(word));
}

}  // namespace

uint64_t OutputKeys::key_of(const runtime::Tensor& value) {
  // address() never throws; to_dlpack refused stale data before this is asked.
  const auto address = reinterpret_cast<intptr_t>(value.address());
  const runtime::Device device = value.device();
  std::string bytes;
  bytes.reserve(8 * (4 + 2 * value.shape().size()));
  append_word(bytes, address);
  append_word(bytes, static_cast<int64_t>(device.type) << 32 | device.index);
  append_word(bytes, static_cast<int64_t>(value.dtype()));
  append_word(bytes, static_cast<int64_t>(value.shape().size()));
  for (int64_t extent : value.shape()) {
    append_word(bytes, extent);
  }
  for (int64_t stride : value.strides()) {
    append_word(bytes, stride);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto [entry, added] = keys_.try_emplace(std::move(bytes), next_);
  if (!added) {
    return entry->second;
  }
  ++next_;
  if (keys_.size() > kMaxKeys) {
    const uint64_t key = entry->second;
    keys_.clear();
    return key;
  }
  return entry->second;
}

}  // namespace grove::capi
