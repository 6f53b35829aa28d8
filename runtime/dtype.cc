#include "runtime/dtype.h"

#include <cmath>

#include "runtime/error.h"

namespace grove::runtime {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kBool:
      return 1;
    case DType::kF64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kBool:
      return "bool";
    case DType::kF64:
      return "f64";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64,
                      DType::kBool, DType::kF64}) {
    if (name == dtype_name(dtype)) return dtype;
  }
  throw DTypeError(
      str_cat("unknown dtype '", name, "': expected one of f32, f16, bf16, i32, i64, bool, f64"));
}

bool is_floating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
         dtype == DType::kF64;
}

std::ostream& operator<<(std::ostream& stream, DType dtype) { return stream << dtype_name(dtype); }

uint16_t float_to_f16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  uint32_t sign = (bits >> 16) & 0x8000u;
  int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xffu) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffffu;
  if (((bits >> 23) & 0xffu) == 0xffu) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
  }
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  uint32_t remainder = mantissa & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

float f16_bits_to_float(uint16_t bits) {
  uint32_t sign = (bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  uint32_t wide;
  if (exponent == 31) {
    wide = sign | 0x7f800000u | (mantissa << 13);
  } else {
    wide = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

namespace {

template <typename T>
T read_as(const void* at) {
  T value;
  std::memcpy(&value, at, sizeof(value));
  return value;
}

template <typename T>
void write_as(void* at, T value) {
  std::memcpy(at, &value, sizeof(value));
}

template <typename Int>
Int truncate_to(double value) {
  return std::isfinite(value) ? static_cast<Int>(std::trunc(value)) : Int{0};
}

}  // namespace

double load_element(const void* at, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return read_as<float>(at);
    case DType::kF64:
      return read_as<double>(at);
    case DType::kF16:
      return f16_bits_to_float(read_as<uint16_t>(at));
    case DType::kBF16:
      return bf16_bits_to_float(read_as<uint16_t>(at));
    case DType::kI32:
      return read_as<int32_t>(at);
    case DType::kI64:
      return static_cast<double>(read_as<int64_t>(at));
    case DType::kBool:
      return read_as<uint8_t>(at) != 0 ? 1.0 : 0.0;
  }
  return 0;
}

void store_element(void* at, DType dtype, double value) {
  switch (dtype) {
    case DType::kF32:
      write_as(at, static_cast<float>(value));
      break;
    case DType::kF64:
      write_as(at, value);
      break;
    case DType::kF16:
      write_as(at, float_to_f16_bits(static_cast<float>(value)));
      break;
    case DType::kBF16:
      write_as(at, float_to_bf16_bits(static_cast<float>(value)));
      break;
    case DType::kI32:
      write_as(at, truncate_to<int32_t>(value));
      break;
    case DType::kI64:
      write_as(at, truncate_to<int64_t>(value));
      break;
    case DType::kBool:
      write_as(at, static_cast<uint8_t>(value != 0 ? 1 : 0));
      break;
  }
}

double round_to_dtype(double value, DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return value;
    case DType::kF32:
      return static_cast<double>(static_cast<float>(value));
    case DType::kBF16:
      return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(value)));
    case DType::kF16:
      return f16_bits_to_float(float_to_f16_bits(static_cast<float>(value)));
    case DType::kI32:
    case DType::kI64:
      return std::isfinite(value) ? std::trunc(value) : 0;
    case DType::kBool:
      return value != 0 ? 1 : 0;
  }
  return value;
}

}  // namespace grove::runtime
