// Source of decode_attention_kernel_ptx.inc (regenerate_ptx.sh): one decode
// step's attention of a LLaMA layer over its KV cache in one kernel, Note
// [Decode attention kernel] (decode_attention_kernel.h). Block (kv_head, row):
// the rotary embedding of the row's query heads of that group and of its new
// key, their scores against the cached keys before the row's position and its
// own key, the softmax and the weighted sum of the cached values and its own
// value, written in place over the fused projection row.
#include <cstdint>

namespace {

constexpr int kMaxGroups = 8;   // query heads per kv head (decode_attention_kernel.h)
constexpr int kKeyVectors = 8;  // 16-byte key vectors a thread loads at once
constexpr int kValueLoads = 8;  // positions' values a thread loads at once

// Element types: 0 f32, 1 bf16 (decode_attention_kernel.h's kDecodeAttention*).
__device__ __forceinline__ float load(const void* base, int64_t index, int type) {
  if (type == 0) return static_cast<const float*>(base)[index];
  const uint32_t bits = static_cast<const uint16_t*>(base)[index];
  return __uint_as_float(bits << 16);
}

// Round to nearest even at bf16 (f32: unchanged), as a stored value would be.
__device__ __forceinline__ float round_to(float value, int type) {
  if (type == 0) return value;
  uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return value;  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return __uint_as_float(bits & 0xffff0000u);
}

__device__ __forceinline__ void store(void* base, int64_t index, float value, int type) {
  if (type == 0) {
    static_cast<float*>(base)[index] = value;
  } else {
    static_cast<uint16_t*>(base)[index] =
        static_cast<uint16_t>(__float_as_uint(round_to(value, 1)) >> 16);
  }
}

}  // namespace

