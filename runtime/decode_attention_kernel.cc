#include "runtime/decode_attention_kernel.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::runtime {
namespace {

constexpr const char* kName = "grove_decode_attention";
constexpr const char* kPtx =
#include "runtime/decode_attention_kernel_ptx.inc"
    ;
// Note [Programmatic dependent launch] (runtime/cuda/cuda_platform.cc).
constexpr const char* kProgrammaticPtx =
#include "runtime/decode_attention_kernel_programmatic_ptx.inc"
    ;
constexpr int64_t kMaxSharedBytes = 48 * 1024;

int64_t shared_floats(int64_t groups, int64_t head_dim, int64_t cache_len) {
  const int64_t slices = kDecodeAttentionThreads / head_dim;
  return (groups + 1) * head_dim + groups * (cache_len + 1) + slices * groups * head_dim;
}

// The kernel's arithmetic on the host (sim), block by block.
float round_to(float value, bool bf16) {
  return bf16 ? bf16_bits_to_float(float_to_bf16_bits(value)) : value;
}

void host_decode_attention(const LaunchDims* dims, const uint64_t* args) {
  void* qkv = reinterpret_cast<void*>(args[0]);
  const void* cos = reinterpret_cast<const void*>(args[1]);
  const void* sin = reinterpret_cast<const void*>(args[2]);
  const void* key_cache = reinterpret_cast<const void*>(args[3]);
  const void* value_cache = reinterpret_cast<const void*>(args[4]);
  const auto* positions = reinterpret_cast<const int64_t*>(args[5]);
  const auto heads = static_cast<int64_t>(args[6]);
  const auto kv_heads = static_cast<int64_t>(args[7]);
  const auto d = static_cast<int64_t>(args[8]);
  const auto cache_len = static_cast<int64_t>(args[9]);
  const auto table_len = static_cast<int64_t>(args[10]);
  const bool bf16 = args[11] == 1;
  const DType dtype = bf16 ? DType::kBF16 : DType::kF32;
  float scale;
  std::memcpy(&scale, &args[12], sizeof(scale));
  const int64_t groups = heads / kv_heads;
  const int64_t width = (heads + 2 * kv_heads) * d;
  const int64_t slices = static_cast<int64_t>(dims->block.x) / d;
  for (int64_t row = 0; row < dims->grid.y; ++row) {
    for (int64_t kv = 0; kv < dims->grid.x; ++kv) {
      const int64_t q_base = row * width + kv * groups * d;
      const int64_t k_base = row * width + heads * d + kv * d;
      const int64_t v_base = k_base + kv_heads * d;
      const int64_t position = positions[row];
      if (position < 0) {
        for (int64_t i = 0; i < groups * d; ++i) store_float_element(qkv, dtype, q_base + i, 0.0f);
        continue;
      }
      std::vector<float> rotated(static_cast<size_t>((groups + 1) * d));
      const int64_t at = std::min(position, table_len - 1);
      const int64_t half = d / 2;
      for (int64_t i = 0; i < (groups + 1) * d; ++i) {
        const int64_t head = i / d;
        const int64_t j = i % d;
        const int64_t base = head < groups ? q_base + head * d : k_base;
        const float x = load_float_element(qkv, dtype, base + j);
        const float partner = j < half ? -load_float_element(qkv, dtype, base + j + half)
                                       : load_float_element(qkv, dtype, base + j - half);
        rotated[static_cast<size_t>(i)] =
            round_to(x * load_float_element(cos, dtype, at * d + j) +
                         partner * load_float_element(sin, dtype, at * d + j),
                     bf16);
      }
      const int64_t cached = std::min(position, cache_len);
      const int64_t span = cached + 1;
      const int64_t slot = (row * kv_heads + kv) * cache_len;
      std::vector<float> scores(static_cast<size_t>(groups * span));
      for (int64_t t = 0; t < span; ++t) {
        for (int64_t g = 0; g < groups; ++g) {
          float acc = 0.0f;
          for (int64_t j = 0; j < d; ++j) {
            const float key = t < cached ? load_float_element(key_cache, dtype, (slot + t) * d + j)
                                         : rotated[static_cast<size_t>(groups * d + j)];
            acc = std::fma(rotated[static_cast<size_t>(g * d + j)], key, acc);
          }
          scores[static_cast<size_t>(g * span + t)] = round_to(acc, bf16) * scale;
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        float* s = scores.data() + g * span;
        float most = -3.402823466e38f;
        for (int64_t t = 0; t < span; ++t) most = std::max(most, s[t]);
        float total = 0.0f;
        for (int64_t t = 0; t < span; ++t) {
          s[t] = std::exp(s[t] - most);
          total += s[t];
        }
        for (int64_t t = 0; t < span; ++t) s[t] = round_to(s[t] / total, bf16);
      }
      for (int64_t i = 0; i < groups * d; ++i) {
        const int64_t g = i / d;
        const int64_t j = i % d;
        float sum = 0.0f;
        for (int64_t slice = 0; slice < slices; ++slice) {
          float acc = 0.0f;
          for (int64_t t = slice; t < span; t += slices) {
            const float value = t < cached
                                    ? load_float_element(value_cache, dtype, (slot + t) * d + j)
                                    : load_float_element(qkv, dtype, v_base + j);
            acc = std::fma(scores[static_cast<size_t>(g * span + t)], value, acc);
          }
          sum += acc;
        }
        store_float_element(qkv, dtype, q_base + i, sum);
      }
      for (int64_t j = 0; j < d; ++j) {
        store_float_element(qkv, dtype, k_base + j, rotated[static_cast<size_t>(groups * d + j)]);
      }
    }
  }
}

}  // namespace

std::string decode_attention_refusal(DType dtype, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                     int64_t cache_len) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return str_cat("dtype ", dtype_name(dtype), " (the kernel takes f32 and bf16)");
  }
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 ||
      heads / kv_heads > kDecodeAttentionMaxGroups) {
    return str_cat(heads, " heads over ", kv_heads, " kv heads (at most ",
                   kDecodeAttentionMaxGroups, " query heads per kv head)");
  }
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > kDecodeAttentionThreads) {
    return str_cat("head_dim ", head_dim, " (even, at most ", kDecodeAttentionThreads, ")");
  }
  const int64_t bytes = 4 * shared_floats(heads / kv_heads, head_dim, cache_len);
  if (cache_len <= 0 || bytes > kMaxSharedBytes) {
    return str_cat(cache_len, " cache positions (", bytes, " bytes of shared memory, at most ",
                   kMaxSharedBytes, ")");
  }
  return "";
}

