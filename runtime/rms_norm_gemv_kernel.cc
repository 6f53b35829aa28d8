#include "runtime/rms_norm_gemv_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/cuda/streamed_gemv_flags.h"
#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::runtime {
namespace {

constexpr const char* kPtx =
#include "runtime/rms_norm_gemv_kernel_ptx.inc"
    ;
// Note [Programmatic dependent launch] (runtime/cuda/cuda_platform.cc).
constexpr const char* kProgrammaticPtx =
#include "runtime/rms_norm_gemv_kernel_programmatic_ptx.inc"
    ;
constexpr uint32_t kThreads = 128;  // the kernel's __launch_bounds__: four columns per block

float round_bf16(float value) { return bf16_bits_to_float(float_to_bf16_bits(value)); }

// The kernel's arithmetic on the host (sim), row by row (the squares summed in index order).
void host_rms_norm_gemv(const LaunchDims*, const uint64_t* args) {
  const auto* x = reinterpret_cast<const uint16_t*>(args[0]);
  const auto ldx = static_cast<int64_t>(args[1]);
  const auto* gain = reinterpret_cast<const uint16_t*>(args[2]);
  const auto* w = reinterpret_cast<const uint16_t*>(args[3]);
  const auto ldw = static_cast<int64_t>(args[4]);
  void* c = reinterpret_cast<void*>(args[5]);
  const auto ldc = static_cast<int64_t>(args[6]);
  const auto n = static_cast<int64_t>(args[7]);
  const auto k = static_cast<int64_t>(args[8]);
  float eps;
  std::memcpy(&eps, &args[9], sizeof(eps));
  const auto rows = static_cast<int64_t>(args[10]);
  const bool gated = args[11] != 0;
  const bool f32_out = args[12] != 0;
  std::vector<float> normed(static_cast<size_t>(k));
  auto dot = [&](int64_t w_row) {
    float acc = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
      acc = std::fma(normed[static_cast<size_t>(i)], bf16_bits_to_float(w[w_row * ldw + i]), acc);
    }
    return acc;
  };
  for (int64_t m = 0; m < rows; ++m) {
    float sum = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
      const float value = bf16_bits_to_float(x[m * ldx + i]);
      sum = std::fma(value, value, sum);
    }
    const float rstd = 1.0f / std::sqrt(sum / static_cast<float>(k) + eps);
    for (int64_t i = 0; i < k; ++i) {
      normed[static_cast<size_t>(i)] =
          round_bf16(bf16_bits_to_float(gain[i]) * (bf16_bits_to_float(x[m * ldx + i]) * rstd));
    }
    for (int64_t column = 0; column < n; ++column) {
      float value = dot(column);
      if (gated) {
        const float gate = round_bf16(value);
        const float up = round_bf16(dot(column + n));
        value = gate * (1.0f / (1.0f + std::exp(-gate))) * up;
      }
      if (f32_out) {
        static_cast<float*>(c)[m * ldc + column] = round_bf16(value);
      } else {
        static_cast<uint16_t*>(c)[m * ldc + column] = float_to_bf16_bits(value);
      }
    }
  }
}

bool aligned(const void* pointer) { return (reinterpret_cast<uintptr_t>(pointer) & 15) == 0; }

// Note [Streamed GEMV] (runtime/cuda/small_m_gemv.h): one row on cuda, a grid
// of kStreamBlocksPerSm blocks per SM at most (a warp per column at least).
constexpr int64_t kStreamBlocksPerSm = 2;
// The longest row the streamed kernels take (kStreamedMaxK in rms_norm_gemv_kernel.cu:
// the normalized row lives in the block's shared memory).
constexpr int64_t kStreamedMaxK = 3072;

void launch_streamed(const Tensor& x, const Tensor& gain, const Tensor& w, const Tensor& out,
                     int64_t n, int64_t k, double eps, bool gated, bool f32_out,
                     StreamHandle stream) {
  const Device device = x.device();
  Platform& platform = device_context(device).platform();
  namespace bits = streamed_gemv_flags;
  const bool evict_first = weights_evict_first();
  // Note [Streamed GEMV slots]: 28 slots where GROVE_STREAMED_GEMV_SLOTS asks for deep ones.
  const bool deep = streamed_gemv_deep_slots(0);
  // 20 slots are the kernel's static shared memory; 28 are dynamic.
  const uint32_t shared_bytes = deep ? 28 * kThreads * 16 : 0;
  KernelSource source;
  source.name = str_cat(gated     ? "grove_rms_norm_swiglu_streamed_bf16"
                        : f32_out ? "grove_rms_norm_gemv_streamed_bf16_f32out"
                                  : "grove_rms_norm_gemv_streamed_bf16",
                        deep ? "_s28" : "");
  source.ptx = kPtx;
  source.ptx_programmatic = kProgrammaticPtx;
  source.max_dynamic_shared_bytes = shared_bytes;
  const KernelHandle kernel = load_kernel_once(device, source);
  const int64_t needed = (n + kThreads / 32 - 1) / (kThreads / 32);
  LaunchDims dims;
  dims.grid.x =
      static_cast<uint32_t>(std::min(needed, int64_t{platform.multiprocessor_count()} *
                                                 streamed_gemv_blocks_per_sm(kStreamBlocksPerSm)));
  dims.block.x = kThreads;
  dims.shared_bytes = shared_bytes;
  int64_t flags = 0;
  // Note [Streamed GEMV slots]: the deep rings read under the default policy.
  if (evict_first && !deep) flags |= bits::kEvictFirst;
  if (bits::allow_next_first(/*blas=*/false)) flags |= bits::kAllowNextFirst;
  if (bits::row_in_registers()) flags |= bits::kRowInRegisters;
  flags |= bits::prefetch_column_bits();
  KernelArgs args;
  args.add_pointer(x.data_ptr())
      .add_pointer(gain.data_ptr())
      .add_pointer(w.data_ptr())
      .add_i64(k)
      .add_pointer(out.data_ptr())
      .add_i64(n)
      .add_i64(k)
      .add_f32(static_cast<float>(eps))
      .add_i64(flags);
  platform.launch_kernel(kernel, dims, args, stream);
}

}  // namespace

