// DType names and sizes, and the float <-> f16 / bf16 conversions: exact
// round trips of every bit pattern and round-to-nearest-even against a
// brute-force reference built from the full table of representable values.
#include "runtime/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "runtime/error.h"
#include "tests/common/test_util.h"

namespace grove::runtime {
namespace {

struct HalfFormat {
  const char* name;
  uint16_t (*encode)(float);
  float (*decode)(uint16_t);
  uint16_t infinity_bits;  // +inf
};

const HalfFormat kF16{"f16", float_to_f16_bits, f16_bits_to_float, 0x7c00};
const HalfFormat kBF16{"bf16", float_to_bf16_bits, bf16_bits_to_float, 0x7f80};

bool is_nan_bits(const HalfFormat& format, uint16_t bits) {
  uint16_t magnitude = bits & 0x7fff;
  return magnitude > format.infinity_bits;
}

// The encoding IEEE round-to-nearest-even gives a non-negative finite `value`:
// the nearest of all representable non-negative values, ties to the even bit
// pattern, where values past the largest finite one round to infinity as if it
// sat one ulp further (at the next power of two).
uint16_t reference_encode(const HalfFormat& format, double value) {
  uint16_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (uint32_t bits = 0; bits <= format.infinity_bits; ++bits) {
    double candidate = bits == format.infinity_bits
                           ? 2.0 * static_cast<double>(format.decode(bits - 1)) -
                                 static_cast<double>(format.decode(bits - 2))
                           : static_cast<double>(format.decode(static_cast<uint16_t>(bits)));
    double distance = std::abs(candidate - value);
    if (distance < best_distance || (distance == best_distance && (bits & 1u) == 0)) {
      best = static_cast<uint16_t>(bits);
      best_distance = distance;
    }
  }
  return best;
}

TEST(DType, NamesAndSizesRoundTripThroughParse) {
  const std::vector<std::pair<DType, size_t>> all = {
      {DType::kF32, 4}, {DType::kF16, 2},  {DType::kBF16, 2}, {DType::kI32, 4},
      {DType::kI64, 8}, {DType::kBool, 1}, {DType::kF64, 8}};
  for (auto [dtype, size] : all) {
    EXPECT_EQ(parse_dtype(dtype_name(dtype)), dtype);
    EXPECT_EQ(dtype_size(dtype), size) << dtype_name(dtype);
  }
  EXPECT_TRUE(is_floating(DType::kBF16));
  EXPECT_FALSE(is_floating(DType::kI64));
  try {
    parse_dtype("float32");
    ADD_FAILURE() << "an unknown dtype name was accepted";
  } catch (const DTypeError& error) {
    EXPECT_NE(std::string(error.what()).find("'float32'"), std::string::npos) << error.what();
  }
}

class HalfConversion : public ::testing::TestWithParam<HalfFormat> {};

TEST_P(HalfConversion, EveryNonNanBitPatternRoundTripsExactly) {
  const HalfFormat& format = GetParam();
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    auto b = static_cast<uint16_t>(bits);
    if (is_nan_bits(format, b)) continue;
    ASSERT_EQ(format.encode(format.decode(b)), b) << format.name << " bits 0x" << std::hex << bits;
  }
}

TEST_P(HalfConversion, NanStaysNanAndInfinityStaysInfinity) {
  const HalfFormat& format = GetParam();
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(format.decode(format.encode(nan))));
  EXPECT_TRUE(std::isnan(format.decode(format.encode(-nan))));
  float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(format.encode(inf), format.infinity_bits);
  EXPECT_EQ(format.encode(-inf), format.infinity_bits | 0x8000);
  EXPECT_EQ(format.encode(std::numeric_limits<float>::max()), format.infinity_bits);
  EXPECT_EQ(format.encode(-0.0f), 0x8000);
}

TEST_P(HalfConversion, RoundsRandomFloatsToNearestEven) {
  const HalfFormat& format = GetParam();
  GROVE_SEEDED_RNG(rng);
  // Magnitudes from far below the smallest subnormal to past the largest finite value.
  double largest = format.decode(format.infinity_bits - 1);
  double low_exponent = std::log2(static_cast<double>(format.decode(1))) - 3;
  double high_exponent = std::log2(largest) + 1;
  std::uniform_real_distribution<double> exponent(low_exponent, high_exponent);
  std::bernoulli_distribution negative(0.5);
  for (int i = 0; i < 400; ++i) {
    auto magnitude = static_cast<float>(std::exp2(exponent(rng)));
    if (magnitude == 0.0f) continue;
    uint16_t expected = reference_encode(format, magnitude);
    float value = negative(rng) ? -magnitude : magnitude;
    uint16_t sign = value < 0 ? 0x8000 : 0;
    ASSERT_EQ(format.encode(value), expected | sign)
        << format.name << " of " << value << " (" << std::hexfloat << value << ")";
  }
}

