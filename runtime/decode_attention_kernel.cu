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
// Values per thread loaded with the first wave, before they are needed (kValueLoads at a time).
constexpr int kValuePrefetch = 4;
// Elements of the rotary embedding a thread loads at once (rotated heads * head_dim).
constexpr int kRotaryLoads = 2;

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

// The scores' fold of eight bf16 key elements (one 16-byte vector, vector
// index `vector` of the key) into each query head's sum, in increasing element order.
__device__ __forceinline__ void fold_key_vector(float (&acc)[kMaxGroups], const uint4& vector_bits,
                                                int64_t vector, const float* rotated, int64_t d,
                                                int64_t groups) {
  const uint32_t words[4] = {vector_bits.x, vector_bits.y, vector_bits.z, vector_bits.w};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint32_t bits = e % 2 == 0 ? words[e / 2] << 16 : words[e / 2] & 0xffff0000u;
    const float k = __uint_as_float(bits);
    const int64_t j = vector * 8 + e;
#pragma unroll
    for (int g = 0; g < kMaxGroups; ++g) {
      if (g < groups) acc[g] = fmaf(rotated[g * d + j], k, acc[g]);
    }
  }
}

}  // namespace

// qkv [rows, (heads + 2 kv_heads) * d]; cos, sin [table_len, d] (the rotary
// tables, read at each row's position); caches [rows,
// kv_heads, cache_len, d]; positions i64 [rows]. Block: a multiple of d
// threads, at least d; dynamic shared memory: (groups + 1) * d + groups *
// (cache_len + 1) + (threads / d) * groups * d floats.
//
// Latency, not bandwidth, bounds the kernel (a few blocks, kilobytes each),
// so its global loads go out in two waves: the row's position with the
// projection's elements, then, once the position is known, the rotary
// tables, this thread's first cached key (bf16: up to kKeyVectors vectors)
// and its first kValuePrefetch * kValueLoads values, all before the rotary
// embedding is computed. Later phases use those registers; only keys and
// values beyond them (long caches) are loaded where they are used. The
// arithmetic and its order are those of the host function (decode_attention_kernel.cc).
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
  const int64_t rotated_count = (groups + 1) * d;
  const int64_t half = d / 2;
  // Wave 1: the position and this thread's first projection elements to rotate.
  const int64_t position = positions[row];
  float x[kRotaryLoads];
  float partner[kRotaryLoads];
#pragma unroll
  for (int r = 0; r < kRotaryLoads; ++r) {
    const int64_t i = t_id + static_cast<int64_t>(r) * threads;
    x[r] = 0.0f;
    partner[r] = 0.0f;
    if (i < rotated_count) {
      const int64_t head = i / d;
      const int64_t j = i % d;
      const int64_t base = head < groups ? q_base + head * d : k_base;
      x[r] = load(qkv, base + j, kind);
      partner[r] = j < half ? -load(qkv, base + j + half, kind) : load(qkv, base + j - half, kind);
    }
  }
  if (position < 0) {  // a padding row: zeros, its key and value stay as they are
    for (int64_t i = t_id; i < groups * d; i += threads) store(qkv, q_base + i, 0.0f, kind);
    return;
  }
  float* rotated = shared;                    // [groups + 1][d]: the query heads, then the key
  float* scores = shared + (groups + 1) * d;  // [groups][cached + 1]
  const int64_t cached = position < cache_len ? position : cache_len;  // keys before the row
  const int64_t span = cached + 1;                                     // and its own
  const int64_t at = position < table_len ? position : table_len - 1;
  const int64_t slot = (row * kv_heads + kv) * cache_len;
  const bool vector_keys = kind == 1 && d % 8 == 0;
  const int64_t key_vectors = d / 8;
  // Wave 2: the rotary tables, this thread's first key and its first values.
  float c[kRotaryLoads];
  float s[kRotaryLoads];
#pragma unroll
  for (int r = 0; r < kRotaryLoads; ++r) {
    const int64_t i = t_id + static_cast<int64_t>(r) * threads;
    c[r] = 0.0f;
    s[r] = 0.0f;
    if (i < rotated_count) {
      c[r] = load(cos, at * d + i % d, kind);
      s[r] = load(sin, at * d + i % d, kind);
    }
  }
  uint4 first_key[kKeyVectors];
  if (vector_keys && t_id < cached) {
    const uint4* key = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(key_cache) +
                                                      (slot + t_id) * d);
#pragma unroll
    for (int u = 0; u < kKeyVectors; ++u) {
      if (u < key_vectors) first_key[u] = __ldg(key + u);
    }
  }
  const int64_t slices = threads / d;
  const int64_t j_value = t_id % d;
  const int64_t slice = t_id / d;
  auto value_at = [&](int64_t t) {
    return t < cached ? load(value_cache, (slot + t) * d + j_value, kind)
                      : (t == cached ? load(qkv, v_base + j_value, kind) : 0.0f);
  };
  float first_values[kValuePrefetch * kValueLoads];
