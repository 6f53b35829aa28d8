// Source of small_m_gemv_kernel_ptx.inc (regenerate_ptx.sh): the bandwidth-
// bound GEMV of cuda's BLAS for decode-shaped GEMMs, Note [Small-M GEMV]
// (small_m_gemv.h). C[m, n] = sum_k A[m, k] W[n, k] for M = 1, 2, 4 or 8 rows of A,
// W row-major [N, K] (a linear layer's weight), bf16 or f16 storage, f32 sums.
// One warp per output column n: each lane streams 16-byte vectors of W's row
// (up to sixteen loads in flight per lane), multiplies them with the same vectors of
// every row of A (read through the read-only cache: A is small and every warp
// of the grid reads it) and the warp's lanes are summed by shuffles.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "runtime/async_copy_device.h"
#include "runtime/programmatic_launch_device.h"
#include "runtime/cuda/vector_unpack_device.cuh"
#include "runtime/cuda/streamed_gemv_flags.h"

namespace {

constexpr int kWarp = 32;
// Vectors of W each lane loads before it folds any: 16 (8 KiB per warp in
// flight) for one row of A, 8 for two, 4 where more rows make each fold longer.
template <int M>
constexpr int kInFlight = M >= 4 ? 4 : (M == 2 ? 8 : 16);

__device__ __forceinline__ void store(__nv_bfloat16* c, float value) {
  *c = __float2bfloat16_rn(value);
}
__device__ __forceinline__ void store(__half* c, float value) { *c = __float2half_rn(value); }
__device__ __forceinline__ float widen(__nv_bfloat16 value) { return __bfloat162float(value); }
__device__ __forceinline__ float widen(__half value) { return __half2float(value); }

// acc[m] += <A row m's vector `index`, w>.
template <typename T, int M>
__device__ __forceinline__ void fold(float (&acc)[M], const uint4& w, const T* a, int64_t lda,
                                     int64_t index) {
  float weights[8];
  unpack(w, weights, T());
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(a + m * lda) + index);
    float xs[8];
    unpack(x, xs, T());
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[m] = fmaf(xs[i], weights[i], acc[m]);
  }
}

// accumulate: C += the product (beta 1), rounded once; else C = the product.
template <typename T, int M>
__device__ __forceinline__ void gemv(const T* a, int64_t lda, const T* w, int64_t ldw, T* c,
                                     int64_t ldc, int64_t n, int64_t k, int64_t accumulate) {
  const int lane = threadIdx.x % kWarp;
  const int64_t column =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const uint4* row = reinterpret_cast<const uint4*>(w + (column < n ? column : 0) * ldw);
  const int64_t vectors = k / 8;
  // Note [Programmatic dependent launch]: W's first batch goes to L2 while the
  // kernel before drains; nothing is read before the wait.
  if (column < n) {
#pragma unroll
    for (int j = 0; j < kInFlight<M>; ++j) {
      if (lane + j * kWarp < vectors) prefetch_to_l2(row + lane + j * kWarp);
    }
  }
  wait_for_earlier_kernels();
  allow_next_kernel();
  if (column >= n) return;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  int64_t index = lane;
  for (; index + (kInFlight<M> - 1) * kWarp < vectors; index += kInFlight<M> * kWarp) {
    uint4 loaded[kInFlight<M>];
#pragma unroll
    for (int j = 0; j < kInFlight<M>; ++j) loaded[j] = __ldg(row + index + j * kWarp);
#pragma unroll
    for (int j = 0; j < kInFlight<M>; ++j) fold<T, M>(acc, loaded[j], a, lda, index + j * kWarp);
  }
  // The rest (fewer than kInFlight vectors per lane) as one batch of
  // predicated loads, still folded in increasing index.
  if (index < vectors) {
    uint4 loaded[kInFlight<M>];
#pragma unroll
    for (int j = 0; j < kInFlight<M>; ++j) {
      if (index + j * kWarp < vectors) loaded[j] = __ldg(row + index + j * kWarp);
    }
#pragma unroll
    for (int j = 0; j < kInFlight<M>; ++j) {
      if (index + j * kWarp < vectors) fold<T, M>(acc, loaded[j], a, lda, index + j * kWarp);
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], offset);
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      T* out = c + m * ldc + column;
      store(out, accumulate != 0 ? acc[m] + widen(*out) : acc[m]);
    }
  }
}