TEST_P(HalfConversion, BreaksExactTiesTowardTheEvenPattern) {
  const HalfFormat& format = GetParam();
  GROVE_SEEDED_RNG(rng);
  // Midpoints between consecutive finite values (subnormal and normal) are
  // exact in float; each must go to the neighbour whose pattern is even.
  std::uniform_int_distribution<uint32_t> pattern(0, format.infinity_bits - 2u);
  for (int i = 0; i < 400; ++i) {
    auto low = static_cast<uint16_t>(pattern(rng));
    double midpoint = (static_cast<double>(format.decode(low)) + format.decode(low + 1)) / 2;
    auto value = static_cast<float>(midpoint);
    ASSERT_EQ(static_cast<double>(value), midpoint);
    uint16_t even = (low & 1u) == 0 ? low : static_cast<uint16_t>(low + 1);
    ASSERT_EQ(format.encode(value), even) << format.name << " midpoint above 0x" << std::hex << low;
    ASSERT_EQ(format.encode(-value), even | 0x8000);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfConversion, ::testing::Values(kF16, kBF16),
                         [](const ::testing::TestParamInfo<HalfFormat>& info) {
                           return std::string(info.param.name);
                         });

TEST(DType, F16KnownValues) {
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16_bits(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7c00);  // the tie past the largest rounds to inf
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and it: even
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f16_bits_to_float(0x3555), 0.333251953125f);
}

TEST(DType, BF16KnownValues) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie, even below
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie, even above
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(bf16_bits_to_float(0xc0a0), -5.0f);
}

// load_element and store_element are the one place a dtype's bytes are read
// and written: a value survives a round trip as round_to_dtype says, at any
// alignment, and the bytes are the dtype's own bit patterns.
TEST(DType, ElementsRoundTripThroughStoreAndLoadAsRoundToDtypeSays) {
  GROVE_SEEDED_RNG(rng);
  std::uniform_real_distribution<double> values(-300.0, 300.0);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64,
                      DType::kBool, DType::kF64}) {
    for (int trial = 0; trial < 64; ++trial) {
      const double value = trial == 0 ? 0.0 : values(rng);
      unsigned char bytes[1 + sizeof(double)] = {};
      store_element(bytes + 1, dtype, value);  // unaligned on purpose
      EXPECT_EQ(load_element(bytes + 1, dtype), round_to_dtype(value, dtype))
          << dtype_name(dtype) << " " << value;
    }
  }
}

TEST(DType, StoreElementWritesEachDtypesBitPattern) {
  auto stored = [](DType dtype, double value) {
    unsigned char bytes[sizeof(double)] = {};
    store_element(bytes, dtype, value);
    return std::vector<unsigned char>(bytes, bytes + dtype_size(dtype));
  };
  auto bytes_of = [](auto value) {
    std::vector<unsigned char> bytes(sizeof(value));
    std::memcpy(bytes.data(), &value, sizeof(value));
    return bytes;
  };
  EXPECT_EQ(stored(DType::kF32, 1.0), bytes_of(1.0f));
  EXPECT_EQ(stored(DType::kF64, 0.1), bytes_of(0.1));
  EXPECT_EQ(stored(DType::kF16, 1.0), bytes_of(uint16_t{0x3c00}));
  EXPECT_EQ(stored(DType::kBF16, -5.0), bytes_of(uint16_t{0xc0a0}));
  EXPECT_EQ(stored(DType::kI32, -7.9), bytes_of(int32_t{-7}));
  EXPECT_EQ(stored(DType::kI64, 7.9), bytes_of(int64_t{7}));
  EXPECT_EQ(stored(DType::kI32, std::nan("")), bytes_of(int32_t{0}));
  EXPECT_EQ(stored(DType::kBool, -0.5), bytes_of(uint8_t{1}));
  EXPECT_EQ(stored(DType::kBool, 0.0), bytes_of(uint8_t{0}));
}

}  // namespace
}  // namespace grove::runtime
