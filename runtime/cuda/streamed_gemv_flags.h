// The last launch argument of the streamed GEMV kernels (Note [Streamed GEMV],
// runtime/cuda/small_m_gemv.h; runtime/rms_norm_gemv_kernel.cu): bits the host
// sets (runtime/cuda/small_m_gemv.cc, rms_norm_gemv_kernel.cc) and the kernels
// test, and the settings behind them. No CUDA: included by both compilers.
#pragma once

#include <cstdint>

namespace grove::runtime::streamed_gemv_flags {

// W's reads under the evict-first L2 policy (GROVE_WEIGHTS_EVICT_FIRST).
inline constexpr int64_t kEvictFirst = 1;
// Note [Streamed GEMV allows the next kernel first]: griddepcontrol.launch_dependents
// before the kernel's own wait instead of after it.
inline constexpr int64_t kAllowNextFirst = 2;
// Note [Streamed GEMV reads C first]: lane 0 loads the accumulated column of C
// as its column's fold starts instead of after its warp sum.
inline constexpr int64_t kResidualFirst = 4;
// Note [RMSNorm GEMV keeps its row in registers]: the RMSNorm GEMVs read x once
// and the gain before their wait.
inline constexpr int64_t kRowInRegisters = 8;
// Note [Streamed GEMV prefetches columns into L2]: bits 8-15, the columns each
// warp warms L2 with before its wait.
inline constexpr int kPrefetchColumnsShift = 8;

// The host's settings (streamed_gemv_flags.cc), each read at each launch, so
// one process can time every setting:
// - whether the streamed BLAS GEMVs (`blas`; else the RMSNorm GEMVs) allow the
//   next kernel first: both unless GROVE_GEMV_ALLOW_NEXT_FIRST says otherwise
//   (=0 neither, =blas or =norm those only);
bool allow_next_first(bool blas);
// - whether the streamed BLAS GEMV reads C first: unless GROVE_GEMV_RESIDUAL_FIRST=0;
bool residual_first();
// - whether the RMSNorm GEMVs keep their row in registers: unless
//   GROVE_GEMV_ROW_IN_REGISTERS=0;
bool row_in_registers();
// - the columns each warp of both kinds prefetches into L2:
//   GROVE_GEMV_PREFETCH_COLUMNS=N (0..255, default 0), as flag bits.
int64_t prefetch_column_bits();

}  // namespace grove::runtime::streamed_gemv_flags
