// The device code of the tiled small-M GEMM for a weight stored [K, N]
// (Note [Small-M tiled GEMM over a K x N weight], small_m_tiled_gemm.h),
// included by small_m_tiled_gemm_kn_f32_kernel.cu. C[m, n] = epilogue(sum_k
// A[m, k] W[k, n] + bias[n]) for a few rows of A (M <= 64), A row-major
// [M, K], W row-major [K, N] (GPT-2's Conv1D, x @ W), f32, f32 sums.
//
// A block of W warps computes R rows x 32C columns of C. Each warp takes 1 / W
// of K in steps of 16; its lanes are 8 column lanes x 4 lanes along K. At one
// k the 8 column lanes read one 128-byte line of W's row k (a 16-byte vector
// of 4 columns each, C such vectors 32 columns apart), so W is read coalesced
// along N, and each lane along K takes 4 consecutive k: one 16-byte vector of
// each of the block's R rows of A serves the lane's 4 weight rows. A lane
// keeps R x 4C sums, folds its k in increasing order, the 4 lanes along K are
// summed by two shuffles and the W warps' partial sums in shared memory in
// warp order: one summation order per output, the same bits on every launch.
#pragma once

#include <cstdint>

#include "runtime/cuda/small_m_tiled_gemm_device.cuh"
#include "runtime/programmatic_launch_device.h"

namespace {

constexpr int kKnColumnLanes = 8;  // lanes of a warp along N
constexpr int kKnKLanes = 4;       // lanes of a warp along K (kWarp / kKnColumnLanes)
constexpr int kKnVector = 4;       // f32 elements in a 16-byte vector
// Steps of weight vectors a lane loads before folding any.
constexpr int kKnAhead = 2;

// acc[r][j][q] += sum over the lane's 4 k of A[r][k] W[k][column j q], k in order.
template <int R, int C>
__device__ __forceinline__ void fold_kn(float (&acc)[R][C][kKnVector],
                                        const uint4 (&weights)[kKnVector][C],
                                        const float* const (&a_rows)[R], int64_t kv) {
  float w[kKnVector][C][kKnVector];
#pragma unroll
  for (int i = 0; i < kKnVector; ++i) {
#pragma unroll
    for (int j = 0; j < C; ++j) unpack(weights[i][j], w[i][j]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float x[kKnVector];
    unpack(__ldg(reinterpret_cast<const uint4*>(a_rows[r] + kv)), x);
#pragma unroll
    for (int i = 0; i < kKnVector; ++i) {
#pragma unroll
      for (int j = 0; j < C; ++j) {
#pragma unroll
        for (int q = 0; q < kKnVector; ++q) acc[r][j][q] = fmaf(x[i], w[i][j][q], acc[r][j][q]);
      }
    }
  }
}

template <int R, int C, int W>
__device__ __forceinline__ void tiled_gemm_kn(const float* a, int64_t lda, const float* w,
                                              int64_t ldw, const float* bias, float* c, int64_t ldc,
                                              int64_t m, int64_t n, int64_t k, int64_t epilogue) {
  constexpr int V = kKnVector;
  constexpr int64_t kStep = kKnKLanes * V;  // k one step of a warp covers
  constexpr int kColumns = kKnColumnLanes * V * C;
  __shared__ float partial[W][R][kColumns];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int column_lane = lane % kKnColumnLanes;
  const int k_lane = lane / kKnColumnLanes;
  const int64_t block_column = static_cast<int64_t>(blockIdx.x) * kColumns;
  const int64_t block_row = static_cast<int64_t>(blockIdx.y) * R;
  // Columns past C's edge read the last vector (in bounds: N is a multiple of
  // 4) and rows past it the last row; neither is stored.
  int64_t w_columns[C];
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int64_t column = block_column + (j * kKnColumnLanes + column_lane) * V;
    w_columns[j] = column < n ? column : n - V;
  }
  const float* a_rows[R];
  block_rows<float, R>(a, lda, block_row, m, a_rows);
  int64_t first, last;
  warp_steps<W>(k, kStep, warp, first, last);
  // Note [Programmatic dependent launch]: the first steps' weight lines go to
  // L2 while the kernel before drains; nothing is read before the wait.
#pragma unroll
  for (int s = 0; s < kKnAhead; ++s) {
    const int64_t kv = (first + s) * kStep + k_lane * V;
    if (first + s < last && kv < k) {
#pragma unroll
      for (int i = 0; i < V; ++i) {
#pragma unroll
        for (int j = 0; j < C; ++j) prefetch_to_l2(w + (kv + i) * ldw + w_columns[j]);
      }
    }
  }
  wait_for_earlier_kernels();
  allow_next_kernel();
  float acc[R][C][V];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int j = 0; j < C; ++j) {
#pragma unroll
      for (int q = 0; q < V; ++q) acc[r][j][q] = 0.0f;
    }
  }
  for (int64_t step = first; step < last; step += kKnAhead) {
    uint4 weights[kKnAhead][V][C];
#pragma unroll
    for (int s = 0; s < kKnAhead; ++s) {
      // K is a multiple of 4: a lane's 4 k are all in K or all past it.
      const int64_t kv = (step + s) * kStep + k_lane * V;
      const bool in_k = step + s < last && kv < k;
#pragma unroll
      for (int i = 0; i < V; ++i) {
#pragma unroll
        for (int j = 0; j < C; ++j) {
          weights[s][i][j] =
              in_k ? __ldg(reinterpret_cast<const uint4*>(w + (kv + i) * ldw + w_columns[j]))
                   : make_uint4(0, 0, 0, 0);
        }
      }
    }
#pragma unroll
    for (int s = 0; s < kKnAhead; ++s) {
      const int64_t kv = (step + s) * kStep + k_lane * V;
      if (step + s < last && kv < k) fold_kn<R, C>(acc, weights[s], a_rows, kv);
    }
  }
  // The four lanes along K of each column, then the warps in order.
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int j = 0; j < C; ++j) {
#pragma unroll
      for (int q = 0; q < V; ++q) {
#pragma unroll
        for (int offset = kKnColumnLanes; offset < kWarp; offset *= 2) {
          acc[r][j][q] += __shfl_xor_sync(0xffffffffu, acc[r][j][q], offset);
        }
      }
    }
  }
  if (k_lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int j = 0; j < C; ++j) {
#pragma unroll
        for (int q = 0; q < V; ++q) {
          partial[warp][r][(j * kKnColumnLanes + column_lane) * V + q] = acc[r][j][q];
        }
      }
    }
  }
  __syncthreads();
  for (int out = threadIdx.x; out < R * kColumns; out += blockDim.x) {
    const int r = out / kColumns;
    const int column_in_block = out % kColumns;
    const int64_t row = block_row + r;
    const int64_t column = block_column + column_in_block;
    if (row >= m || column >= n) continue;
    float sum = warps_sum<W, R, kColumns>(partial, r, column_in_block);
    if (epilogue != kEpilogueNone) sum += bias[column];
    c[row * ldc + column] = apply_epilogue(sum, epilogue);
  }
}

}  // namespace

