// The device code of the tiled small-M GEMM of cuda's BLAS, Note [Small-M
// tiled GEMM] (small_m_tiled_gemm.h), included by one source per storage type
// (small_m_tiled_gemm_<dtype>_kernel.cu, each its own PTX: a process JIT-compiles
// only the types it runs). C[m, n] = epilogue(sum_k A[m, k] W[n, k] + bias[n])
// for a few rows of A (M <= 64), W row-major [N, K] (a linear layer's weight),
// f32, bf16 or f16 storage, f32 sums.
//
// A block of W warps (4, or 8 for long K: small_m_tiled_gemm.cc) computes R
// rows x 4C columns of C. Each warp takes 1 / W of K; its lanes are 4 column
// groups (C columns each) x 8 lanes along K, so eight lanes read one 128-byte
// line of a weight row (coalesced 16-byte vectors) and the same line of each
// row of A (one L1 wavefront, shared by the four column groups). Every vector
// of A a lane loads serves C columns and every weight vector R rows. The eight
// lanes of a column are summed by three shuffles, the W warps' partial sums in
// shared memory in warp order, so each output's sum has one fixed order (W is
// a function of K): the same bits on every launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "runtime/programmatic_launch_device.h"
#include "runtime/cuda/vector_unpack_device.cuh"

namespace {

constexpr int kWarp = 32;
constexpr int kKLanes = 8;       // lanes of a warp along K
constexpr int kColumnLanes = 4;  // lanes of a warp along N (kWarp / kKLanes)
// Steps of weight vectors a lane loads before folding any: 8 vectors in flight.
template <int C>
constexpr int kWeightsAhead = 8 / C;

// Epilogue codes (small_m_tiled_gemm.cc passes them): none, + bias, gelu(+ bias)
// with the tanh approximation cuBLASLt uses, relu(+ bias), and the exact gelu.
constexpr int64_t kEpilogueNone = 0;
constexpr int64_t kEpilogueBiasGelu = 2;
constexpr int64_t kEpilogueBiasRelu = 3;
// + bias, then the exact gelu as grove's importer writes it: (x * 0.5) * (1 +
// erf(x * 0.7071067811865476)), on f32 (Note [Exact gelu in the small-M GEMM]).
constexpr int64_t kEpilogueBiasExactGelu = 4;

template <typename T>
constexpr int kVector = 16 / sizeof(T);  // elements in a 16-byte vector

__device__ __forceinline__ void unpack(const uint4& v, float (&out)[4]) {
  out[0] = __uint_as_float(v.x);
  out[1] = __uint_as_float(v.y);
  out[2] = __uint_as_float(v.z);
  out[3] = __uint_as_float(v.w);
}

template <typename T>
__device__ __forceinline__ void unpack_vector(const uint4& v, float (&out)[kVector<T>]) {
  if constexpr (sizeof(T) == 4) {
    unpack(v, out);
  } else {
    unpack(v, out, T());
  }
}

__device__ __forceinline__ float widen(float value) { return value; }
__device__ __forceinline__ float widen(__nv_bfloat16 value) { return __bfloat162float(value); }
__device__ __forceinline__ float widen(__half value) { return __half2float(value); }
__device__ __forceinline__ void store(float* c, float value) { *c = value; }
__device__ __forceinline__ void store(__nv_bfloat16* c, float value) {
  *c = __float2bfloat16_rn(value);
}
__device__ __forceinline__ void store(__half* c, float value) { *c = __float2half_rn(value); }

__device__ __forceinline__ float apply_epilogue(float value, int64_t epilogue) {
  if (epilogue == kEpilogueBiasGelu) {
    const float inner = 0.7978845608028654f * (value + 0.044715f * value * value * value);
    return 0.5f * value * (1.0f + tanhf(inner));
  }
  if (epilogue == kEpilogueBiasRelu) return value > 0.0f ? value : 0.0f;
  if (epilogue == kEpilogueBiasExactGelu) {
    return (value * 0.5f) * (erff(value * 0.7071067811865476f) + 1.0f);
  }
  return value;
}

// The block's R rows of A; rows past A's edge read its last row (in bounds)
// and store nothing.
template <typename T, int R>
__device__ __forceinline__ void block_rows(const T* a, int64_t lda, int64_t block_row, int64_t m,
                                           const T* (&a_rows)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t row = block_row + r;
    a_rows[r] = a + (row < m ? row : m - 1) * lda;
  }
}

