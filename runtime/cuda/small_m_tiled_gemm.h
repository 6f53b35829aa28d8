// The tiled small-M GEMM of cuda's BLAS: GEMMs of 1 to 64 rows of
// activations times a linear layer's weight, with their bias / gelu / relu
// epilogue, as grove's own kernel (small_m_tiled_gemm_device.cuh, its PTX per
// type from small_m_tiled_gemm_<dtype>_kernel.cu) where the
// lowering measured it faster than both cuBLAS and the generated small-M
// kernel. Internal to runtime/cuda: CublasSupport::gemm_row_major (blas.cc)
// runs it for every GEMM whose GemmArgs::tile_rows is set.
//
// Note [Small-M tiled GEMM]
// The generated small-M kernel (compiler/lowering/small_m_gemm.h) gives a warp
// one output column (or four) and a group of up to 8 rows of A, its lanes all
// along K: each 4-byte weight it loads serves at most 8 rows, each row of A is
// loaded again by every column's warp (16 x 512 x 2048 f32 loaded A 2048 times:
// 64 MB of L1 traffic for a 4 MB weight), and every output pays a 5-step
// shuffle tree. Session 20 measured its 16-row channel-mixing GEMMs of
// MLP-Mixer at 7.2-8.5 us against a ~1.3 us HBM floor.
// This kernel cuts a warp's lanes into 4 column lanes x 8 lanes along K: the 8
// lanes of a column lane read one 128-byte line of a weight row in 16-byte
// vectors, and the same line of each of the block's R rows of A (one L1
// wavefront shared by the 4 column lanes); each column lane computes C
// columns. So every weight vector serves R rows and every vector of A 4C
// columns, and a sum needs 3 shuffles. The block's 4 warps (8 where K is long:
// 32 or more steps of 8 vectors, K >= 1024 in f32, so that more weight vectors
// are in flight per block) take equal slices of K, each lane loading 8 vectors
// ahead, and their partial sums are added in shared memory in warp order. The
// grid is ceil(N / 4C) x ceil(M / R). Each lane folds its vectors in
// increasing k, so every output has one summation order: the same bits on
// every launch (eager and cudagraphs agree), within f32 rounding of cuBLAS.
// Tiles: R in {4, 8, 16}, C in {1, 2} and 4 or 8 warps (small_m_tiled_gemm_tiles;
// a tile without warps takes them from K as above); the
// lowering's tuning times each (compiler/lowering/gemm_kernel_tuning.cc) and
// keeps the fastest of them, the generated kernel's variants and cuBLAS.
// A GEMM of more than 64 rows and at most 64 columns (MLP-Mixer's token-mixing
// fc2) runs as its transpose (GemmArgs::tile_transposed; Note [Small-N GEMMs
// as their transpose] in compiler/lowering/small_m_gemm.cc): the weight [N, K]
// is the kernel's A, the activation [M, K] its W, each output stored at C's
// transposed place and the bias read per row of the kernel's product; only
// with GROVE_SMALL_M_TILED_TRANSPOSED=1 (compiler/lowering/small_m_gemm.h:
// its results not yet tested on a GPU).
// GROVE_SMALL_M_TILED=0 leaves it out of the tuning (under keys of their own).
// H100, session 21 r1 (benchmarks/session21_logs/wt-gemm): per layer in a graph
// 16x512x2048 5.1 us (generated kernel 7.4, cuBLAS 11.4), 16x2048x512 6.0 (8.6,
// 16.5), 64x512x512 + gelu 5.4 (7.7, 9.8); MLP-Mixer b1's graph from C++ 235.8 us
// against 279.5 without it. Still latency-bound (ncu: 14% of DRAM bandwidth).
// Tests: gpu_small_m_gemm_test.py (cuda: every tile forced, partial tiles,
// every epilogue and dtype against a float64 reference, eager == cudagraphs
// bitwise, the kernel seen in a profile); SmallMTiledGemm.* and
// GemmTuningTableTest.TiledTimesRoundTripAndAPartialTiledEntryIsSkipped (sim:
// qualification, the forced tile's library step, the exact gelu, the table).
//
// Note [Small-M tiled GEMM over a K x N weight]
// GPT-2's Conv1D computes x @ W with W stored [K, N] (not transpose_b), which
// the kernel above cannot read along K. Session 22 (H200) timed GPT-2 b1's six
// such GEMMs (32 x 768 / 1024 / 256 rows of 256 / 1024) on cuBLAS at ~42 us of
// the call's 78 us of GPU time (simt kernels, each with a split-K reduction).
// The [K, N] form (small_m_tiled_gemm_kn_device.cuh, f32 only) cuts a warp's
// lanes into 8 column lanes x 4 lanes along K: at one k the 8 column lanes
// read one 128-byte line of W's row k (16-byte vectors of 4 columns, C of them
// 32 columns apart), and each lane along K takes 4 consecutive k, so one
// 16-byte vector of each of the block's R rows of A serves its 4 weight rows.
// A block of W warps (4, or 8 where K >= 512) splits K; the 4 lanes along K
// are summed by two shuffles and the warps in shared memory in warp order: one
// summation order per output, the same bits on every launch. Grid ceil(N / 32C)
// x ceil(M / R); the same tiles as above, timed by the same tuning (its keys
// carry tb=0) unless GROVE_SMALL_M_TILED_KN=0 (compiler/lowering/small_m_gemm.h,
// small_m_tiled_kn_enabled). Session 23 r3 (H200) and session 25 (H100): the
// forced-tile cases matched float64, cudagraphs == eager bitwise.
// Tests: gpu_small_m_gemm_test.py's test_k_by_n_weights_match_the_reference_
// with_partial_tiles (cuda: every tile, partial tiles, epilogues, eager ==
// cudagraphs bitwise, the kernel seen in a profile); SmallMTiledGemm.
// KByNFormQualifiesForF32WeightsInWholeVectorsOfN and
// ForcedTileTakesAKByNWeightWhenSwitchedOn (sim).
#pragma once

#include <map>
#include <mutex>
#include <tuple>

#include "runtime/blas.h"
#include "runtime/platform.h"

namespace grove::runtime::cuda_detail {

// The kernels of one cuda platform, loaded on first use.
class SmallMTiledGemm {
 public:
  explicit SmallMTiledGemm(Platform& platform) : platform_(platform) {}
  // Enqueues `args` (small_m_tiled_gemm_qualifies, tile_rows set) on `stream`.
  void launch(StreamHandle stream, const GemmArgs& args);
  // Loads the kernel of every tile of small_m_tiled_gemm_tiles for `dtype`
  // (Note [Tiles loaded for the tuning]).
  void preload(DType dtype);

 private:
  KernelHandle kernel_for(DType dtype, int32_t rows, int32_t columns, int warps, bool kn,
                          bool whole_module);

  Platform& platform_;
  std::mutex mutex_;  // guards the loads (any thread may run GEMMs)
  // (dtype, tile rows, tile columns, warps per block, [K, N] weight) -> the loaded kernel.
  std::map<std::tuple<DType, int32_t, int32_t, int, bool>, KernelHandle> kernels_;
};

}  // namespace grove::runtime::cuda_detail
