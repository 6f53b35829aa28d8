// Source of rms_norm_gemv_kernel_ptx.inc (regenerate_ptx.sh): LLaMA's RMSNorm
// of a few rows followed by a linear layer, as one bandwidth-bound kernel,
// Note [RMSNorm GEMV] (rms_norm_gemv_kernel.h). C[m, n] = sum_k A[m, k] W[n, k]
// with A[m, k] = bf16(g[k] * (x[m, k] * rstd[m])), rstd[m] = rsqrt(mean_k
// x[m, k]^2 + eps), for one row (M = 1: rms_norm_gemv_refusal), bf16
// storage, f32 arithmetic.
// Each block's threads first issue their first batch of W loads (they depend
// on nothing), then sum the rows' squares (every block: x is a few KiB in
// L2) and fold; one warp per output column n, as the small-M GEMV
// (runtime/cuda/small_m_gemv_kernel.cu). The gated variant (LLaMA's MLP)
// reads rows n (gate) and n + N (up) of W [2N, K] and stores
// bf16(g * sigmoid(g) * u) of the rounded gate and up sums: SwiGLU's input
// to the down projection, without the gate/up activations in memory.
#include <cstdint>

#include "runtime/async_copy_device.h"
#include "runtime/programmatic_launch_device.h"
#include "runtime/cuda/streamed_gemv_flags.h"

namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 128;  // __launch_bounds__ below; four columns per block
// Vectors of each W row a lane loads before it folds any (as the small-M
// GEMV: 16 for one row of A, 8 for two, 4 for more; half per row when gated).
// The first batch goes out before the norm's statistics are summed; later
// batches (K beyond the batch) are loaded and folded one after the other.
template <int M, bool kGated>
constexpr int kInFlight = (M >= 4 ? 4 : (M == 2 ? 8 : 16)) / (kGated ? 2 : 1);

__device__ __forceinline__ void unpack(const uint4& v, float (&out)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// Round to nearest even at bf16, as a stored value would be.
__device__ __forceinline__ float round_bf16(float value) {
  uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return value;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return __uint_as_float(bits & 0xffff0000u);
}

__device__ __forceinline__ uint16_t to_bf16_bits(float value) {
  return static_cast<uint16_t>(__float_as_uint(round_bf16(value)) >> 16);
}

// a[m] = the normalized row m's vector `index`: bf16(g * (x * rstd)).
template <int M>
__device__ __forceinline__ void normalized(float (&a)[M][8], const uint4* x, int64_t ldx,
                                           const uint4* gain, const float (&rstd)[M],
                                           int64_t index) {
  float g[8];
  unpack(__ldg(gain + index), g);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float xs[8];
    unpack(__ldg(x + m * ldx + index), xs);
#pragma unroll
    for (int i = 0; i < 8; ++i) a[m][i] = round_bf16(g[i] * (xs[i] * rstd[m]));
  }
}

// acc[m] += <a[m], w> in element order.
template <int M>
__device__ __forceinline__ void dot(float (&acc)[M], const uint4& w, const float (&a)[M][8]) {
  float weights[8];
  unpack(w, weights);
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[m] = fmaf(a[m][i], weights[i], acc[m]);
  }
}

template <int M>
__device__ __forceinline__ void warp_sum(float (&acc)[M]) {
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], offset);
    }
  }
}

