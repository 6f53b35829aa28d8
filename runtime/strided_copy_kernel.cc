#include "runtime/strided_copy_kernel.h"

#include <algorithm>
#include <cstring>

#include "runtime/device_context.h"

namespace grove::runtime {
namespace {

constexpr const char* kName = "grove_copy_strided";
constexpr const char* kPtx =
#include "runtime/strided_copy_kernel_ptx.inc"
    ;
constexpr uint32_t kThreads = 256;
constexpr uint32_t kMaxBlocks = 4096;
// Argument slots: destination, source, elements, element bytes, 8 sizes, 8 strides.
constexpr size_t kSizeSlot = 4;
constexpr size_t kStrideSlot = kSizeSlot + kMaxStridedCopyRank;

void host_copy_strided(const LaunchDims*, const uint64_t* args) {
  auto* destination = reinterpret_cast<char*>(args[0]);
  const auto* source = reinterpret_cast<const char*>(args[1]);
  const uint64_t elements = args[2];
  const size_t element_bytes = static_cast<size_t>(args[3]);
  for (uint64_t linear = 0; linear < elements; ++linear) {
    uint64_t rest = linear;
    int64_t offset = 0;
    for (int64_t d = kMaxStridedCopyRank - 1; d >= 0; --d) {
      const auto size = args[kSizeSlot + static_cast<size_t>(d)];
      offset += static_cast<int64_t>(rest % size) *
                static_cast<int64_t>(args[kStrideSlot + static_cast<size_t>(d)]);
      rest /= size;
    }
    std::memcpy(destination + linear * element_bytes,
                source + offset * static_cast<int64_t>(element_bytes), element_bytes);
  }
}

KernelHandle strided_copy_kernel(Device device) {
  KernelSource source;
  source.name = kName;
  if (device.is_cuda()) {
    source.ptx = kPtx;
  } else {
    source.host_function = &host_copy_strided;
  }
  return load_kernel_once(device, source);
}

}  // namespace

void copy_to_contiguous(const Tensor& source, const Tensor& destination) {
  GROVE_CHECK_AS(ShapeError,
                 source.shape() == destination.shape() && source.dtype() == destination.dtype() &&
                     source.device() == destination.device() && destination.is_contiguous(),
                 "copy_to_contiguous: ", source.str(), " cannot be copied into ", destination.str(),
                 "; the destination must be contiguous with the same shape, ", "dtype and device");
  GROVE_CHECK_AS(ShapeError, source.dim() <= kMaxStridedCopyRank,
                 "copy_to_contiguous: ", source.str(), " has ", source.dim(),
                 " dimensions; at most ", kMaxStridedCopyRank, " are supported");
  if (source.numel() == 0) return;
  const size_t element_bytes = dtype_size(source.dtype());
  KernelArgs args;
  args.add_pointer(destination.data_ptr())
      .add_pointer(source.data_ptr())
      .add_i64(source.numel())
      .add_i64(static_cast<int64_t>(element_bytes));
  // Leading unused dimensions have size 1 and stride 0.
  const int64_t pad = kMaxStridedCopyRank - source.dim();
  for (int64_t d = 0; d < kMaxStridedCopyRank; ++d) {
    args.add_i64(d < pad ? 1 : source.shape()[static_cast<size_t>(d - pad)]);
  }
  for (int64_t d = 0; d < kMaxStridedCopyRank; ++d) {
    args.add_i64(d < pad ? 0 : source.strides()[static_cast<size_t>(d - pad)]);
  }
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(std::min<int64_t>(
      kMaxBlocks, (source.numel() + kThreads - 1) / static_cast<int64_t>(kThreads)));
  dims.block.x = kThreads;
  DeviceContext& context = device_context(source.device());
  context.platform().launch_kernel(strided_copy_kernel(source.device()), dims, args,
                                   context.current_stream());
}

Tensor contiguous_copy(const Tensor& source) {
  Tensor copy = Tensor::empty(source.shape(), source.dtype(), source.device());
  copy_to_contiguous(source, copy);
  return copy;
}

const char* strided_copy_ptx() { return kPtx; }

}  // namespace grove::runtime
