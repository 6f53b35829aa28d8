#include "runtime/testing/test_kernels.h"

#include <array>
#include <cstring>
#include <map>
#include <mutex>

#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::testing {
namespace {

using runtime::Device;
using runtime::KernelHandle;
using runtime::LaunchDims;
using runtime::Tensor;

constexpr const char* kPtx =
#include "runtime/testing/test_kernels_ptx.inc"
    ;

float slot_f32(uint64_t slot) {
  auto bits = static_cast<uint32_t>(slot);
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

template <typename T>
T* slot_ptr(uint64_t slot) {
  return reinterpret_cast<T*>(slot);
}

void host_fill(const LaunchDims*, const uint64_t* args) {
  auto* out = slot_ptr<float>(args[0]);
  auto n = static_cast<int64_t>(args[1]);
  float value = slot_f32(args[2]);
  for (int64_t i = 0; i < n; ++i) out[i] = value;
}

void host_add(const LaunchDims*, const uint64_t* args) {
  auto* a = slot_ptr<const float>(args[0]);
  auto* b = slot_ptr<const float>(args[1]);
  auto* out = slot_ptr<float>(args[2]);
  auto n = static_cast<int64_t>(args[3]);
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void host_scale(const LaunchDims*, const uint64_t* args) {
  auto* in = slot_ptr<const float>(args[0]);
  auto* out = slot_ptr<float>(args[1]);
  auto n = static_cast<int64_t>(args[2]);
  float factor = slot_f32(args[3]);
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * factor;
}

void host_add_scalar_in_place(const LaunchDims*, const uint64_t* args) {
  auto* x = slot_ptr<float>(args[0]);
  auto n = static_cast<int64_t>(args[1]);
  float value = slot_f32(args[2]);
  for (int64_t i = 0; i < n; ++i) x[i] += value;
}

struct KernelInfo {
  const char* name;
  runtime::HostKernelFn host;
};

KernelInfo info(TestKernel which) {
  switch (which) {
    case TestKernel::kFill:
      return {"grove_test_fill_f32", host_fill};
    case TestKernel::kAdd:
      return {"grove_test_add_f32", host_add};
    case TestKernel::kScale:
      return {"grove_test_scale_f32", host_scale};
    case TestKernel::kAddScalarInPlace:
      return {"grove_test_add_scalar_inplace_f32", host_add_scalar_in_place};
  }
  throw Error("unknown test kernel");
}

void check_f32(const Tensor& t, const char* what) {
  GROVE_CHECK_AS(DTypeError, t.dtype() == runtime::DType::kF32, what, ": expected f32, got ",
                 dtype_name(t.dtype()));
  GROVE_CHECK_AS(ShapeError, t.is_contiguous(), what, ": expected a contiguous tensor");
}

void launch(TestKernel which, Device device, int64_t n, const runtime::KernelArgs& args) {
  runtime::DeviceContext& context = runtime::device_context(device);
  context.platform().launch_kernel(test_kernel(device, which), launch_dims_for(n), args,
                                   context.current_stream());
}

}  // namespace

KernelHandle test_kernel(Device device, TestKernel which) {
  static std::mutex mutex;
  static auto* cache = new std::map<std::pair<Device, TestKernel>, KernelHandle>();
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(device, which);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  KernelInfo kernel = info(which);
  runtime::KernelSource source;
  source.name = kernel.name;
  if (device.is_cuda()) {
    source.ptx = kPtx;
  } else {
    source.host_function = kernel.host;
  }
  KernelHandle handle = runtime::device_context(device).platform().load_kernel(source);
  cache->emplace(key, handle);
  return handle;
}

LaunchDims launch_dims_for(int64_t n) {
  LaunchDims dims;
  dims.block.x = 256;
  dims.grid.x = static_cast<uint32_t>(std::max<int64_t>(1, (n + 255) / 256));
  return dims;
}

void launch_fill(const Tensor& out, float value) {
  check_f32(out, "launch_fill out");
  launch(TestKernel::kFill, out.device(), out.numel(),
         runtime::KernelArgs().add_pointer(out.data_ptr()).add_i64(out.numel()).add_f32(value));
}

void launch_add(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_f32(a, "launch_add a");
  check_f32(b, "launch_add b");
  check_f32(out, "launch_add out");
  GROVE_CHECK_AS(ShapeError, a.numel() == b.numel() && a.numel() == out.numel(),
                 "launch_add: element counts differ");
  launch(TestKernel::kAdd, out.device(), out.numel(),
         runtime::KernelArgs()
             .add_pointer(a.data_ptr())
             .add_pointer(b.data_ptr())
             .add_pointer(out.data_ptr())
             .add_i64(out.numel()));
}

void launch_scale(const Tensor& in, const Tensor& out, float factor) {
  check_f32(in, "launch_scale in");
  check_f32(out, "launch_scale out");
  GROVE_CHECK_AS(ShapeError, in.numel() == out.numel(), "launch_scale: element counts differ");
  launch(TestKernel::kScale, out.device(), out.numel(),
         runtime::KernelArgs()
             .add_pointer(in.data_ptr())
             .add_pointer(out.data_ptr())
             .add_i64(out.numel())
             .add_f32(factor));
}

void launch_add_scalar_in_place(const Tensor& x, float value) {
  check_f32(x, "launch_add_scalar_in_place x");
  launch(TestKernel::kAddScalarInPlace, x.device(), x.numel(),
         runtime::KernelArgs().add_pointer(x.data_ptr()).add_i64(x.numel()).add_f32(value));
}

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(a.shape(), runtime::DType::kF32, a.device());
  launch_add(a, b, out);
  return out;
}

Tensor scale(const Tensor& in, float factor) {
  Tensor out = Tensor::empty(in.shape(), runtime::DType::kF32, in.device());
  launch_scale(in, out, factor);
  return out;
}

}  // namespace grove::testing
