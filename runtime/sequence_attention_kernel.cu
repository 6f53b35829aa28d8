// Source of sequence_attention_kernel_ptx.inc (regenerate_ptx.sh): attention
// over short sequences, softmax(q k^T * scale + mask) v, reading every operand
// through its strides, Note [Sequence attention kernel]
// (sequence_attention_kernel.h). Block (query tile, query head, batch): the
// key head's keys and values go to shared memory once; each warp then takes
// query rows, its lanes over keys for the scores and the softmax, and over
// features for the weighted sum of the values.
#include <cstdint>
#include <type_traits>

#include "runtime/async_copy_device.h"
#include "runtime/programmatic_launch_device.h"

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

// One operand's rows [rows, width] to stage into shared memory (row pitch
// `pitch` floats), read through its strides from element `base`.
struct Tile {
  const void* source;
  int64_t base, row_stride, column_stride;
  int rows, width;
  float* destination;
  int pitch;
};

// Rows a warp (RowSteps: 8, or 16 for the wide kernels, which stage 64
// positions a pass) and 32-feature chunks a lane load per pass of stage().
constexpr int kColumnSteps = 2;

// Stages the three tiles into shared memory. Warps take rows, lanes features
// (coalesced where features are contiguous); every load of a pass (up to
// 3 x RowSteps x kColumnSteps per thread: keys, values and queries of
// 4 x RowSteps positions and 64 features at once) is issued before any store,
// so a pass costs one memory latency, where a loop storing each load waited
// on each.
template <typename T, int RowSteps>
__device__ void stage(const Tile (&tiles)[3], int warp, int lane) {
  int rows = 0, width = 0;
  for (const Tile& tile : tiles) {
    rows = max(rows, tile.rows);
    width = max(width, tile.width);
  }
  for (int r0 = warp; r0 < rows; r0 += kWarps * RowSteps) {
    for (int c0 = lane; c0 < width; c0 += 32 * kColumnSteps) {
      float staged[3][RowSteps][kColumnSteps];
#pragma unroll
      for (int t = 0; t < 3; ++t) {
#pragma unroll
        for (int u = 0; u < RowSteps; ++u) {
#pragma unroll
          for (int w = 0; w < kColumnSteps; ++w) {
            const int r = r0 + u * kWarps, c = c0 + w * 32;
            const Tile& tile = tiles[t];
            staged[t][u][w] =
                r < tile.rows && c < tile.width
                    ? load(tile.source, tile.base + r * tile.row_stride + c * tile.column_stride,
                           T())
                    : 0.0f;
          }
        }
      }
#pragma unroll
      for (int t = 0; t < 3; ++t) {
#pragma unroll
        for (int u = 0; u < RowSteps; ++u) {
#pragma unroll
          for (int w = 0; w < kColumnSteps; ++w) {
            const int r = r0 + u * kWarps, c = c0 + w * 32;
            const Tile& tile = tiles[t];
            if (r < tile.rows && c < tile.width) {
              tile.destination[r * tile.pitch + c] = staged[t][u][w];
            }
          }
        }
      }
    }
  }
}

// Starts copying the float at `global` to `shared` (cp.async of 4 bytes,
// which any float alignment allows).
__device__ __forceinline__ void copy_async_4(float* shared, const float* global) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(address), "l"(global) : "memory");
}

// Note [Sequence attention staged by cp.async] (sequence_attention_kernel.cc):
// f32 operands are copied into shared memory by cp.async, every copy of the
// block in flight at once from a short loop, through the operands' strides.
template <int Warps>
__device__ __forceinline__ void stage_tile_async(const Tile& tile, int warp, int lane) {
  const float* source = static_cast<const float*>(tile.source) + tile.base;
  // Rows of whole 16-byte groups on both sides (a fused projection's heads,
  // contiguous features): a quarter of the copies.
  if (tile.column_stride == 1 && tile.width % 4 == 0 && tile.row_stride % 4 == 0 &&
      tile.pitch % 4 == 0 && (reinterpret_cast<uintptr_t>(source) & 15) == 0 &&
      (reinterpret_cast<uintptr_t>(tile.destination) & 15) == 0) {
    const int groups = tile.width / 4;
#pragma unroll 1
    for (int r = warp; r < tile.rows; r += Warps) {
      const float* row = source + r * tile.row_stride;
      float* destination = tile.destination + r * tile.pitch;
      for (int g = lane; g < groups; g += 32) copy_async_16(destination + 4 * g, row + 4 * g);
    }
    return;
  }
#pragma unroll 1
  for (int r = warp; r < tile.rows; r += Warps) {
    const float* row = source + r * tile.row_stride;
    float* destination = tile.destination + r * tile.pitch;
#pragma unroll 2
    for (int c = lane; c < tile.width; c += 32) {
      copy_async_4(destination + c, row + c * tile.column_stride);
    }
  }
}

