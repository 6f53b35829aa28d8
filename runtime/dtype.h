// Element types of tensors, with their sizes, names and the conversions of
// the 16-bit float formats (stored as raw bits; computed in float).
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>

namespace grove::runtime {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kBool, kF64 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "bf16", ...
// Parses the names dtype_name returns; throws DTypeError otherwise.
DType parse_dtype(const std::string& name);
bool is_floating(DType dtype);
std::ostream& operator<<(std::ostream& stream, DType dtype);

// bfloat16: the top 16 bits of a float32, rounded to nearest even.
inline uint16_t float_to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float bf16_bits_to_float(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

uint16_t float_to_f16_bits(float value);
float f16_bits_to_float(uint16_t bits);

// One element of `dtype` at `at` (any alignment), as a double: exact for every
// dtype but i64 beyond 2^53; bool reads as 0 or 1.
double load_element(const void* at, DType dtype);
// Writes `value` at `at` as one element of `dtype`: floats round to nearest
// even (bf16 and f16 through f32), integers truncate toward zero (a NaN or an
// infinity becomes 0), bool is value != 0.
void store_element(void* at, DType dtype, double value);
// `value` rounded as `dtype` holds it: what a store_element and a
// load_element give back, except that integers are not bounded by the
// dtype's range (the float64 reference keeps i32 sums exact).
double round_to_dtype(double value, DType dtype);

// The host kernels' float path (sim's GEMM and attention): element `index` of
// an array of f32, bf16 or f16 elements as a float, and a float stored there
// rounded to nearest even. Other dtypes are not float elements: a load gives
// 0 and a store writes nothing (load_element and store_element take every
// dtype, through double).
inline float load_float_element(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(base)[index];
    case DType::kBF16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kF16:
      return f16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    default:
      return 0;
  }
}
inline void store_float_element(void* base, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(base)[index] = value;
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[index] = float_to_bf16_bits(value);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(base)[index] = float_to_f16_bits(value);
      break;
    default:
      break;
  }
}

}  // namespace grove::runtime
