// PinnedHostBuffer owns page-locked host memory of one device's platform
// (Platform::allocate_host_pinned): a staging area whose copies to and from
// the device run asynchronously in stream order, unlike copies from pageable
// memory, which CUDA stages synchronously. Move-only; freed with the buffer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/device.h"
#include "runtime/platform.h"

namespace grove::runtime {

class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  // `bytes` of pinned memory from `device`'s platform (zero-filled).
  PinnedHostBuffer(Device device, size_t bytes);
  ~PinnedHostBuffer();
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  uint8_t* data() { return static_cast<uint8_t*>(pointer_); }
  const uint8_t* data() const { return static_cast<const uint8_t*>(pointer_); }
  size_t size() const { return bytes_; }

 private:
  void release();

  Platform* platform_ = nullptr;
  void* pointer_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace grove::runtime