// The steps of K a warp of W takes: [first, last) of ceil(k / step).
template <int W>
__device__ __forceinline__ void warp_steps(int64_t k, int64_t step, int warp, int64_t& first,
                                           int64_t& last) {
  const int64_t steps = (k + step - 1) / step;
  first = steps * warp / W;
  last = steps * (warp + 1) / W;
}

// One output's sum: the W warps' partial sums added in warp order.
template <int W, int R, int kColumns>
__device__ __forceinline__ float warps_sum(const float (&partial)[W][R][kColumns], int r,
                                           int column_in_block) {
  float sum = partial[0][r][column_in_block];
#pragma unroll
  for (int q = 1; q < W; ++q) sum += partial[q][r][column_in_block];
  return sum;
}

// acc[r][j] += <A row r's vector at kv, W column j's vector>, elements in order.
template <typename T, int R, int C>
__device__ __forceinline__ void fold(float (&acc)[R][C], const uint4 (&weights)[C],
                                     const T* const (&a_rows)[R], int64_t kv) {
  constexpr int V = kVector<T>;
  float w[C][V];
#pragma unroll
  for (int j = 0; j < C; ++j) unpack_vector<T>(weights[j], w[j]);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const uint4 loaded = __ldg(reinterpret_cast<const uint4*>(a_rows[r] + kv));
    float x[V];
    unpack_vector<T>(loaded, x);
#pragma unroll
    for (int j = 0; j < C; ++j) {
#pragma unroll
      for (int i = 0; i < V; ++i) acc[r][j] = fmaf(x[i], w[j][i], acc[r][j]);
    }
  }
}

// W warps per block, each taking 1 / W of K.
template <typename T, int R, int C, int W>
__device__ __forceinline__ void tiled_gemm(const T* a, int64_t lda, const T* w, int64_t ldw,
                                           const T* bias, T* c, int64_t ldc, int64_t m, int64_t n,
                                           int64_t k, int64_t epilogue, int64_t transposed) {
  constexpr int V = kVector<T>;
  constexpr int64_t kStep = kKLanes * V;  // elements of K one step of a warp covers
  constexpr int kColumns = kColumnLanes * C;
  constexpr int kAhead = kWeightsAhead<C>;
  __shared__ float partial[W][R][kColumns];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int k_lane = lane % kKLanes;
  const int column_lane = lane / kKLanes;
  const int64_t block_column = static_cast<int64_t>(blockIdx.x) * kColumns;
  const int64_t block_row = static_cast<int64_t>(blockIdx.y) * R;
  // Rows and columns past C's edge read the last one (in bounds) and store nothing.
  const T* w_rows[C];
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int64_t column = block_column + column_lane * C + j;
    w_rows[j] = w + (column < n ? column : n - 1) * ldw;
  }
  const T* a_rows[R];
  block_rows<T, R>(a, lda, block_row, m, a_rows);
  int64_t first, last;
  warp_steps<W>(k, kStep, warp, first, last);
  // Note [Programmatic dependent launch]: the weights of the first steps go to
  // L2 while the kernel before drains; nothing is read before the wait.
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    const int64_t kv = (first + s) * kStep + k_lane * V;
    if (first + s < last && kv < k) {
#pragma unroll
      for (int j = 0; j < C; ++j) prefetch_to_l2(w_rows[j] + kv);
    }
  }
  wait_for_earlier_kernels();
  allow_next_kernel();
  float acc[R][C];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int j = 0; j < C; ++j) acc[r][j] = 0.0f;
  }
  for (int64_t step = first; step < last; step += kAhead) {
    uint4 weights[kAhead][C];
#pragma unroll
    for (int s = 0; s < kAhead; ++s) {
      const int64_t kv = (step + s) * kStep + k_lane * V;
#pragma unroll
      for (int j = 0; j < C; ++j) {
        weights[s][j] = step + s < last && kv < k
                            ? __ldg(reinterpret_cast<const uint4*>(w_rows[j] + kv))
                            : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int s = 0; s < kAhead; ++s) {
      const int64_t kv = (step + s) * kStep + k_lane * V;
      if (step + s < last && kv < k) fold<T, R, C>(acc, weights[s], a_rows, kv);
    }
  }
  // The eight lanes along K of each column, then the warps in order.
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int j = 0; j < C; ++j) {
#pragma unroll
      for (int offset = 1; offset < kKLanes; offset *= 2) {
        acc[r][j] += __shfl_xor_sync(0xffffffffu, acc[r][j], offset);
      }
    }
  }
  if (k_lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int j = 0; j < C; ++j) partial[warp][r][column_lane * C + j] = acc[r][j];
    }
  }
  __syncthreads();
  for (int out = threadIdx.x; out < R * kColumns; out += blockDim.x) {
    // Neighbouring threads store neighbouring elements of C: along a row of
    // the product, or down its columns where C is its transpose.
    const int r = transposed != 0 ? out % R : out / kColumns;
    const int column_in_block = transposed != 0 ? out / R : out % kColumns;
    const int64_t row = block_row + r;
    const int64_t column = block_column + column_in_block;
    if (row >= m || column >= n) continue;
    float sum = warps_sum<W, R, kColumns>(partial, r, column_in_block);
    // Transposed (Note [Small-N GEMMs as their transpose]): output (row,
    // column) of the product is C[column, row], and the bias is per row.
    if (epilogue != kEpilogueNone) sum += widen(bias[transposed != 0 ? row : column]);
    store(transposed != 0 ? c + column * ldc + row : c + row * ldc + column,
          apply_epilogue(sum, epilogue));
  }
}

}  // namespace