std::string rms_norm_gemv_refusal(DType dtype, int64_t rows, int64_t k) {
  if (dtype != DType::kBF16)
    return str_cat("dtype ", dtype_name(dtype), " (the kernel takes bf16)");
  if (rows != 1) {
    return str_cat(rows,
                   " rows (the kernel takes one: each warp normalizes what it multiplies, "
                   "which at more rows costs more than the norm's own kernel)");
  }
  if (k <= 0 || k % 8 != 0) return str_cat("K = ", k, " (a positive multiple of 8)");
  return "";
}

void launch_rms_norm_gemv(const Tensor& x, const Tensor& gain, const Tensor& w, const Tensor& out,
                          double eps, bool gated, StreamHandle stream) {
  GROVE_CHECK_AS(ShapeError, x.dim() == 2 && w.dim() == 2 && out.dim() == 2 && gain.dim() == 1,
                 "rms_norm_gemv: expected x [rows, K], gain [K], w [N, K] and out [rows, N]; got ",
                 x.str(), ", ", gain.str(), ", ", w.str(), ", ", out.str());
  const int64_t rows = x.size(0);
  const int64_t k = x.size(1);
  const int64_t n = gated ? w.size(0) / 2 : w.size(0);
  const std::string refusal = rms_norm_gemv_refusal(x.dtype(), rows, k);
  GROVE_CHECK_AS(ShapeError, refusal.empty(), "rms_norm_gemv: the kernel does not take ", refusal);
  GROVE_CHECK_AS(ShapeError,
                 gain.size(0) == k && w.size(1) == k && out.size(0) == rows && out.size(1) == n &&
                     (!gated || w.size(0) == 2 * n),
                 "rms_norm_gemv: operands do not fit together: x ", x.str(), ", gain ", gain.str(),
                 ", w ", w.str(), ", out ", out.str());
  const bool f32_out = out.dtype() == DType::kF32;
  GROVE_CHECK_AS(DTypeError, !(f32_out && gated), "rms_norm_gemv: the gated variant stores bf16; ",
                 "got out ", out.str());
  for (const Tensor* t : {&x, &gain, &w, &out}) {
    GROVE_CHECK_AS(DTypeError, t->dtype() == DType::kBF16 || (t == &out && f32_out),
                   "rms_norm_gemv: operand ", t->str(), " is not bf16 (out may be f32)");
    GROVE_CHECK_AS(ShapeError, t->is_contiguous() && aligned(t->data_ptr()),
                   "rms_norm_gemv: operand ", t->str(), " must be contiguous and 16-byte aligned");
  }
  if (n == 0) return;
  const Device device = x.device();
  if (device.is_cuda() && streamed_gemv_enabled(StreamedGemvs::kNorm) && k <= kStreamedMaxK) {
    launch_streamed(x, gain, w, out, n, k, eps, gated, f32_out, stream);
    return;
  }
  KernelSource source;
  source.name = str_cat(gated     ? "grove_rms_norm_swiglu_bf16_m"
                        : f32_out ? "grove_rms_norm_gemv_bf16_f32out_m"
                                  : "grove_rms_norm_gemv_bf16_m",
                        rows);
  if (device.is_cuda()) {
    source.ptx = kPtx;
    source.ptx_programmatic = kProgrammaticPtx;
  } else {
    source.host_function = &host_rms_norm_gemv;
  }
  const KernelHandle kernel = load_kernel_once(device, source);
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>((n + kThreads / 32 - 1) / (kThreads / 32));
  dims.block.x = kThreads;
  KernelArgs args;
  args.add_pointer(x.data_ptr())
      .add_i64(k)
      .add_pointer(gain.data_ptr())
      .add_pointer(w.data_ptr())
      .add_i64(k)
      .add_pointer(out.data_ptr())
      .add_i64(n)
      .add_i64(n)
      .add_i64(k)
      .add_f32(static_cast<float>(eps));
  // The host function's row count and variant (each PTX entry has its own).
  if (!device.is_cuda()) args.add_i64(rows).add_i64(gated ? 1 : 0).add_i64(f32_out ? 1 : 0);
  device_context(device).platform().launch_kernel(kernel, dims, args, stream);
}

}  // namespace grove::runtime
