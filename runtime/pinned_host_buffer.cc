#include "runtime/pinned_host_buffer.h"

#include <cstring>
#include <utility>

#include "runtime/device_context.h"

namespace grove::runtime {

PinnedHostBuffer::PinnedHostBuffer(Device device, size_t bytes)
    : platform_(&device_context(device).platform()), bytes_(bytes) {
  pointer_ = platform_->allocate_host_pinned(bytes);
  if (bytes > 0) std::memset(pointer_, 0, bytes);
}

PinnedHostBuffer::~PinnedHostBuffer() { release(); }

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : platform_(std::exchange(other.platform_, nullptr)),
      pointer_(std::exchange(other.pointer_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    platform_ = std::exchange(other.platform_, nullptr);
    pointer_ = std::exchange(other.pointer_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void PinnedHostBuffer::release() {
  if (platform_ != nullptr && pointer_ != nullptr) platform_->free_host_pinned(pointer_);
  pointer_ = nullptr;
}

}  // namespace grove::runtime
