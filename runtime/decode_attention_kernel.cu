// Source of decode_attention_kernel_ptx.inc (regenerate_ptx.sh): one decode
// step's attention of a LLaMA layer over its KV cache in one kernel, Note
// [Decode attention kernel] (decode_attention_kernel.h). Block (kv_head, row):
// the rotary embedding of the row's query heads of that group and of its new
// key, their scores against the cached keys before the row's position and its
// own key, the softmax and the weighted sum of the cached values and its own
// value, written in place over the fused projection row.
#include <cstdint>
#include <type_traits>

#include "runtime/programmatic_launch_device.h"

namespace {

constexpr int kKeyVectors = 8;  // 16-byte key vectors a thread loads at once
// Positions' values a thread loads at once, loading the cache early or late
// (the fold's order, increasing position within the thread's slice, does not depend on it).
__host__ __device__ constexpr int value_loads(bool early) { return early ? 16 : 8; }

// Element types: float (f32) or Bf16 (bf16 bits), a compile-time parameter,
// so each entry point carries only its own loads and its own G-wide loops:
// the kernel runs as a few blocks, each executing its code once, so its code
// size is latency (instruction fetches from L2): one kernel for every dtype
// and group count up to 8, predicated, was 78 KiB of SASS.
struct Bf16 {};

__device__ __forceinline__ float load(const void* base, int64_t index, float) {
  return static_cast<const float*>(base)[index];
}
__device__ __forceinline__ float load(const void* base, int64_t index, Bf16) {
  const uint32_t bits = static_cast<const uint16_t*>(base)[index];
  return __uint_as_float(bits << 16);
}

// Round to nearest even at bf16 (f32: unchanged), as a stored value would be.
__device__ __forceinline__ float round_to(float value, float) { return value; }
__device__ __forceinline__ float round_to(float value, Bf16) {
  uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return value;  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return __uint_as_float(bits & 0xffff0000u);
}

__device__ __forceinline__ void store(void* base, int64_t index, float value, float) {
  static_cast<float*>(base)[index] = value;
}
__device__ __forceinline__ void store(void* base, int64_t index, float value, Bf16) {
  static_cast<uint16_t*>(base)[index] =
      static_cast<uint16_t>(__float_as_uint(round_to(value, Bf16())) >> 16);
}

// qkv [rows, (heads + 2 kv_heads) * d]; cos, sin [table_len, d] (the rotary
// tables, read at each row's position); caches [rows, kv_heads, cache_len,
// d]; positions i64 [rows]; G = heads / kv_heads. Block: a multiple of d
// threads, at least d; dynamic shared memory: (G + 1) * d + G * (cache_len +
// 1) + (threads / d) * G * d floats. The arithmetic and its order are the
// host function's (decode_attention_kernel.cc). Offsets within a row, a
// slot or a table row are 32-bit (64-bit division and multiplication are
// long instruction sequences) and loops over runtime bounds are not unrolled.
// Early: Note [Decode attention loads the cache early]; Warm: Note [Decode
// attention runs dry before its wait] (decode_attention_kernel.h). Not both.
template <typename T, int G, bool Early, bool kWarmRequested = false>
__device__ __forceinline__ void attention(void* qkv, const void* cos, const void* sin,
                                          const void* key_cache, const void* value_cache,
                                          const int64_t* positions, int64_t heads, int64_t kv_heads,
                                          int64_t head_dim, int64_t cache_len, int64_t table_len,
                                          float scale) {
  static_assert(!(Early && kWarmRequested), "a warm kernel loads nothing early");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool Warm = kWarmRequested;
#else
  constexpr bool Warm = false;  // no programmatic wait to run dry before: the late kernel
#endif
  constexpr int kValueLoads = value_loads(Early);
  if constexpr (!Early && !Warm) {
    wait_for_earlier_kernels();  // Note [Programmatic dependent launch]
    allow_next_kernel();
  }
  extern __shared__ float shared[];
  using Element = typename std::conditional<sizeof(T) == 1, uint16_t, float>::type;
  const T type{};
  const int kv = static_cast<int>(blockIdx.x);
  const int64_t row = blockIdx.y;
  const int t_id = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int d = static_cast<int>(head_dim);
  const int width = static_cast<int>((heads + 2 * kv_heads) * head_dim);
  Element* row_qkv = static_cast<Element*>(qkv) + row * width;
  const int q_base = kv * G * d;  // this group's query heads, within the row
  const int k_base = static_cast<int>(heads) * d + kv * d;
  const int v_base = k_base + static_cast<int>(kv_heads) * d;
  const int64_t position = positions[row];
  const int cached =
      static_cast<int>(position < 0 ? 0 : (position < cache_len ? position : cache_len));
  const int64_t slot = (row * kv_heads + kv) * cache_len;
  const Element* slot_keys = static_cast<const Element*>(key_cache) + slot * d;
  const Element* slot_values = static_cast<const Element*>(value_cache) + slot * d;
  const int slices = threads / d;
  const int slice = t_id / d;
  const int j = t_id - slice * d;
  // With Early, the cached keys of this thread's first position and the cached
  // values of its first round are loaded before the wait (the positions and
  // the cache were written kernels before the one right before this one).
  uint4 early_keys[kKeyVectors];
  bool keys_early = false;
  float early_values[kValueLoads];
  if constexpr (Early) {
    if constexpr (sizeof(T) == 1) {
      if (t_id < cached && d % 8 == 0) {
        keys_early = true;
        const uint4* key = reinterpret_cast<const uint4*>(slot_keys + t_id * d);
#pragma unroll
        for (int u = 0; u < kKeyVectors; ++u) {
          if (u < d / 8) early_keys[u] = __ldg(key + u);
        }
      }
    }
    if (slice < slices) {
#pragma unroll
      for (int u = 0; u < kValueLoads; ++u) {
        const int t = slice + u * slices;
        early_values[u] = t < cached ? load(slot_values, t * d + j, type) : 0.0f;
      }
    }
    wait_for_earlier_kernels();  // Note [Programmatic dependent launch]
    allow_next_kernel();
  }
  // With Warm, pass 0 runs every phase before the wait without storing to
  // global memory or reading what the kernel before writes (the qkv row reads
  // as zeros); pass 1, after the wait, is the kernel. Without, pass 1 alone.
#pragma unroll 1
  for (int pass = Warm ? 0 : 1; pass < 2; ++pass) {
    // Opaque to the optimizer, so both passes run one copy of the code (the
    // dry pass is there to fetch it into the instruction cache).
    int dry_flag = pass == 0 ? 1 : 0;
    asm volatile("" : "+r"(dry_flag));
    const bool dry = dry_flag != 0;
    if (Warm && !dry) {
      wait_for_earlier_kernels();  // Note [Programmatic dependent launch]
      allow_next_kernel();
    }
    if (position < 0) {  // a padding row: zeros, its key and value stay as they are
      if (dry) continue;
#pragma unroll 1
      for (int i = t_id; i < G * d; i += threads) store(row_qkv, q_base + i, 0.0f, type);
      return;
    }
    float* rotated = shared;               // [G + 1][d]: the query heads, then the key
    float* scores = shared + (G + 1) * d;  // [G][cached + 1]
    const int span = cached + 1;           // the keys before the row and its own
    // The rotary embedding: x cos + rotate_half(x) sin, stored at the model's precision.
    const int64_t at = position < table_len ? position : table_len - 1;
    const Element* cos_row = static_cast<const Element*>(cos) + at * d;
    const Element* sin_row = static_cast<const Element*>(sin) + at * d;
    const int half = d / 2;
#pragma unroll 1
    for (int i = t_id; i < (G + 1) * d; i += threads) {
      const int head = i / d;
      const int j = i - head * d;
      const int base = head < G ? q_base + head * d : k_base;
      const float x = dry ? 0.0f : load(row_qkv, base + j, type);
      const float partner = dry        ? 0.0f
                            : j < half ? -load(row_qkv, base + j + half, type)
                                       : load(row_qkv, base + j - half, type);
      rotated[i] = round_to(x * load(cos_row, j, type) + partner * load(sin_row, j, type), type);
    }
    __syncthreads();
    // Scores: a GEMM's stored product, times the scale in f32 (as the fused softmax did).
    const float* own = rotated + G * d;
#pragma unroll 1
    for (int t = t_id; t < span; t += threads) {
      float acc[G];
#pragma unroll
      for (int g = 0; g < G; ++g) acc[g] = 0.0f;
      bool vectors = false;
      if constexpr (sizeof(T) == 1) vectors = t < cached && d % 8 == 0;  // Bf16: keys as vectors
      if (vectors) {
        // bf16 keys in 16-byte vectors, kKeyVectors loads in flight before any
        // is used; the products are summed in the same order as below.
        const uint4* key = reinterpret_cast<const uint4*>(slot_keys + t * d);
#pragma unroll 1
        for (int v0 = 0; v0 < d / 8; v0 += kKeyVectors) {
          uint4 loaded[kKeyVectors];
          if (Early && keys_early && t == t_id && v0 == 0) {
#pragma unroll
            for (int u = 0; u < kKeyVectors; ++u) loaded[u] = early_keys[u];
          } else {
#pragma unroll
            for (int u = 0; u < kKeyVectors; ++u) {
              if (v0 + u < d / 8) loaded[u] = __ldg(key + v0 + u);
            }
          }
#pragma unroll
          for (int u = 0; u < kKeyVectors; ++u) {
            if (v0 + u >= d / 8) break;
            const uint32_t words[4] = {loaded[u].x, loaded[u].y, loaded[u].z, loaded[u].w};
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              const uint32_t bits = e % 2 == 0 ? words[e / 2] << 16 : words[e / 2] & 0xffff0000u;
              const float k = __uint_as_float(bits);
              const int j = (v0 + u) * 8 + e;
#pragma unroll
              for (int g = 0; g < G; ++g) acc[g] = fmaf(rotated[g * d + j], k, acc[g]);
            }
          }
        }
      } else {
#pragma unroll 1
        for (int j = 0; j < d; ++j) {
          const float key = t < cached ? load(slot_keys, t * d + j, type) : own[j];
#pragma unroll
          for (int g = 0; g < G; ++g) acc[g] = fmaf(rotated[g * d + j], key, acc[g]);
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) scores[g * span + t] = round_to(acc[g], type) * scale;
    }
    __syncthreads();
    // Softmax per query head in f32 (a warp per head), probabilities stored at the model's precision.
    const int lane = t_id % 32;
#pragma unroll 1
    for (int g = t_id / 32; g < G; g += threads / 32) {
      float* p = scores + g * span;
      float most = -3.402823466e38f;
#pragma unroll 1
      for (int t = lane; t < span; t += 32) most = fmaxf(most, p[t]);
      for (int offset = 16; offset > 0; offset /= 2) {
        most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, offset));
      }
      float total = 0.0f;
#pragma unroll 1
      for (int t = lane; t < span; t += 32) {
        const float e = expf(p[t] - most);
        p[t] = e;
        total += e;
      }
      for (int offset = 16; offset > 0; offset /= 2) {
        total += __shfl_xor_sync(0xffffffffu, total, offset);
      }
      __syncwarp();
#pragma unroll 1
      for (int t = lane; t < span; t += 32) p[t] = round_to(p[t] / total, type);
    }
    __syncthreads();
    // The weighted values: thread (slice, j) sums column j over positions
    // slice, slice + slices, ... for every query head; the slices' partial sums
    // are then added in slice order and stored over the query heads, in place.
    float* partial = scores + G * span;  // [slices][G][d]
    if (slice < slices) {
      float acc[G];
#pragma unroll
      for (int g = 0; g < G; ++g) acc[g] = 0.0f;
        // kValueLoads positions' values loaded before any is used, folded in increasing t.
#pragma unroll 1
      for (int t0 = slice; t0 < span; t0 += kValueLoads * slices) {
        float values[kValueLoads];
#pragma unroll
        for (int u = 0; u < kValueLoads; ++u) {
          const int t = t0 + u * slices;
          if (Early && t0 == slice && t < cached) {
            values[u] = early_values[u];
          } else {
            values[u] = t < cached ? load(slot_values, t * d + j, type)
                                   : (t == cached && !dry ? load(row_qkv, v_base + j, type) : 0.0f);
          }
        }
#pragma unroll
        for (int u = 0; u < kValueLoads; ++u) {
          const int t = t0 + u * slices;
          if (t >= span) break;
#pragma unroll
          for (int g = 0; g < G; ++g) acc[g] = fmaf(scores[g * span + t], values[u], acc[g]);
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) partial[(slice * G + g) * d + j] = acc[g];
    }
    __syncthreads();
#pragma unroll 1
    for (int i = t_id; i < G * d; i += threads) {
      float sum = 0.0f;
#pragma unroll 1
      for (int other = 0; other < slices; ++other) sum += partial[other * G * d + i];
      if (!dry) store(row_qkv, q_base + i, sum, type);
    }
    if (dry) {
      __syncthreads();  // pass 1 rewrites the shared memory pass 0 still reads
      continue;
    }
#pragma unroll 1
    for (int jj = t_id; jj < d; jj += threads) store(row_qkv, k_base + jj, rotated[G * d + jj], type);
  }
}

}  // namespace

