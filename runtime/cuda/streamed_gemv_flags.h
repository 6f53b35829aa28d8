// The last launch argument of the streamed GEMV kernels (Note [Streamed GEMV],
// runtime/cuda/small_m_gemv.h; runtime/rms_norm_gemv_kernel.cu): bits the host
// sets (runtime/cuda/small_m_gemv.cc, rms_norm_gemv_kernel.cc) and the kernels
// test. Plain constants, no CUDA: included by both compilers.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace grove::runtime::streamed_gemv_flags {

// W's reads under the evict-first L2 policy (GROVE_WEIGHTS_EVICT_FIRST).
inline constexpr int64_t kEvictFirst = 1;
// Note [Streamed GEMV allows the next kernel first]: griddepcontrol.launch_dependents
// before the kernel's own wait instead of after it.
inline constexpr int64_t kAllowNextFirst = 2;
// Note [Streamed GEMV reads C first]: lane 0 loads the accumulated column of C
// as its column's fold starts instead of after its warp sum.
inline constexpr int64_t kResidualFirst = 4;

// Whether the streamed BLAS GEMVs (`blas`; else the RMSNorm GEMVs) allow the
// next kernel first: GROVE_GEMV_ALLOW_NEXT_FIRST=1 for both, =blas or =norm
// for those only. Read at each launch, so one process can time each setting.
inline bool allow_next_first(bool blas) {
  const char* value = std::getenv("GROVE_GEMV_ALLOW_NEXT_FIRST");
  if (value == nullptr) return false;
  return std::strcmp(value, "1") == 0 || std::strcmp(value, blas ? "blas" : "norm") == 0;
}

// Whether the streamed BLAS GEMV reads C first: GROVE_GEMV_RESIDUAL_FIRST=1 (read at each launch).
inline bool residual_first() {
  const char* value = std::getenv("GROVE_GEMV_RESIDUAL_FIRST");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

}  // namespace grove::runtime::streamed_gemv_flags