// n: output columns (the gated variant's W has 2n rows). Out: uint16_t
// (bf16 results), or float (the bf16 result widened: an LM head's f32 logits
// without a cast kernel).
template <int M, bool kGated, typename Out>
__device__ __forceinline__ void rms_norm_gemv(const uint16_t* x_bits, int64_t ldx,
                                              const uint16_t* gain_bits, const uint16_t* w_bits,
                                              int64_t ldw, Out* c, int64_t ldc, int64_t n,
                                              int64_t k, float eps) {
  __shared__ float partial[kThreads / kWarp][M];
  __shared__ float rstd[M];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int64_t column = static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp) + warp;
  const bool has_column = column < n;
  const int64_t vectors = k / 8;
  const int64_t row_index = has_column ? column : 0;
  const uint4* gate_row = reinterpret_cast<const uint4*>(w_bits + row_index * ldw);
  const uint4* up_row = reinterpret_cast<const uint4*>(w_bits + (row_index + n) * ldw);
  const auto* x = reinterpret_cast<const uint4*>(x_bits);
  const auto* gain = reinterpret_cast<const uint4*>(gain_bits);
  const int64_t ldx_vectors = ldx / 8;
  constexpr int kBatch = kInFlight<M, kGated>;
  constexpr int64_t kStride = static_cast<int64_t>(kBatch) * kWarp;
  uint4 loaded[kBatch];
  uint4 loaded_up[kGated ? kBatch : 1];
  auto load_batch = [&](int64_t start) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (has_column && start + j * kWarp < vectors) {
        loaded[j] = __ldg(gate_row + start + j * kWarp);
        if constexpr (kGated) loaded_up[j] = __ldg(up_row + start + j * kWarp);
      }
    }
  };
  const int64_t first = lane;
  // Note [Programmatic dependent launch]: the first batch goes to L2 while the
  // kernel before drains, then into registers while the statistics are summed.
  if (has_column) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (first + j * kWarp < vectors) {
        prefetch_to_l2(gate_row + first + j * kWarp);
        if constexpr (kGated) prefetch_to_l2(up_row + first + j * kWarp);
      }
    }
  }
  wait_for_earlier_kernels();
  allow_next_kernel();
  load_batch(first);  // in flight while the rows' statistics are summed
  // Each row's sum of squares: thread t takes vectors t, t + kThreads, ...
  // (f32, in that order), then the warps' shuffle trees and the warps in order.
  float sums[M];
#pragma unroll
  for (int m = 0; m < M; ++m) sums[m] = 0.0f;
  for (int64_t v = threadIdx.x; v < vectors; v += kThreads) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xs[8];
      unpack(__ldg(x + m * ldx_vectors + v), xs);
#pragma unroll
      for (int i = 0; i < 8; ++i) sums[m] = fmaf(xs[i], xs[i], sums[m]);
    }
  }
  warp_sum<M>(sums);
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) partial[warp][m] = sums[m];
  }
  __syncthreads();
  if (threadIdx.x < M) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kThreads / kWarp; ++w) total += partial[w][threadIdx.x];
    rstd[threadIdx.x] = rsqrtf(total / static_cast<float>(k) + eps);
  }
  __syncthreads();
  if (!has_column) return;
  float row_rstd[M];
#pragma unroll
  for (int m = 0; m < M; ++m) row_rstd[m] = rstd[m];
  float acc[M];
  float acc_up[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = acc_up[m] = 0.0f;
  for (int64_t index = first; index < vectors; index += kStride) {
    if (index != first) load_batch(index);
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (index + j * kWarp < vectors) {
        float a[M][8];
        normalized<M>(a, x, ldx_vectors, gain, row_rstd, index + j * kWarp);
        dot<M>(acc, loaded[j], a);
        if constexpr (kGated) dot<M>(acc_up, loaded_up[j], a);
      }
    }
  }
  warp_sum<M>(acc);
  if constexpr (kGated) warp_sum<M>(acc_up);
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float value = acc[m];
      if constexpr (kGated) {
        // As the unfused ops: the GEMM stores gate and up, then silu(gate) * up.
        const float gate = round_bf16(acc[m]);
        const float up = round_bf16(acc_up[m]);
        value = gate * (1.0f / (1.0f + expf(-gate))) * up;
      }
      if constexpr (sizeof(Out) == 2) {
        c[m * ldc + column] = to_bf16_bits(value);
      } else {
        c[m * ldc + column] = round_bf16(value);
      }
    }
  }
}

// Note [Streamed GEMV] (runtime/cuda/small_m_gemv.h) for one row: a grid of
// a few blocks per SM whose warps take columns w, w + warps, ...; each thread
// streams its own vectors of W (gated: its gate and up vectors, two slots a
// step) through kSlots 16-byte shared-memory slots that cp.async fills ahead
// of the fold, the first requested before the wait. rstd is summed as
// rms_norm_gemv<1> sums it (same threads, same order); the block then writes
// the normalized row bf16(g * (x * rstd)) once into shared memory (exact in
// bf16), and each lane folds the same vectors in the same order: identical
// bits. (Normalizing again for every weight vector, as rms_norm_gemv does,
// left the streamed kernel's few warps an SM compute-bound: the 1B step took
// 1552 us against 1251, H100 round 1 of session 18; normalized once, 1075.0
// against 1247.2 in round 2.)
// kSlots 20: 40 KiB of slots per block of kThreads (with the normalized row
// within 48 KiB); 28 (the _s28 entry points): Note [Streamed GEMV slots]. Even,
// so a gated step's pair never wraps. 20 slots are static shared memory, 28 dynamic.
// The longest row the streamed kernels normalize into shared memory
// (kStreamedMaxK in rms_norm_gemv_kernel.cc; longer rows take rms_norm_gemv).
constexpr int kStreamedMaxK = 3072;