// Note [Streamed GEMV] (small_m_gemv.h): one row of A; a grid of a few
// blocks per SM whose warps take rows column, column + warps, ...; each thread
// streams its own vectors of W (lane, lane + 32, ... of each of its rows, the
// order gemv<T, 1> folds them in: the same sums, bit for bit) through
// kSlots 16-byte slots of shared memory that cp.async fills kSlots vectors
// ahead of the fold. The first kSlots are requested before the wait, while
// the kernel before still runs. A thread reads only slots it filled itself,
// so no barrier is needed.
constexpr int kStreamThreads = 128;
// kSlots 24: 48 KiB of slots per block, so two blocks of one kernel fit an SM
// beside two of the next kernel's; 32 (the _s32 entry points, 64 KiB of
// dynamic shared memory): Note [Streamed GEMV slots] (small_m_gemv.h).
// kAShared: the block copies A (K <= kSharedAElements) into shared memory
// after its wait and folds from there (the _as entry points, 16 slots: Note
// [Streamed GEMV holds A in shared memory], small_m_gemv.h); else each lane
// loads its vector of A right before folding it.
constexpr int kSharedAElements = 8192;
constexpr int kSharedASlots = 16;
template <typename T, int kSlots, bool kAShared>
__device__ __forceinline__ void streamed_gemv(const T* a, const T* w, int64_t ldw, T* c, int64_t n,
                                              int64_t k, int64_t accumulate, int64_t flags) {
  namespace bits = grove::runtime::streamed_gemv_flags;
  const bool evict_first = (flags & bits::kEvictFirst) != 0;
  const bool allow_next_first = (flags & bits::kAllowNextFirst) != 0;
  const bool residual_first = accumulate != 0 && (flags & bits::kResidualFirst) != 0;
  static_assert(!kAShared || kSlots == kSharedASlots, "A in shared memory takes 16 slots");
  // 24 slots, and 16 beside A, are static shared memory (48 KiB); 32 dynamic.
  uint4(*slots)[kStreamThreads];
  uint4* shared_a = nullptr;
  if constexpr (kAShared) {
    __shared__ uint4 static_slots[kSlots][kStreamThreads];
    __shared__ uint4 static_a[kSharedAElements / 8];
    slots = static_slots;
    shared_a = static_a;
  } else if constexpr (kSlots == 24) {
    __shared__ uint4 static_slots[kSlots][kStreamThreads];
    slots = static_slots;
  } else {
    extern __shared__ uint4 slots_memory[];  // [kSlots][kStreamThreads]
    slots = reinterpret_cast<uint4(*)[kStreamThreads]>(slots_memory);
  }
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kStreamThreads / kWarp);
  const int64_t first_column =
      static_cast<int64_t>(blockIdx.x) * (kStreamThreads / kWarp) + threadIdx.x / kWarp;
  const int64_t vectors = k / 8;
  const int64_t per_lane = lane < vectors ? (vectors - lane + kWarp - 1) / kWarp : 0;
  const auto* x = reinterpret_cast<const uint4*>(a);
  uint4* mine = &slots[0][threadIdx.x];
  const uint64_t policy = evict_first_policy();
  // The next vector to request: row `issue_column` of W, this lane's `issue_step`-th.
  int64_t issue_column = per_lane > 0 ? first_column : n;
  int64_t issue_step = 0;
  auto request = [&](int slot) {
    if (issue_column < n) {
      const uint4* row = reinterpret_cast<const uint4*>(w + issue_column * ldw);
      copy_weights_async_16(mine + slot * kStreamThreads, row + lane + issue_step * kWarp,
                            evict_first, policy);
      if (++issue_step == per_lane) {
        issue_step = 0;
        issue_column += warps;
      }
    }
    commit_copies();  // empty past the end: kSlots groups stay pending
  };
  // Note [Programmatic dependent launch]: W is read-only; its first vectors
  // are requested while the kernel before drains; A and C only after the wait.
  // Note [Streamed GEMV allows the next kernel first]: or the next kernel first.
  if (allow_next_first) allow_next_kernel();