// grove_small_m_tiled_gemm_kn_f32_r<R>_c<C>_w<W>(a, lda, w, ldw, bias, c, ldc, m, n, k,
// epilogue): the kernels small_m_tiled_gemm.cc launches for a [K, N] weight, with
// 32 W threads per block and a grid of (ceil(n / (32 C)), ceil(m / R)). bias:
// null for epilogue 0.
#define GROVE_SMALL_M_TILED_GEMM_KN(NAME, R, C, W)                                                \
  extern "C" __global__ void __launch_bounds__(W* kWarp)                                          \
      NAME(const float* a, int64_t lda, const float* w, int64_t ldw, const float* bias, float* c, \
           int64_t ldc, int64_t m, int64_t n, int64_t k, int64_t epilogue) {                      \
    tiled_gemm_kn<R, C, W>(a, lda, w, ldw, bias, c, ldc, m, n, k, epilogue);                      \
  }

#define GROVE_SMALL_M_TILED_GEMM_KN_WARPS(W)                                         \
  GROVE_SMALL_M_TILED_GEMM_KN(grove_small_m_tiled_gemm_kn_f32_r4_c1_w##W, 4, 1, W)   \
  GROVE_SMALL_M_TILED_GEMM_KN(grove_small_m_tiled_gemm_kn_f32_r4_c2_w##W, 4, 2, W)   \
  GROVE_SMALL_M_TILED_GEMM_KN(grove_small_m_tiled_gemm_kn_f32_r8_c1_w##W, 8, 1, W)   \
  GROVE_SMALL_M_TILED_GEMM_KN(grove_small_m_tiled_gemm_kn_f32_r8_c2_w##W, 8, 2, W)   \
  GROVE_SMALL_M_TILED_GEMM_KN(grove_small_m_tiled_gemm_kn_f32_r16_c1_w##W, 16, 1, W) \
  GROVE_SMALL_M_TILED_GEMM_KN(grove_small_m_tiled_gemm_kn_f32_r16_c2_w##W, 16, 2, W)
