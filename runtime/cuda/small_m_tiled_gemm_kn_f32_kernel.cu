// Source of small_m_tiled_gemm_kn_f32_kernel_ptx.inc (regenerate_ptx.sh): the
// tiled small-M GEMM's kernels for a [K, N] weight in f32
// (small_m_tiled_gemm_kn_device.cuh, Note [Small-M tiled GEMM over a K x N
// weight] in small_m_tiled_gemm.h).
#include "runtime/cuda/small_m_tiled_gemm_kn_device.cuh"
#include "runtime/programmatic_launch_device.h"

GROVE_SMALL_M_TILED_GEMM_KN_WARPS(4)
GROVE_SMALL_M_TILED_GEMM_KN_WARPS(8)