// qkv [rows, (heads + 2 kv_heads) * d]; cos, sin [table_len, d] (the rotary
// tables, read at each row's position); caches [rows,
// kv_heads, cache_len, d]; positions i64 [rows]. Block: a multiple of d
// threads, at least d; dynamic shared memory: (groups + 1) * d + groups *
// (cache_len + 1) + (threads / d) * groups * d floats.
extern "C" __global__ void grove_decode_attention(void* qkv, const void* cos, const void* sin,
                                                  const void* key_cache, const void* value_cache,
                                                  const int64_t* positions, int64_t heads,
                                                  int64_t kv_heads, int64_t head_dim,
                                                  int64_t cache_len, int64_t table_len,
                                                  int64_t type, float scale) {
  extern __shared__ float shared[];
  const int64_t kv = blockIdx.x;
  const int64_t row = blockIdx.y;
  const int t_id = threadIdx.x;
  const int threads = blockDim.x;
  const int64_t d = head_dim;
  const int64_t groups = heads / kv_heads;
  const int64_t width = (heads + 2 * kv_heads) * d;
  const int64_t q_base = row * width + kv * groups * d;  // this group's query heads
  const int64_t k_base = row * width + heads * d + kv * d;
  const int64_t v_base = k_base + kv_heads * d;
  const int kind = static_cast<int>(type);
  const int64_t position = positions[row];
  if (position < 0) {  // a padding row: zeros, its key and value stay as they are
    for (int64_t i = t_id; i < groups * d; i += threads) store(qkv, q_base + i, 0.0f, kind);
    return;
  }
  float* rotated = shared;                    // [groups + 1][d]: the query heads, then the key
  float* scores = shared + (groups + 1) * d;  // [groups][cached + 1]
  const int64_t cached = position < cache_len ? position : cache_len;  // keys before the row
  const int64_t span = cached + 1;                                     // and its own
  // The rotary embedding: x cos + rotate_half(x) sin, stored at the model's precision.
  const int64_t at = position < table_len ? position : table_len - 1;
  const int64_t half = d / 2;
  for (int64_t i = t_id; i < (groups + 1) * d; i += threads) {
    const int64_t head = i / d;
    const int64_t j = i % d;
    const int64_t base = head < groups ? q_base + head * d : k_base;
    const float x = load(qkv, base + j, kind);
    const float partner =
        j < half ? -load(qkv, base + j + half, kind) : load(qkv, base + j - half, kind);
    const float c = load(cos, at * d + j, kind);
    const float s = load(sin, at * d + j, kind);
    rotated[i] = round_to(x * c + partner * s, kind);
  }
  __syncthreads();
  // Scores: a GEMM's stored product, times the scale in f32 (as the fused softmax did).
  const int64_t slot = (row * kv_heads + kv) * cache_len;
  for (int64_t t = t_id; t < span; t += threads) {
    float acc[kMaxGroups];
#pragma unroll
    for (int g = 0; g < kMaxGroups; ++g) acc[g] = 0.0f;
    const float* own = rotated + groups * d;
    if (t < cached && kind == 1 && d % 8 == 0) {
      // bf16 keys in 16-byte vectors, up to eight loads in flight before any
      // is used (a load per element waited out its latency element by
      // element); the products are summed in the same order as below.
      const uint4* key =
          reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(key_cache) + (slot + t) * d);
      for (int64_t v0 = 0; v0 < d / 8; v0 += kKeyVectors) {
        uint4 loaded[kKeyVectors];
#pragma unroll
        for (int u = 0; u < kKeyVectors; ++u) {
          if (v0 + u < d / 8) loaded[u] = __ldg(key + v0 + u);
        }
#pragma unroll
        for (int u = 0; u < kKeyVectors; ++u) {
          if (v0 + u >= d / 8) break;
          const uint32_t words[4] = {loaded[u].x, loaded[u].y, loaded[u].z, loaded[u].w};
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const uint32_t bits = e % 2 == 0 ? words[e / 2] << 16 : words[e / 2] & 0xffff0000u;
            const float k = __uint_as_float(bits);
            const int64_t j = (v0 + u) * 8 + e;
#pragma unroll
            for (int g = 0; g < kMaxGroups; ++g) {
              if (g < groups) acc[g] = fmaf(rotated[g * d + j], k, acc[g]);
            }
          }
        }
      }
    } else {
      for (int64_t j = 0; j < d; ++j) {
        const float key = t < cached ? load(key_cache, (slot + t) * d + j, kind) : own[j];
#pragma unroll
        for (int g = 0; g < kMaxGroups; ++g) {
          if (g < groups) acc[g] = fmaf(rotated[g * d + j], key, acc[g]);
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kMaxGroups; ++g) {
      if (g < groups) scores[g * span + t] = round_to(acc[g], kind) * scale;
    }
  }
  __syncthreads();
  // Softmax per query head in f32 (a warp per head), probabilities stored at the model's precision.
  const int lane = t_id % 32;
  for (int64_t g = t_id / 32; g < groups; g += threads / 32) {
    float* s = scores + g * span;
    float most = -3.402823466e38f;
    for (int64_t t = lane; t < span; t += 32) most = fmaxf(most, s[t]);
    for (int offset = 16; offset > 0; offset /= 2) {
      most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, offset));
    }
    float total = 0.0f;
    for (int64_t t = lane; t < span; t += 32) {
      const float e = expf(s[t] - most);
      s[t] = e;
      total += e;
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      total += __shfl_xor_sync(0xffffffffu, total, offset);
    }
    __syncwarp();
    for (int64_t t = lane; t < span; t += 32) s[t] = round_to(s[t] / total, kind);
  }
  __syncthreads();
  // The weighted values: thread (slice, j) sums column j over positions
  // slice, slice + slices, ... for every query head; the slices' partial sums
  // are then added in slice order and stored over the query heads, in place.
  float* partial = scores + groups * span;  // [slices][groups][d]
  const int64_t slices = threads / d;
  const int64_t j = t_id % d;
  const int64_t slice = t_id / d;
  if (slice < slices) {
    float acc[kMaxGroups];
#pragma unroll
    for (int g = 0; g < kMaxGroups; ++g) acc[g] = 0.0f;
    // kValueLoads positions' values loaded before any is used, folded in increasing t.
    for (int64_t t0 = slice; t0 < span; t0 += kValueLoads * slices) {
      float values[kValueLoads];
#pragma unroll
      for (int u = 0; u < kValueLoads; ++u) {
        const int64_t t = t0 + u * slices;
        values[u] = t < cached ? load(value_cache, (slot + t) * d + j, kind)
                               : (t == cached ? load(qkv, v_base + j, kind) : 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kValueLoads; ++u) {
        const int64_t t = t0 + u * slices;
        if (t >= span) break;
#pragma unroll
        for (int g = 0; g < kMaxGroups; ++g) {
          if (g < groups) acc[g] = fmaf(scores[g * span + t], values[u], acc[g]);
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kMaxGroups; ++g) {
      if (g < groups) partial[(slice * groups + g) * d + j] = acc[g];
    }
  }
  __syncthreads();
  for (int64_t i = t_id; i < groups * d; i += threads) {
    float sum = 0.0f;
    for (int64_t other = 0; other < slices; ++other) sum += partial[other * groups * d + i];
    store(qkv, q_base + i, sum, kind);
  }
  for (int64_t j = t_id; j < d; j += threads) store(qkv, k_base + j, rotated[groups * d + j], kind);
}
