// The small-M GEMV of cuda's BLAS: decode-shaped GEMMs (a few rows of
// activations times a linear layer's weight) as grove's own bandwidth-bound
// kernel (small_m_gemv_kernel.cu) instead of a cuBLAS call. Internal to
// runtime/cuda: CublasSupport::gemm_row_major (blas.cc) calls it for every
// GEMM small_m_gemv_qualifies accepts; the free gemm_row_major() stays cuBLAS.
//
// Note [Small-M GEMV]
// At M <= 8 a GEMM reads its weight once and does little else, so its time
// is the weight's bytes over the bandwidth it reaches. The kernel gives each
// output column one warp, which streams the weight's row in 16-byte vectors
// (up to sixteen per lane in flight, the tail as one batch of predicated
// loads) and multiplies them with the same vectors of A's rows, summing in
// f32 (each lane in increasing k, then a shuffle tree): one kernel per GEMM
// (cuBLAS ran split-K pairs for some decode shapes). On an H100 it reached
// 2.7-2.9 TB/s for the LLaMA-1B gate/up and LM-head weights (64-131 MB) and
// 1.2-1.9 TB/s for the 8-34 MB ones, where launch and drain weigh more.
// It takes row-major C[m, n] = A[m, k] W[n, k]^T (transpose_b) with M of 1,
// 2, 4 or 8, bf16 or f16, alpha 1, beta 0 or 1 (C += the product, rounded
// once: a residual add), no epilogue, no batch, K, lda and ldb multiples of
// 8 and A and W 16-byte aligned (the vector loads); other GEMMs go to
// cuBLAS. Results differ from cuBLAS's within f32 rounding of the sums.
// Tests: CudaPlatformTest.SmallMGemvMatchesHostReference,
// CudaPlatformTest.SmallMGemvIsOneKernelInACapturedGraph
// (tests/runtime/cuda_platform_test.cc).
#pragma once

#include <mutex>

#include "runtime/blas.h"
#include "runtime/platform.h"

namespace grove::runtime::cuda_detail {

// Whether the kernel computes `args` (a row-major GEMM, as gemm_row_major takes it).
bool small_m_gemv_qualifies(const GemmArgs& args);

// The kernels of one cuda platform, loaded on first use.
class SmallMGemv {
 public:
  explicit SmallMGemv(Platform& platform) : platform_(platform) {}
  // Enqueues the qualifying GEMM `args` on `stream`.
  void launch(StreamHandle stream, const GemmArgs& args);

 private:
  Platform& platform_;
  std::mutex mutex_;                 // guards the loads (any thread may run GEMMs)
  KernelHandle kernels_[2][4] = {};  // [bf16, f16][M = 1, 2, 4, 8]
  bool loaded_[2][4] = {};
};

}  // namespace grove::runtime::cuda_detail
