// Source of small_m_tiled_gemm_bf16_kernel_ptx.inc (regenerate_ptx.sh): the
// tiled small-M GEMM's kernels for bf16 storage (small_m_tiled_gemm_device.cuh,
// Note [Small-M tiled GEMM] in small_m_tiled_gemm.h).
#include "runtime/cuda/small_m_tiled_gemm_device.cuh"
#include "runtime/programmatic_launch_device.h"

GROVE_SMALL_M_TILED_GEMM_WARPS(bf16, __nv_bfloat16, 4)
GROVE_SMALL_M_TILED_GEMM_WARPS(bf16, __nv_bfloat16, 8)
