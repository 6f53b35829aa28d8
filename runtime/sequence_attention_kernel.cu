// Source of sequence_attention_kernel_ptx.inc (regenerate_ptx.sh): attention
// over short sequences, softmax(q k^T * scale + mask) v, reading every operand
// through its strides, Note [Sequence attention kernel]
// (sequence_attention_kernel.h). Block (query tile, query head, batch): the
// key head's keys and values go to shared memory once; each warp then takes
// query rows, its lanes over keys for the scores and the softmax, and over
// features for the weighted sum of the values.
#include <cstdint>

namespace {

constexpr int kWarps = 4;

struct Bf16 {};
struct F16 {};

__device__ __forceinline__ float load(const void* base, int64_t index, float) {
  return static_cast<const float*>(base)[index];
}
__device__ __forceinline__ float load(const void* base, int64_t index, Bf16) {
  const uint32_t bits = static_cast<const uint16_t*>(base)[index];
  return __uint_as_float(bits << 16);
}
__device__ __forceinline__ float load(const void* base, int64_t index, F16) {
  const uint16_t bits = static_cast<const uint16_t*>(base)[index];
  float value;
  asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits));
  return value;
}

__device__ __forceinline__ void store(void* base, int64_t index, float value, float) {
  static_cast<float*>(base)[index] = value;
}
__device__ __forceinline__ void store(void* base, int64_t index, float value, Bf16) {
  uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    bits |= 0x400000u;  // NaN stays NaN
  } else {
    bits += 0x7fffu + ((bits >> 16) & 1u);
  }
  static_cast<uint16_t*>(base)[index] = static_cast<uint16_t>(bits >> 16);
}
__device__ __forceinline__ void store(void* base, int64_t index, float value, F16) {
  uint16_t bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  static_cast<uint16_t*>(base)[index] = bits;
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}
__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Strides are in elements, [batch, head, position, feature] (the mask's:
// [batch, head, query, key]; 0 where it broadcasts). mask_kind: 0 none, 1 bool
// (true attends), 2 additive (the operands' dtype). Shared memory: keys
// [tk][d + 1] (the pad spreads lanes reading one feature of 32 keys over the
// banks), values [tk][dv], and per warp its query row [d] and weights [tk].
template <typename T>
__device__ void attend(const void* q, const void* k, const void* v, const void* mask, void* out,
                       int64_t q_b, int64_t q_h, int64_t q_t, int64_t q_d, int64_t k_b,
                       int64_t k_h, int64_t k_t, int64_t k_d, int64_t v_b, int64_t v_h,
                       int64_t v_t, int64_t v_d, int64_t o_b, int64_t o_h, int64_t o_t,
                       int64_t o_d, int64_t m_b, int64_t m_h, int64_t m_q, int64_t m_k,
                       int64_t tq, int64_t tk, int64_t d, int64_t dv, int64_t group,
                       int64_t mask_kind, int64_t causal, int64_t rows_per_block, float scale) {
  extern __shared__ float shared[];
  const int tq32 = static_cast<int>(tq), tk32 = static_cast<int>(tk);
  const int d32 = static_cast<int>(d), dv32 = static_cast<int>(dv);
  const int batch = static_cast<int>(blockIdx.z);
  const int head = static_cast<int>(blockIdx.y);
  const int key_head = head / static_cast<int>(group);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int key_pitch = d32 + 1;
  float* keys = shared;
  float* values = keys + tk32 * key_pitch;
  float* query = values + tk32 * dv32 + warp * (d32 + tk32);
  float* weights = query + d32;

  // Warps take key positions, lanes features: coalesced where features are
  // contiguous, and no division.
  const int64_t k_base = batch * k_b + key_head * k_h;
  const int64_t v_base = batch * v_b + key_head * v_h;
  for (int j = warp; j < tk32; j += kWarps) {
    for (int c = lane; c < d32; c += 32) {
      keys[j * key_pitch + c] = load(k, k_base + j * k_t + c * k_d, T());
    }
    for (int c = lane; c < dv32; c += 32) {
      values[j * dv32 + c] = load(v, v_base + j * v_t + c * v_d, T());
    }
  }
  __syncthreads();

  const int first = static_cast<int>(blockIdx.x) * static_cast<int>(rows_per_block);
  const int end = min(tq32, first + static_cast<int>(rows_per_block));
  const float minus_infinity = -__int_as_float(0x7f800000);
  for (int row = first + warp; row < end; row += kWarps) {
    const int64_t q_base = batch * q_b + head * q_h + row * q_t;
    for (int c = lane; c < d32; c += 32) query[c] = load(q, q_base + c * q_d, T());
    __syncwarp();
    float most = minus_infinity;
    for (int j = lane; j < tk32; j += 32) {
      const float* key = keys + j * key_pitch;
      float partial[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      int c = 0;
      for (; c + 4 <= d32; c += 4) {
        partial[0] = fmaf(query[c], key[c], partial[0]);
        partial[1] = fmaf(query[c + 1], key[c + 1], partial[1]);
        partial[2] = fmaf(query[c + 2], key[c + 2], partial[2]);
        partial[3] = fmaf(query[c + 3], key[c + 3], partial[3]);
      }
      for (; c < d32; ++c) partial[0] = fmaf(query[c], key[c], partial[0]);
      float score = ((partial[0] + partial[1]) + (partial[2] + partial[3])) * scale;
      if (mask_kind != 0) {
        const int64_t at = batch * m_b + head * m_h + row * m_q + j * m_k;
        if (mask_kind == 1) {
          if (static_cast<const uint8_t*>(mask)[at] == 0) score = minus_infinity;
        } else {
          score += load(mask, at, T());
        }
      }
      if (causal != 0 && j > row) score = minus_infinity;
      weights[j] = score;
      most = fmaxf(most, score);
    }
    most = warp_max(most);
    // Every score -inf: the row writes zeros (PyTorch's safe softmax).
    const float shift = most == minus_infinity ? 0.0f : most;
    float total = 0.0f;
    for (int j = lane; j < tk32; j += 32) {
      const float weight = expf(weights[j] - shift);
      weights[j] = weight;
      total += weight;
    }
    total = warp_sum(total);
    __syncwarp();
    const int64_t o_base = batch * o_b + head * o_h + row * o_t;
    for (int f = lane; f < dv32; f += 32) {
      float sum = 0.0f;
      for (int j = 0; j < tk32; ++j) sum = fmaf(weights[j], values[j * dv32 + f], sum);
      store(out, o_base + f * o_d, total > 0.0f ? sum / total : 0.0f, T());
    }
    __syncwarp();
  }
}

}  // namespace

#define GROVE_SEQUENCE_ATTENTION(NAME, TYPE)                                                    \
  extern "C" __global__ void __launch_bounds__(kWarps * 32) NAME(                               \
      const void* q, const void* k, const void* v, const void* mask, void* out, int64_t q_b,    \
      int64_t q_h, int64_t q_t, int64_t q_d, int64_t k_b, int64_t k_h, int64_t k_t,             \
      int64_t k_d, int64_t v_b, int64_t v_h, int64_t v_t, int64_t v_d, int64_t o_b,             \
      int64_t o_h, int64_t o_t, int64_t o_d, int64_t m_b, int64_t m_h, int64_t m_q,             \
      int64_t m_k, int64_t tq, int64_t tk, int64_t d, int64_t dv, int64_t group,                \
      int64_t mask_kind, int64_t causal, int64_t rows_per_block, float scale) {                 \
    attend<TYPE>(q, k, v, mask, out, q_b, q_h, q_t, q_d, k_b, k_h, k_t, k_d, v_b, v_h, v_t,     \
                 v_d, o_b, o_h, o_t, o_d, m_b, m_h, m_q, m_k, tq, tk, d, dv, group, mask_kind, \
                 causal, rows_per_block, scale);                                                \
  }

GROVE_SEQUENCE_ATTENTION(grove_sequence_attention_f32, float)
GROVE_SEQUENCE_ATTENTION(grove_sequence_attention_bf16, Bf16)
GROVE_SEQUENCE_ATTENTION(grove_sequence_attention_f16, F16)
