#include "runtime/span_copy_kernel.h"

#include <algorithm>
#include <cstring>

#include "runtime/device_context.h"

namespace grove::runtime {
namespace {

constexpr const char* kName = "grove_copy_span";
constexpr const char* kPtx =
#include "runtime/span_copy_kernel_ptx.inc"
    ;
constexpr uint32_t kThreads = 256;
constexpr uint32_t kMaxBlocks = 2048;

void host_copy_span(const LaunchDims*, const uint64_t* args) {
  auto bytes = static_cast<size_t>(args[kSpanCopyBytesSlot]);
  if (bytes == 0) return;
  std::memmove(reinterpret_cast<void*>(args[kSpanCopyDestinationSlot]),
               reinterpret_cast<const void*>(args[kSpanCopySourceSlot]), bytes);
}

}  // namespace

KernelHandle span_copy_kernel(Device device) {
  KernelSource source;
  source.name = kName;
  if (device.is_cuda()) {
    source.ptx = kPtx;
  } else {
    source.host_function = &host_copy_span;
  }
  return load_kernel_once(device, source);
}

LaunchDims span_copy_dims(size_t bytes) {
  size_t vectors = std::max<size_t>(1, (bytes + 15) / 16);
  size_t blocks = std::min<size_t>(kMaxBlocks, (vectors + kThreads - 1) / kThreads);
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(blocks);
  dims.block.x = kThreads;
  return dims;
}

KernelArgs span_copy_args(void* destination, const void* source, size_t bytes) {
  KernelArgs args;
  args.add_pointer(destination).add_pointer(source).add_i64(static_cast<int64_t>(bytes));
  return args;
}

const char* span_copy_ptx() { return kPtx; }

}  // namespace grove::runtime
