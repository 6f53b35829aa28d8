// Source of small_m_tiled_gemm_f32_kernel_ptx.inc (regenerate_ptx.sh): the
// tiled small-M GEMM's kernels for f32 storage (small_m_tiled_gemm_device.cuh,
// Note [Small-M tiled GEMM] in small_m_tiled_gemm.h).
#include "runtime/cuda/small_m_tiled_gemm_device.cuh"
#include "runtime/programmatic_launch_device.h"

GROVE_SMALL_M_TILED_GEMM_WARPS(f32, float, 4)
GROVE_SMALL_M_TILED_GEMM_WARPS(f32, float, 8)