// The row's vectors a thread of a streamed kernel takes in normalize_row (K <= kStreamedMaxK).
constexpr int kRowVectors = (kStreamedMaxK / 8 + kThreads - 1) / kThreads;

// Note [RMSNorm GEMV keeps its row in registers] (runtime/cuda/small_m_gemv.h):
// thread t's vectors t, t + kThreads, ... of the gain, read before the wait (a
// weight) where the row is kept in registers.
__device__ __forceinline__ void load_gain(uint4 (&gain_vectors)[kRowVectors], const uint4* gain,
                                          int64_t k, bool in_registers) {
  if (!in_registers) return;
#pragma unroll
  for (int i = 0; i < kRowVectors; ++i) {
    const int64_t v = threadIdx.x + i * kThreads;
    if (v < k / 8) gain_vectors[i] = __ldg(gain + v);
  }
}

// The block writes its row bf16(g * (x * rstd)) into `normed` (rstd summed by
// the block's threads as rms_norm_gemv<1> sums it) and waits for every thread.
// in_registers: each thread reads its vectors of x once, and takes the gain
// from load_gain, instead of reading both again to normalize: same values, same bits.
__device__ __forceinline__ void normalize_row(uint4* normed, const uint4* x, const uint4* gain,
                                              const uint4 (&gain_vectors)[kRowVectors], int64_t k,
                                              float eps, bool in_registers) {
  __shared__ float partial[kThreads / kWarp];
  __shared__ float rstd_shared;
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int64_t vectors = k / 8;
  uint4 x_vectors[kRowVectors];
  float sums[1] = {0.0f};
  if (in_registers) {
#pragma unroll
    for (int i = 0; i < kRowVectors; ++i) {
      const int64_t v = threadIdx.x + i * kThreads;
      if (v < vectors) x_vectors[i] = __ldg(x + v);
    }
#pragma unroll
    for (int i = 0; i < kRowVectors; ++i) {
      if (threadIdx.x + i * kThreads < vectors) {
        float xs[8];
        unpack(x_vectors[i], xs);
#pragma unroll
        for (int e = 0; e < 8; ++e) sums[0] = fmaf(xs[e], xs[e], sums[0]);
      }
    }
  } else {
    for (int64_t v = threadIdx.x; v < vectors; v += kThreads) {
      float xs[8];
      unpack(__ldg(x + v), xs);
#pragma unroll
      for (int i = 0; i < 8; ++i) sums[0] = fmaf(xs[i], xs[i], sums[0]);
    }
  }
  warp_sum<1>(sums);
  if (lane == 0) partial[warp] = sums[0];
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kThreads / kWarp; ++w) total += partial[w];
    rstd_shared = rsqrtf(total / static_cast<float>(k) + eps);
  }
  __syncthreads();
  const float rstd[1] = {rstd_shared};
  auto store_normed = [&](int64_t v, const float (&a)[8]) {
    uint32_t words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      words[i] = (__float_as_uint(a[2 * i]) >> 16) | (__float_as_uint(a[2 * i + 1]) & 0xffff0000u);
    }
    normed[v] = make_uint4(words[0], words[1], words[2], words[3]);
  };
  if (in_registers) {
#pragma unroll
    for (int i = 0; i < kRowVectors; ++i) {
      const int64_t v = threadIdx.x + i * kThreads;
      if (v < vectors) {
        float g[8], xs[8], a[8];
        unpack(gain_vectors[i], g);
        unpack(x_vectors[i], xs);
#pragma unroll
        for (int e = 0; e < 8; ++e) a[e] = round_bf16(g[e] * (xs[e] * rstd[0]));
        store_normed(v, a);
      }
    }
  } else {
    for (int64_t v = threadIdx.x; v < vectors; v += kThreads) {
      float a[1][8];
      normalized<1>(a, x, 0, gain, rstd, v);
      store_normed(v, a[0]);
    }
  }
  __syncthreads();
}