#pragma unroll
  for (int u = 0; u < kValuePrefetch * kValueLoads; ++u) {
    first_values[u] = slice < slices ? value_at(slice + u * slices) : 0.0f;
  }
  // The rotary embedding: x cos + rotate_half(x) sin, stored at the model's precision.
#pragma unroll
  for (int r = 0; r < kRotaryLoads; ++r) {
    const int64_t i = t_id + static_cast<int64_t>(r) * threads;
    if (i < rotated_count) rotated[i] = round_to(x[r] * c[r] + partner[r] * s[r], kind);
  }
  // Heads beyond kRotaryLoads * threads elements (large groups or head_dim).
  for (int64_t i = t_id + static_cast<int64_t>(kRotaryLoads) * threads; i < rotated_count;
       i += threads) {
    const int64_t head = i / d;
    const int64_t j = i % d;
    const int64_t base = head < groups ? q_base + head * d : k_base;
    const float value = load(qkv, base + j, kind);
    const float other =
        j < half ? -load(qkv, base + j + half, kind) : load(qkv, base + j - half, kind);
    rotated[i] =
        round_to(value * load(cos, at * d + j, kind) + other * load(sin, at * d + j, kind), kind);
  }
  __syncthreads();
  // Scores: a GEMM's stored product, times the scale in f32 (as the fused softmax did).
  for (int64_t t = t_id; t < span; t += threads) {
    float acc[kMaxGroups];
#pragma unroll
    for (int g = 0; g < kMaxGroups; ++g) acc[g] = 0.0f;
    const float* own = rotated + groups * d;
    if (t < cached && vector_keys) {
      // bf16 keys in 16-byte vectors, kKeyVectors loads in flight before any
      // is used (the first ones loaded in wave 2); products summed in element order.
      const uint4* key = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(key_cache) +
                                                        (slot + t) * d);
      for (int64_t v0 = 0; v0 < key_vectors; v0 += kKeyVectors) {
        uint4 loaded[kKeyVectors];
        if (t == t_id && v0 == 0) {
#pragma unroll
          for (int u = 0; u < kKeyVectors; ++u) loaded[u] = first_key[u];
        } else {
#pragma unroll
          for (int u = 0; u < kKeyVectors; ++u) {
            if (v0 + u < key_vectors) loaded[u] = __ldg(key + v0 + u);
          }
        }
#pragma unroll
        for (int u = 0; u < kKeyVectors; ++u) {
          if (v0 + u < key_vectors) fold_key_vector(acc, loaded[u], v0 + u, rotated, d, groups);
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
    float* p = scores + g * span;
    float most = -3.402823466e38f;
    for (int64_t t = lane; t < span; t += 32) most = fmaxf(most, p[t]);
    for (int offset = 16; offset > 0; offset /= 2) {
      most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, offset));
    }
    float total = 0.0f;
    for (int64_t t = lane; t < span; t += 32) {
      const float e = expf(p[t] - most);
      p[t] = e;
      total += e;
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      total += __shfl_xor_sync(0xffffffffu, total, offset);
    }
    __syncwarp();
    for (int64_t t = lane; t < span; t += 32) p[t] = round_to(p[t] / total, kind);
  }
  __syncthreads();
  // The weighted values: thread (slice, j) sums column j over positions
  // slice, slice + slices, ... for every query head (the first
  // kValuePrefetch * kValueLoads of them from wave 2, then kValueLoads at a
  // time), in increasing t; the slices' partial sums are then added in slice
  // order and stored over the query heads, in place.
  float* partial = scores + groups * span;  // [slices][groups][d]
  if (slice < slices) {
    float acc[kMaxGroups];
#pragma unroll
    for (int g = 0; g < kMaxGroups; ++g) acc[g] = 0.0f;
#pragma unroll
    for (int u = 0; u < kValuePrefetch * kValueLoads; ++u) {
      const int64_t t = slice + u * slices;
      if (t < span) {
#pragma unroll
        for (int g = 0; g < kMaxGroups; ++g) {
          if (g < groups) acc[g] = fmaf(scores[g * span + t], first_values[u], acc[g]);
        }
      }
    }
    for (int64_t t0 = slice + kValuePrefetch * kValueLoads * slices; t0 < span;
         t0 += kValueLoads * slices) {
      float values[kValueLoads];
#pragma unroll
      for (int u = 0; u < kValueLoads; ++u) values[u] = value_at(t0 + u * slices);
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
      if (g < groups) partial[(slice * groups + g) * d + j_value] = acc[g];
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