// grove_decode_attention_<f32|bf16>_g<G>(qkv, cos, sin, key_cache,
// value_cache, positions, heads, kv_heads, head_dim, cache_len, table_len,
// type, scale): the entry points decode_attention_kernel.cc launches, one per
// dtype and query heads per kv head (1 to kDecodeAttentionMaxGroups); `type`
// (0 f32, 1 bf16: the host function's) is implied by the entry point.
#define GROVE_DECODE_ATTENTION(NAME, T, G, EARLY, WARM)                                            \
  extern "C" __global__ void NAME(                                                                 \
      void* qkv, const void* cos, const void* sin, const void* key_cache, const void* value_cache, \
      const int64_t* positions, int64_t heads, int64_t kv_heads, int64_t head_dim,                 \
      int64_t cache_len, int64_t table_len, int64_t, float scale) {                                \
    attention<T, G, EARLY, WARM>(qkv, cos, sin, key_cache, value_cache, positions, heads,         \
                                 kv_heads, head_dim, cache_len, table_len, scale);                 \
  }
// Note [Decode attention for many rows] (decode_attention_kernel.h): the late
// kernel held to kDecodeAttentionManyBlocks blocks an SM.
#define GROVE_DECODE_ATTENTION_MANY(NAME, T, G)                                                    \
  extern "C" __global__ void __launch_bounds__(256, 4) NAME(                                       \
      void* qkv, const void* cos, const void* sin, const void* key_cache, const void* value_cache, \
      const int64_t* positions, int64_t heads, int64_t kv_heads, int64_t head_dim,                 \
      int64_t cache_len, int64_t table_len, int64_t, float scale) {                                \
    attention<T, G, false, false>(qkv, cos, sin, key_cache, value_cache, positions, heads,         \
                                  kv_heads, head_dim, cache_len, table_len, scale);                \
  }