#pragma unroll
  for (int slot = 0; slot < kSlots; ++slot) request(slot);
  // Note [Streamed GEMV prefetches columns into L2].
  prefetch_columns_to_l2(reinterpret_cast<const uint16_t*>(w), ldw, k, n, first_column, warps,
                         static_cast<int>((flags >> bits::kPrefetchColumnsShift) & 0xff), 1, 0,
                         lane);
  wait_for_earlier_kernels();
  if (!allow_next_first) allow_next_kernel();
  if constexpr (kAShared) {
    // A is the kernel before's output: read only after the wait, every vector by one thread,
    // all loads in flight at once; the barrier is the block's only one.
    for (int64_t i = threadIdx.x; i < vectors; i += kStreamThreads) shared_a[i] = __ldg(x + i);
    __syncthreads();
  }
  int slot = 0;
  for (int64_t column = first_column; column < n; column += warps) {
    float acc = 0.0f;
    // Note [Streamed GEMV reads C first]: the accumulated value is in flight during the fold.
    const float residual = residual_first && lane == 0 ? widen(c[column]) : 0.0f;
    for (int64_t step = 0; step < per_lane; ++step) {
      uint4 x_vector;  // requested before the slot's wait, folded after it
      if constexpr (!kAShared) x_vector = __ldg(x + lane + step * kWarp);
      wait_copies<kSlots - 1>();
      float weights[8];
      unpack(mine[slot * kStreamThreads], weights, T());
      float xs[8];
      if constexpr (kAShared) x_vector = shared_a[lane + step * kWarp];
      unpack(x_vector, xs, T());
#pragma unroll
      for (int i = 0; i < 8; ++i) acc = fmaf(xs[i], weights[i], acc);
      request(slot);  // the fold above has read the slot
      slot = slot + 1 == kSlots ? 0 : slot + 1;
    }
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    }
    if (lane == 0) {
      T* out = c + column;
      store(out, accumulate != 0 ? acc + (residual_first ? residual : widen(*out)) : acc);
    }
  }
  wait_copies<0>();
}

}  // namespace

// grove_small_m_gemv_<dtype>_m<M>(a, lda, w, ldw, c, ldc, n, k, accumulate): the kernels
// small_m_gemv.cc launches, one per storage type and row count (M = 1, 2, 4, 8:
// the batch buckets decode uses; other M go to cuBLAS).
#define GROVE_SMALL_M_GEMV(NAME, T, M)                                                     \
  extern "C" __global__ void __launch_bounds__(128)                                        \
      NAME(const T* a, int64_t lda, const T* w, int64_t ldw, T* c, int64_t ldc, int64_t n, \
           int64_t k, int64_t accumulate) {                                                \
    gemv<T, M>(a, lda, w, ldw, c, ldc, n, k, accumulate);                                  \
  }

GROVE_SMALL_M_GEMV(grove_small_m_gemv_bf16_m1, __nv_bfloat16, 1)
GROVE_SMALL_M_GEMV(grove_small_m_gemv_bf16_m2, __nv_bfloat16, 2)
GROVE_SMALL_M_GEMV(grove_small_m_gemv_bf16_m4, __nv_bfloat16, 4)
GROVE_SMALL_M_GEMV(grove_small_m_gemv_bf16_m8, __nv_bfloat16, 8)
GROVE_SMALL_M_GEMV(grove_small_m_gemv_f16_m1, __half, 1)
GROVE_SMALL_M_GEMV(grove_small_m_gemv_f16_m2, __half, 2)
GROVE_SMALL_M_GEMV(grove_small_m_gemv_f16_m4, __half, 4)
GROVE_SMALL_M_GEMV(grove_small_m_gemv_f16_m8, __half, 8)

// grove_small_m_gemv_streamed_<dtype>[_s32](a, w, ldw, c, n, k, accumulate,
// flags): one row of A, Note [Streamed GEMV]; launched with
// kStreamThreads threads per block and SLOTS * kStreamThreads * 16 bytes of
// dynamic shared memory. flags: runtime/cuda/streamed_gemv_flags.h.
#define GROVE_STREAMED_GEMV(NAME, T, SLOTS, A_SHARED)                                           \
  extern "C" __global__ void __launch_bounds__(kStreamThreads)                                  \
      NAME(const T* a, const T* w, int64_t ldw, T* c, int64_t n, int64_t k, int64_t accumulate, \
           int64_t flags) {                                                                     \
    streamed_gemv<T, SLOTS, A_SHARED>(a, w, ldw, c, n, k, accumulate, flags);                   \
  }

GROVE_STREAMED_GEMV(grove_small_m_gemv_streamed_bf16, __nv_bfloat16, 24, false)
GROVE_STREAMED_GEMV(grove_small_m_gemv_streamed_f16, __half, 24, false)
GROVE_STREAMED_GEMV(grove_small_m_gemv_streamed_bf16_s32, __nv_bfloat16, 32, false)
GROVE_STREAMED_GEMV(grove_small_m_gemv_streamed_f16_s32, __half, 32, false)
GROVE_STREAMED_GEMV(grove_small_m_gemv_streamed_bf16_as, __nv_bfloat16, kSharedASlots, true)
GROVE_STREAMED_GEMV(grove_small_m_gemv_streamed_f16_as, __half, kSharedASlots, true)

