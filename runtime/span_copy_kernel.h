// The span copy kernel: `bytes` bytes from `source` to `destination`, as a
// kernel grove launches itself (PTX on cuda, a host function on sim), so that
// a copy can be a kernel node of a recorded graph whose source pointer grove
// may patch between replays (GraphRecording::add_head_kernel,
// set_kernel_node_args). Arguments are three slots: destination, source,
// bytes; a launch with bytes = 0 copies nothing.
#pragma once

#include <cstddef>

#include "runtime/device.h"
#include "runtime/platform.h"

namespace grove::runtime {

inline constexpr size_t kSpanCopyDestinationSlot = 0;
inline constexpr size_t kSpanCopySourceSlot = 1;
inline constexpr size_t kSpanCopyBytesSlot = 2;

// The kernel, loaded once per device (thread-safe).
KernelHandle span_copy_kernel(Device device);
// A grid that covers `bytes` in 16-byte steps, capped (the kernel strides).
LaunchDims span_copy_dims(size_t bytes);
KernelArgs span_copy_args(void* destination, const void* source, size_t bytes);
// The PTX the cuda device loads (for checks that assemble it).
const char* span_copy_ptx();

}  // namespace grove::runtime
