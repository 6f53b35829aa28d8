#include "runtime/pinned_host_buffer.h"

#include <cstring>
#include <utility>

#include "runtime/device_context.h"

namespace grove::runtime {

PinnedHostBuffer::PinnedHostBuffer(Device device, size_t bytes)
    : backend_(&device_context(device).backend()), bytes_(bytes) {
  pointer_ = backend_->allocate_host_pinned(bytes);
  if (bytes > 0) std::memset(pointer_, 0, bytes);
}

PinnedHostBuffer::~PinnedHostBuffer() { release(); }

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : backend_(std::exchange(other.backend_, nullptr)),
      pointer_(std::exchange(other.pointer_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    backend_ = std::exchange(other.backend_, nullptr);
    pointer_ = std::exchange(other.pointer_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void PinnedHostBuffer::release() {
  if (backend_ != nullptr && pointer_ != nullptr) backend_->free_host_pinned(pointer_);
  pointer_ = nullptr;
}

}  // namespace grove::runtime