template <int Warps>
__device__ void stage_async(const Tile (&tiles)[3], int warp, int lane) {
  stage_tile_async<Warps>(tiles[0], warp, lane);
  stage_tile_async<Warps>(tiles[1], warp, lane);
  stage_tile_async<Warps>(tiles[2], warp, lane);
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// Strides are in elements, [batch, head, position, feature] (the mask's:
// [batch, head, query, key]; 0 where it broadcasts). mask_kind: 0 none, 1 bool
// (true attends), 2 additive (the operands' dtype). Shared memory: keys
// [tk][d + 1] (the pad spreads lanes reading one feature of 32 keys over the
// banks), values [tk][dv], the block's query rows [rows_per_block][d], and
// per warp the weights of its row [tk].
template <typename T, int RowSteps, bool Async, int Warps, bool Vector = false>
__device__ void attend(const void* q, const void* k, const void* v, const void* mask, void* out,
                       int64_t q_b, int64_t q_h, int64_t q_t, int64_t q_d, int64_t k_b, int64_t k_h,
                       int64_t k_t, int64_t k_d, int64_t v_b, int64_t v_h, int64_t v_t, int64_t v_d,
                       int64_t o_b, int64_t o_h, int64_t o_t, int64_t o_d, int64_t m_b, int64_t m_h,
                       int64_t m_q, int64_t m_k, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                       int64_t group, int64_t mask_kind, int64_t causal, int64_t rows_per_block,
                       float scale) {
  extern __shared__ float shared[];
  // Note [Programmatic generated kernels]: nothing before this touches memory.
  wait_for_earlier_kernels();
  const int tq32 = static_cast<int>(tq), tk32 = static_cast<int>(tk);
  const int d32 = static_cast<int>(d), dv32 = static_cast<int>(dv);
  const int batch = static_cast<int>(blockIdx.z);
  const int head = static_cast<int>(blockIdx.y);
  const int key_head = head / static_cast<int>(group);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  // Note [Sequence attention in vectors] (sequence_attention_kernel.cc): keys
  // padded to d + 4 keep every row 16-byte aligned for float4 reads.
  const int key_pitch = Vector ? d32 + 4 : d32 + 1;
  const int first = static_cast<int>(blockIdx.x) * static_cast<int>(rows_per_block);
  const int end = min(tq32, first + static_cast<int>(rows_per_block));
  float* keys = shared;
  float* values = keys + tk32 * key_pitch;
  float* queries = values + tk32 * dv32;
  float* weights = queries + static_cast<int>(rows_per_block) * d32 + warp * tk32;

  const Tile tiles[3] = {
      {k, batch * k_b + key_head * k_h, k_t, k_d, tk32, d32, keys, key_pitch},
      {v, batch * v_b + key_head * v_h, v_t, v_d, tk32, dv32, values, dv32},
      {q, batch * q_b + head * q_h + first * q_t, q_t, q_d, end - first, d32, queries, d32}};
  if constexpr (Async) {
    stage_async<Warps>(tiles, warp, lane);
  } else {
    stage<T, RowSteps>(tiles, warp, lane);
  }
  __syncthreads();

  const float minus_infinity = -__int_as_float(0x7f800000);
  for (int row = first + warp; row < end; row += Warps) {
    const float* query = queries + (row - first) * d32;
    float most = minus_infinity;
    for (int j = lane; j < tk32; j += 32) {
      // The mask's element first: its load overlaps the dot product.
      const int64_t at = batch * m_b + head * m_h + row * m_q + j * m_k;
      const bool kept = mask_kind != 1 || static_cast<const uint8_t*>(mask)[at] != 0;
      const float added = mask_kind == 2 ? load(mask, at, T()) : 0.0f;
      const float* key = keys + j * key_pitch;
      float partial[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      int c = 0;
      if constexpr (Vector) {
        // The scalar loop's four sums, four features a load (d % 4 == 0).
        const float4* query4 = reinterpret_cast<const float4*>(query);
        const float4* key4 = reinterpret_cast<const float4*>(key);
        for (int c4 = 0; c4 < d32 / 4; ++c4) {
          const float4 x = query4[c4], y = key4[c4];
          partial[0] = fmaf(x.x, y.x, partial[0]);
          partial[1] = fmaf(x.y, y.y, partial[1]);
          partial[2] = fmaf(x.z, y.z, partial[2]);
          partial[3] = fmaf(x.w, y.w, partial[3]);
        }
        c = d32;
      }
      for (; c + 4 <= d32; c += 4) {
        partial[0] = fmaf(query[c], key[c], partial[0]);
        partial[1] = fmaf(query[c + 1], key[c + 1], partial[1]);
        partial[2] = fmaf(query[c + 2], key[c + 2], partial[2]);
        partial[3] = fmaf(query[c + 3], key[c + 3], partial[3]);
      }
      for (; c < d32; ++c) partial[0] = fmaf(query[c], key[c], partial[0]);
      float score = ((partial[0] + partial[1]) + (partial[2] + partial[3])) * scale + added;
      if (!kept || (causal != 0 && j > row)) score = minus_infinity;
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
    if constexpr (Vector) {
      // A lane's two adjacent features (dv % 4 == 0) in one float2 read a key;
      // each feature's sums are the scalar loop's, in its order.
      for (int f = 2 * lane; f < dv32; f += 64) {
        float first_sums[2] = {0.0f, 0.0f}, second_sums[2] = {0.0f, 0.0f};
        int j = 0;
        for (; j + 2 <= tk32; j += 2) {
          const float w0 = weights[j], w1 = weights[j + 1];
          const float2 v0 = *reinterpret_cast<const float2*>(values + j * dv32 + f);
          const float2 v1 = *reinterpret_cast<const float2*>(values + (j + 1) * dv32 + f);
          first_sums[0] = fmaf(w0, v0.x, first_sums[0]);
          second_sums[0] = fmaf(w0, v0.y, second_sums[0]);
          first_sums[1] = fmaf(w1, v1.x, first_sums[1]);
          second_sums[1] = fmaf(w1, v1.y, second_sums[1]);
        }
        if (j < tk32) {
          const float2 v0 = *reinterpret_cast<const float2*>(values + j * dv32 + f);
          first_sums[0] = fmaf(weights[j], v0.x, first_sums[0]);
          second_sums[0] = fmaf(weights[j], v0.y, second_sums[0]);
        }
        const float sum = first_sums[0] + first_sums[1];
        const float other = second_sums[0] + second_sums[1];
        store(out, o_base + f * o_d, total > 0.0f ? sum / total : 0.0f, T());
        store(out, o_base + (f + 1) * o_d, total > 0.0f ? other / total : 0.0f, T());
      }
    } else {
      for (int f = lane; f < dv32; f += 32) {
        float sums[2] = {0.0f, 0.0f};
        int j = 0;
        for (; j + 2 <= tk32; j += 2) {
          sums[0] = fmaf(weights[j], values[j * dv32 + f], sums[0]);
          sums[1] = fmaf(weights[j + 1], values[(j + 1) * dv32 + f], sums[1]);
        }
        if (j < tk32) sums[0] = fmaf(weights[j], values[j * dv32 + f], sums[0]);
        const float sum = sums[0] + sums[1];
        store(out, o_base + f * o_d, total > 0.0f ? sum / total : 0.0f, T());
      }
    }
    __syncwarp();
  }
}

}  // namespace

#define GROVE_SEQUENCE_ATTENTION(NAME, TYPE, ROW_STEPS, ASYNC, WARPS, VECTOR)                     \
  extern "C" __global__ void __launch_bounds__(WARPS * 32)                                        \
      NAME(const void* q, const void* k, const void* v, const void* mask, void* out, int64_t q_b, \
           int64_t q_h, int64_t q_t, int64_t q_d, int64_t k_b, int64_t k_h, int64_t k_t,          \
           int64_t k_d, int64_t v_b, int64_t v_h, int64_t v_t, int64_t v_d, int64_t o_b,          \
           int64_t o_h, int64_t o_t, int64_t o_d, int64_t m_b, int64_t m_h, int64_t m_q,          \
           int64_t m_k, int64_t tq, int64_t tk, int64_t d, int64_t dv, int64_t group,             \
           int64_t mask_kind, int64_t causal, int64_t rows_per_block, float scale) {              \
    attend<TYPE, ROW_STEPS, ASYNC, WARPS, VECTOR>(                                                \
        q, k, v, mask, out, q_b, q_h, q_t, q_d, k_b, k_h, k_t, k_d, v_b, v_h, v_t, v_d, o_b, o_h, \
        o_t, o_d, m_b, m_h, m_q, m_k, tq, tk, d, dv, group, mask_kind, causal, rows_per_block,    \
        scale);                                                                                   \
  }

GROVE_SEQUENCE_ATTENTION(grove_sequence_attention_f32, float, 8, false, 4, false)
GROVE_SEQUENCE_ATTENTION(grove_sequence_attention_bf16, Bf16, 8, false, 4, false)
GROVE_SEQUENCE_ATTENTION(grove_sequence_attention_f16, F16, 8, false, 4, false)
GROVE_SEQUENCE_ATTENTION(grove_sequence_attention_f32_wide, float, 16, false, 4, false)
GROVE_SEQUENCE_ATTENTION(grove_sequence_attention_bf16_wide, Bf16, 16, false, 4, false)
GROVE_SEQUENCE_ATTENTION(grove_sequence_attention_f16_wide, F16, 16, false, 4, false)
GROVE_SEQUENCE_ATTENTION(grove_sequence_attention_f32_async, float, 8, true, 4, false)
GROVE_SEQUENCE_ATTENTION(grove_sequence_attention_f32_vector, float, 8, true, 4, true)
