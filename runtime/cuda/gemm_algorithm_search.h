// The cuBLASLt algorithm of a GEMM chosen by timing the heuristic's candidates
// instead of taking its first. Internal to runtime/cuda (cublaslt_plans.cc).
//
// Note [GEMM algorithms by measurement]
// cuBLAS's heuristic picks one kernel per shape from a model of the GPU; for
// the zoo's small f32 GEMMs at batch 16 (M of a few hundred rows, N and K of
// 192 to 2048: a few dozen output tiles on 132 SMs) it often picks a 64x64
// tile without split-K, so most SMs idle while a few loop over all of K, and
// PyTorch's reduce-overhead runs the same kernels. With GROVE_GEMM_SEARCH=1
// grove asks cuBLASLt for up to kGemmSearchCandidates algorithms and times
// each on scratch operands of the GEMM's shape, in a CUDA graph of
// kGemmSearchLaunches launches (as cudagraphs runs them), best of
// kGemmSearchRounds, and keeps the fastest in the plan cache. The plan is made
// once per process and key, so eager and cudagraphs run the same kernel
// (bitwise equal); a GEMM first met while its stream captures takes the
// heuristic's first. The compile option gemm_search (GemmArgs::search) asks
// the same for one model's GEMMs (a training whole step: Note [GEMMs of the
// whole step by measurement], python/grove/step.py). Split-K changes the order of f32 sums, so
// results may differ from PyTorch's in the last bits (within the zoo's tolerance). Off by default:
// on an H100 (session 18, round 1, ViT at batch 16, one process) the search kept a
// faster-in-isolation algorithm for 3 of ViT's 6 GEMM shapes (9.87 -> 9.40 us, 11.05 -> 9.84 us
// timed alone), yet in the model the GEMMs took 590 us of GPU time per call against 580 with the
// heuristic's picks and the call 639 us against 624 (graphs of one GEMM repeated time it with its
// operands hot in L2, which the model's GEMMs are not). Tests:
// CudaPlatformTest.SearchedGemmAlgorithmsMatchTheHostAndReplayBitwise
// (tests/runtime/cuda_platform_test.cc).
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <vector>

#include "runtime/blas.h"
#include "runtime/cuda/cublas_library.h"
#include "runtime/device.h"

namespace grove::runtime::cuda_detail {

inline constexpr int kGemmSearchCandidates = 16;
inline constexpr int kGemmSearchLaunches = 20;
inline constexpr int kGemmSearchRounds = 3;

// The matmul `desc` over layouts a, b, c of the column-major GEMM `g`, the
// candidates to time and the workspace the largest of them needs.
struct GemmSearch {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  const GemmArgs* g = nullptr;
  Device device;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
};

// The index into search.candidates of the fastest candidate (0 when only one
// runs, or when timing fails: a warning names the GEMM). Needs the calling
// thread in relaxed capture mode (it allocates scratch memory). The desc's
// bias and aux pointers must point at device memory of the GEMM's sizes.
size_t fastest_candidate(const CublasLibrary& library, const GemmSearch& search);

}  // namespace grove::runtime::cuda_detail