// grove_decode_attention_<dtype>_g<G> loads the cache early; ..._late after the
// wait; grove_decode_attention_bf16_g<G>_warm runs dry before it; ..._many is the
// late kernel in fewer registers.
#define GROVE_DECODE_ATTENTION_GROUPS(G)                                                 \
  GROVE_DECODE_ATTENTION(grove_decode_attention_f32_g##G, float, G, true, false)         \
  GROVE_DECODE_ATTENTION(grove_decode_attention_bf16_g##G, Bf16, G, true, false)         \
  GROVE_DECODE_ATTENTION(grove_decode_attention_f32_g##G##_late, float, G, false, false) \
  GROVE_DECODE_ATTENTION(grove_decode_attention_bf16_g##G##_late, Bf16, G, false, false) \
  GROVE_DECODE_ATTENTION(grove_decode_attention_bf16_g##G##_warm, Bf16, G, false, true)  \
  GROVE_DECODE_ATTENTION_MANY(grove_decode_attention_f32_g##G##_many, float, G)          \
  GROVE_DECODE_ATTENTION_MANY(grove_decode_attention_bf16_g##G##_many, Bf16, G)

GROVE_DECODE_ATTENTION_GROUPS(1)
GROVE_DECODE_ATTENTION_GROUPS(2)
GROVE_DECODE_ATTENTION_GROUPS(3)
GROVE_DECODE_ATTENTION_GROUPS(4)
GROVE_DECODE_ATTENTION_GROUPS(5)
GROVE_DECODE_ATTENTION_GROUPS(6)
GROVE_DECODE_ATTENTION_GROUPS(7)
GROVE_DECODE_ATTENTION_GROUPS(8)