void launch_decode_attention(const Tensor& qkv, const Tensor& cos, const Tensor& sin,
                             const Tensor& key_cache, const Tensor& value_cache,
                             const Tensor& positions, int64_t heads, StreamHandle stream) {
  GROVE_CHECK_AS(ShapeError, key_cache.dim() == 4 && qkv.dim() == 2 && cos.dim() == 2,
                 "decode attention: expected caches [rows, kv_heads, positions, head_dim], qkv "
                 "[rows, width] and cos [rows, head_dim]; got ",
                 key_cache.str(), ", ", qkv.str(), ", ", cos.str());
  const int64_t rows = qkv.shape()[0];
  const int64_t kv_heads = key_cache.shape()[1];
  const int64_t cache_len = key_cache.shape()[2];
  const int64_t d = key_cache.shape()[3];
  const DType dtype = qkv.dtype();
  const std::string refusal = decode_attention_refusal(dtype, heads, kv_heads, d, cache_len);
  GROVE_CHECK_AS(ShapeError, refusal.empty(), "decode attention: the kernel does not take ",
                 refusal);
  for (const Tensor* t : {&qkv, &cos, &sin, &key_cache, &value_cache, &positions}) {
    GROVE_CHECK_AS(ShapeError, t->is_contiguous(), "decode attention: operand ", t->str(),
                   " is not contiguous");
  }
  for (const Tensor* t : {&cos, &sin, &key_cache, &value_cache}) {
    GROVE_CHECK_AS(DTypeError, t->dtype() == dtype, "decode attention: operand ", t->str(),
                   " is not of qkv's dtype ", dtype_name(dtype));
  }
  GROVE_CHECK_AS(DTypeError, positions.dtype() == DType::kI64, "decode attention: positions ",
                 positions.str(), " must be i64");
  const int64_t table_len = cos.dim() == 2 ? cos.shape()[0] : 0;
  const Shape table{table_len, d};
  const bool fits = qkv.shape()[1] == (heads + 2 * kv_heads) * d && table_len > 0 &&
                    cos.shape() == table && sin.shape() == table &&
                    value_cache.shape() == key_cache.shape() && key_cache.shape()[0] == rows &&
                    positions.shape() == Shape{rows};
  GROVE_CHECK_AS(ShapeError, fits, "decode attention of ", heads,
                 " heads: operands do not fit together: qkv ", qkv.str(), ", cos ", cos.str(),
                 ", sin ", sin.str(), ", caches ", key_cache.str(), " and ", value_cache.str(),
                 ", positions ", positions.str());
  if (rows == 0) return;
  KernelSource source;
  // Note [Decode attention loads the cache early]: GROVE_ATTENTION_EARLY_LOADS=0
  // launches the kernel that loads it after its wait (read at each launch, so
  // one process can time both).
  // Note [Decode attention runs dry before its wait]: GROVE_ATTENTION_WARM=1
  // runs the kernel that does for one bf16 row (read at each launch too).
  const char* early = std::getenv("GROVE_ATTENTION_EARLY_LOADS");
  const bool late = early != nullptr && std::string_view(early) == "0";
  const char* warm_setting = std::getenv("GROVE_ATTENTION_WARM");
  const bool warm = !late && dtype == DType::kBF16 && rows == 1 && warm_setting != nullptr &&
                    std::string_view(warm_setting) == "1";
  // Note [Decode attention for many rows]: GROVE_ATTENTION_MANY=0 never, =1 always (read at
  // each launch too).
  const Device device = qkv.device();
  const char* many_setting = std::getenv("GROVE_ATTENTION_MANY");
  const std::string_view many_value = many_setting == nullptr ? "" : many_setting;
  const bool many =
      !warm && (many_value == "1" ||
                (many_value != "0" && device.is_cuda() &&
                 kv_heads * rows > device_context(device).platform().multiprocessor_count()));
  source.name = str_cat(kName, dtype == DType::kBF16 ? "_bf16_g" : "_f32_g", heads / kv_heads,
                        many ? "_many" : (late ? "_late" : (warm ? "_warm" : "")));
  if (device.is_cuda()) {
    source.ptx = kPtx;
    source.ptx_programmatic = kProgrammaticPtx;
  } else {
    source.host_function = &host_decode_attention;
  }
  const KernelHandle kernel = load_kernel_once(device, source);
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(kv_heads);
  dims.grid.y = static_cast<uint32_t>(rows);
  dims.block.x = kDecodeAttentionThreads;
  dims.shared_bytes = static_cast<uint32_t>(4 * shared_floats(heads / kv_heads, d, cache_len));
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  KernelArgs args;
  args.add_pointer(qkv.data_ptr())
      .add_pointer(cos.data_ptr())
      .add_pointer(sin.data_ptr())
      .add_pointer(key_cache.data_ptr())
      .add_pointer(value_cache.data_ptr())
      .add_pointer(positions.data_ptr())
      .add_i64(heads)
      .add_i64(kv_heads)
      .add_i64(d)
      .add_i64(cache_len)
      .add_i64(table_len)
      .add_i64(dtype == DType::kBF16 ? 1 : 0)
      .add_f32(scale);
  device_context(device).platform().launch_kernel(kernel, dims, args, stream);
}

}  // namespace grove::runtime