// Stores a column's result: gated, silu(gate) * up of the rounded sums; bf16 bits or widened.
template <bool kGated, typename Out>
__device__ __forceinline__ void store_column(Out* c, int64_t column, float gate_sum, float up_sum) {
  float value = gate_sum;
  if constexpr (kGated) {
    const float gate = round_bf16(gate_sum);
    const float up = round_bf16(up_sum);
    value = gate * (1.0f / (1.0f + expf(-gate))) * up;
  }
  if constexpr (sizeof(Out) == 2) {
    c[column] = to_bf16_bits(value);
  } else {
    c[column] = round_bf16(value);
  }
}

template <bool kGated, typename Out, int kSlots>
__device__ __forceinline__ void streamed_rms_norm_gemv(const uint16_t* x_bits,
                                                       const uint16_t* gain_bits,
                                                       const uint16_t* w_bits, int64_t ldw, Out* c,
                                                       int64_t n, int64_t k, float eps,
                                                       int64_t flags) {
  namespace bits = grove::runtime::streamed_gemv_flags;
  const bool evict_first = (flags & bits::kEvictFirst) != 0;
  const bool allow_next_first = (flags & bits::kAllowNextFirst) != 0;
  const bool row_in_registers = (flags & bits::kRowInRegisters) != 0;
  // 20 slots are static shared memory (as before the deep rings); 28 dynamic.
  uint4(*slots)[kThreads];
  if constexpr (kSlots == 20) {
    __shared__ uint4 static_slots[kSlots][kThreads];
    slots = static_slots;
  } else {
    extern __shared__ uint4 slots_memory[];  // [kSlots][kThreads]
    slots = reinterpret_cast<uint4(*)[kThreads]>(slots_memory);
  }
  __shared__ uint4 normed[kStreamedMaxK / 8];  // bf16(g * (x * rstd)), 8 a vector
  constexpr int kPerStep = kGated ? 2 : 1;   // slots a step takes
  constexpr int kDepth = kSlots / kPerStep;  // steps in flight
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / kWarp);
  const int64_t first_column = static_cast<int64_t>(blockIdx.x) * (kThreads / kWarp) + warp;
  const int64_t vectors = k / 8;
  const int64_t per_lane = lane < vectors ? (vectors - lane + kWarp - 1) / kWarp : 0;
  const auto* x = reinterpret_cast<const uint4*>(x_bits);
  const auto* gain = reinterpret_cast<const uint4*>(gain_bits);
  uint4* mine = &slots[0][threadIdx.x];
  const uint64_t policy = evict_first_policy();
  auto copy = [&](uint4* slot, const uint4* source) {
    copy_weights_async_16(slot, source, evict_first, policy);
  };
  int64_t issue_column = per_lane > 0 ? first_column : n;
  int64_t issue_step = 0;
  auto request = [&](int step_slot) {
    if (issue_column < n) {
      const int64_t index = lane + issue_step * kWarp;
      const auto* gate_row = reinterpret_cast<const uint4*>(w_bits + issue_column * ldw);
      copy(mine + step_slot * kPerStep * kThreads, gate_row + index);
      if constexpr (kGated) {
        const auto* up_row = reinterpret_cast<const uint4*>(w_bits + (issue_column + n) * ldw);
        copy(mine + (step_slot * kPerStep + 1) * kThreads, up_row + index);
      }
      if (++issue_step == per_lane) {
        issue_step = 0;
        issue_column += warps;
      }
    }
    commit_copies();  // empty past the end: kDepth groups stay pending
  };
  // Note [Programmatic dependent launch]: W is read-only; x only after the wait.
  // Note [Streamed GEMV allows the next kernel first]: or the next kernel first.
  if (allow_next_first) allow_next_kernel();