// grove_small_m_tiled_gemm_<dtype>_r<R>_c<C>_w<W>(a, lda, w, ldw, bias, c, ldc, m, n,
// k, epilogue, transposed): the kernels small_m_tiled_gemm.cc launches with 32 W
// threads per block and a grid of (ceil(n / (4 C)), ceil(m / R)). bias: null
// for epilogue 0. transposed: C is the product's transpose (C[j, i] for its
// (i, j), ldc C's), its bias one per row of the product.
#define GROVE_SMALL_M_TILED_GEMM(NAME, T, R, C, W)                                            \
  extern "C" __global__ void __launch_bounds__(W * kWarp)                                     \
      NAME(const T* a, int64_t lda, const T* w, int64_t ldw, const T* bias, T* c, int64_t ldc, \
           int64_t m, int64_t n, int64_t k, int64_t epilogue, int64_t transposed) {           \
    tiled_gemm<T, R, C, W>(a, lda, w, ldw, bias, c, ldc, m, n, k, epilogue, transposed);      \
  }

#define GROVE_SMALL_M_TILED_GEMM_WARPS(TYPE_NAME, T, W)                                         \
  GROVE_SMALL_M_TILED_GEMM(grove_small_m_tiled_gemm_##TYPE_NAME##_r4_c1_w##W, T, 4, 1, W)   \
  GROVE_SMALL_M_TILED_GEMM(grove_small_m_tiled_gemm_##TYPE_NAME##_r4_c2_w##W, T, 4, 2, W)   \
  GROVE_SMALL_M_TILED_GEMM(grove_small_m_tiled_gemm_##TYPE_NAME##_r8_c1_w##W, T, 8, 1, W)   \
  GROVE_SMALL_M_TILED_GEMM(grove_small_m_tiled_gemm_##TYPE_NAME##_r8_c2_w##W, T, 8, 2, W)   \
  GROVE_SMALL_M_TILED_GEMM(grove_small_m_tiled_gemm_##TYPE_NAME##_r16_c1_w##W, T, 16, 1, W) \
  GROVE_SMALL_M_TILED_GEMM(grove_small_m_tiled_gemm_##TYPE_NAME##_r16_c2_w##W, T, 16, 2, W)