#pragma unroll
  for (int step_slot = 0; step_slot < kDepth; ++step_slot) request(step_slot);
  // Note [Streamed GEMV prefetches columns into L2] (runtime/cuda/small_m_gemv.h).
  prefetch_columns_to_l2(w_bits, ldw, k, n, first_column, warps,
                         static_cast<int>((flags >> bits::kPrefetchColumnsShift) & 0xff), kPerStep,
                         n, lane);
  uint4 gain_vectors[kRowVectors];
  load_gain(gain_vectors, gain, k, row_in_registers);
  wait_for_earlier_kernels();
  if (!allow_next_first) allow_next_kernel();
  normalize_row(normed, x, gain, gain_vectors, k, eps, row_in_registers);
  int step_slot = 0;
  for (int64_t column = first_column; column < n; column += warps) {
    float acc[1] = {0.0f};
    float acc_up[1] = {0.0f};
    for (int64_t step = 0; step < per_lane; ++step) {
      wait_copies<kDepth - 1>();
      float a[1][8];
      unpack(normed[lane + step * kWarp], a[0]);
      dot<1>(acc, mine[step_slot * kPerStep * kThreads], a);
      if constexpr (kGated) dot<1>(acc_up, mine[(step_slot * kPerStep + 1) * kThreads], a);
      request(step_slot);  // the dots above have read its slots
      step_slot = step_slot + 1 == kDepth ? 0 : step_slot + 1;
    }
    warp_sum<1>(acc);
    if constexpr (kGated) warp_sum<1>(acc_up);
    if (lane == 0) store_column<kGated>(c, column, acc[0], acc_up[0]);
  }
  wait_copies<0>();
}

}  // namespace

// grove_rms_norm_gemv_bf16_m1, grove_rms_norm_gemv_bf16_f32out_m1 and
// grove_rms_norm_swiglu_bf16_m1(x, ldx, gain, w, ldw, c, ldc, n, k, eps): the
// kernels rms_norm_gemv_kernel.cc launches. Every warp normalizes the M rows'
// elements it multiplies (M times the GEMV's work on A per weight vector): at
// M >= 2 that work would outgrow the weight streaming, so only M = 1 is built.
#define GROVE_RMS_NORM_GEMV(NAME, M, GATED, OUT)                                                 \
  extern "C" __global__ void __launch_bounds__(kThreads)                                         \
      NAME(const uint16_t* x, int64_t ldx, const uint16_t* gain, const uint16_t* w, int64_t ldw, \
           OUT* c, int64_t ldc, int64_t n, int64_t k, float eps) {                               \
    rms_norm_gemv<M, GATED, OUT>(x, ldx, gain, w, ldw, c, ldc, n, k, eps);                       \
  }

GROVE_RMS_NORM_GEMV(grove_rms_norm_gemv_bf16_m1, 1, false, uint16_t)
GROVE_RMS_NORM_GEMV(grove_rms_norm_gemv_bf16_f32out_m1, 1, false, float)
GROVE_RMS_NORM_GEMV(grove_rms_norm_swiglu_bf16_m1, 1, true, uint16_t)

// The streamed kernels (Note [Streamed GEMV]): one row, the same parameters
// but ldx and ldc (one row each) and with flags (runtime/cuda/streamed_gemv_flags.h),
// launched with a grid sized to the device.
#define GROVE_STREAMED_RMS_NORM_GEMV(NAME, GATED, OUT, SLOTS)                               \
  extern "C" __global__ void __launch_bounds__(kThreads)                                    \
      NAME(const uint16_t* x, const uint16_t* gain, const uint16_t* w, int64_t ldw, OUT* c, \
           int64_t n, int64_t k, float eps, int64_t flags) {                                \
    streamed_rms_norm_gemv<GATED, OUT, SLOTS>(x, gain, w, ldw, c, n, k, eps, flags);        \
  }

GROVE_STREAMED_RMS_NORM_GEMV(grove_rms_norm_gemv_streamed_bf16, false, uint16_t, 20)
GROVE_STREAMED_RMS_NORM_GEMV(grove_rms_norm_gemv_streamed_bf16_f32out, false, float, 20)
GROVE_STREAMED_RMS_NORM_GEMV(grove_rms_norm_swiglu_streamed_bf16, true, uint16_t, 20)
GROVE_STREAMED_RMS_NORM_GEMV(grove_rms_norm_gemv_streamed_bf16_s28, false, uint16_t, 28)
GROVE_STREAMED_RMS_NORM_GEMV(grove_rms_norm_gemv_streamed_bf16_f32out_s28, false, float, 28)
GROVE_STREAMED_RMS_NORM_GEMV(grove_rms_norm_swiglu_streamed_bf16_s28, true, uint16_t, 28)

