#include "serving/json_number.h"

#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

namespace grove::serving {
namespace {

// Note [Decimal to double in one pass]
// A float token's decimal value is digits × 10^exponent. While the scan
// walks the token it gathers up to 19 significant digits into an integer,
// and when none is left over the double comes from one exact operation:
//  * digits < 2^53 and |exponent| <= 22: both are doubles exactly, so their
//    product or quotient, rounded once by the hardware, is the double
//    nearest the decimal (Clinger's fast path);
//  * else, with x87's 64-bit long double, digits < 2^64 and |exponent| <=
//    27 are exact there, and the product or quotient is rounded once to 64
//    bits; rounding that to a double again gives the nearest double unless
//    the 11 bits dropped lie at the halfway point between two doubles
//    (0x400, or next to it), where the first rounding may have moved the
//    value across it.
// Everything else (more than 19 digits, larger exponents, the halfway
// cases) is read again by std::from_chars, which is exact. Integers are
// read as before. A value read from a float32 widened to a double takes
// 16-17 digits: the first case takes about two thirds of them, the second
// nearly all the rest. Tests: JsonNumber.* (every path against
// std::from_chars on random and edge-case tokens).
constexpr double kPowersOfTen[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

constexpr bool kExtendedLongDouble =
    std::numeric_limits<long double>::digits == 64 && std::numeric_limits<long double>::radix == 2;

// 10^e as a long double, exact for e <= 27 (5^27 < 2^63).
long double long_power_of_ten(int e) {
  long double power = 1;
  for (int i = 0; i < e; ++i) power *= 10;
  return power;
}

bool exact_double(uint64_t digits, int exponent, bool negative, double* value) {
  if (digits == 0) {
    *value = negative ? -0.0 : 0.0;
    return true;
  }
  if (digits < (uint64_t{1} << 53) && exponent >= -22 && exponent <= 22) {
    double d = static_cast<double>(digits);
    d = exponent < 0 ? d / kPowersOfTen[-exponent] : d * kPowersOfTen[exponent];
    *value = negative ? -d : d;
    return true;
  }
  if constexpr (kExtendedLongDouble) {
    if (exponent >= -27 && exponent <= 27) {
      static const long double* const powers = [] {
        static long double table[28];
        for (int e = 0; e < 28; ++e) table[e] = long_power_of_ten(e);
        return table;
      }();
      long double wide = static_cast<long double>(digits);
      wide = exponent < 0 ? wide / powers[-exponent] : wide * powers[exponent];
      uint64_t mantissa = 0;
      std::memcpy(&mantissa, &wide, sizeof(mantissa));  // x87: the 64-bit significand first
      const uint64_t dropped = mantissa & 0x7FF;
      if (dropped >= 0x3FF && dropped <= 0x401) return false;  // near halfway: ask from_chars
      const double d = static_cast<double>(wide);
      *value = negative ? -d : d;
      return true;
    }
  }
  return false;
}

// Note [Decimal to float without the nearest double]
// A reader that keeps a number as a float (an FP32 input) needs float(D), D
// the double nearest the decimal, not D itself. digits × 10^exponent in
// double arithmetic (digits rounded to a double, then at most two products
// by powers of ten: 10^0..10^22, which doubles hold exactly, or the doubles
// nearest 10^-1..10^-22; at most five roundings of 2^-53 each) is within
// 2^-50 of the decimal's value, so within a few units in the last place of D. float() drops a
// double's 29 low significand bits, rounding to nearest: two doubles a few units apart round to the
// same float unless a float's rounding midpoint (dropped bits 0x10000000) lies between them. So
// where the approximation's dropped bits are more than kFloatMargin units
// from that midpoint, and it is a normal float far from overflow, it rounds
// as D does and stands in for it; anything else takes the exact paths. A
// float32 widened to a double and printed (what clients send) is a float
// exactly, its dropped bits 0 or just under 2^29: always the fast case, with
// no x87 arithmetic. Tests: JsonNumber.FloatPrecisionRoundsAsTheNearestDouble,
// JsonNumber.FloatMidpointsTakeTheExactPath.
constexpr uint64_t kFloatMargin = 64;

// 10^-k for k in 0..22, each the double nearest it: a product by one is
// within 2^-53 (relative) of the quotient by 10^k, and costs a fraction of a
// division's latency, which every number of a request's data waited on.
constexpr double kNegativePowersOfTen[] = {1e0,   1e-1,  1e-2,  1e-3,  1e-4,  1e-5,  1e-6,  1e-7,
                                           1e-8,  1e-9,  1e-10, 1e-11, 1e-12, 1e-13, 1e-14, 1e-15,
                                           1e-16, 1e-17, 1e-18, 1e-19, 1e-20, 1e-21, 1e-22};

[[gnu::always_inline]] inline bool float_double(uint64_t digits, int exponent, bool negative,
                                                double* value) {
  if (digits == 0) {
    *value = negative ? -0.0 : 0.0;
    return true;
  }
  if (exponent < -44 || exponent > 44) return false;
  double d = static_cast<double>(digits);
  if (exponent < -22) {
    d = d * 1e-22 * kNegativePowersOfTen[-exponent - 22];
  } else if (exponent < 0) {
    d *= kNegativePowersOfTen[-exponent];
  } else if (exponent > 22) {
    d = d * 1e22 * kPowersOfTen[exponent - 22];
  } else {
    d *= kPowersOfTen[exponent];
  }
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof(bits));
  const int biased = static_cast<int>(bits >> 52);  // d > 0
  // A normal float, with room: float exponents -126..127 are 897..1150 biased as a double.
  if (biased < 1023 - 125 || biased > 1023 + 126) return false;
  const uint64_t dropped = bits & ((uint64_t{1} << 29) - 1);
  const uint64_t midpoint = uint64_t{1} << 28;
  if (dropped + kFloatMargin - midpoint <= 2 * kFloatMargin) return false;  // near it
  *value = negative ? -d : d;
  return true;
}

// Eight ASCII digits at `p` as their value; false if any of them is not a
// digit. Little-endian: the first digit is the lowest byte.
bool eight_digits(const char* p, uint32_t* value) {
  uint64_t bytes = 0;
  std::memcpy(&bytes, p, 8);
  // Each byte in '0'..'9': its high nibble is 3, and adding 6 keeps it 3.
  if ((bytes & 0xF0F0F0F0F0F0F0F0) != 0x3030303030303030 ||
      ((bytes + 0x0606060606060606) & 0xF0F0F0F0F0F0F0F0) != 0x3030303030303030) {
    return false;
  }
  bytes &= 0x0F0F0F0F0F0F0F0F;                                       // digits 0-9 per byte
  bytes = (bytes * (1 + (10 << 8))) >> 8;                            // pairs: 10*a + b
  bytes = ((bytes & 0x00FF00FF00FF00FF) * (1 + (100 << 16))) >> 16;  // quads
  *value =
      static_cast<uint32_t>(((bytes & 0x0000FFFF0000FFFF) * (1 + (uint64_t{10000} << 32))) >> 32);
  return true;
}

// Note [Floats in nine digits]
// A float has 24 significant bits, so the gap to its neighbours is at least
// 2^-24 of its value and a decimal within 2^-25 of it reads back as it. Nine
// significant digits hold any float within 0.5e-8 of it (FLT_DECIMAL_DIG),
// so even a last digit off by one (1.5e-8) reads back exactly, and so does
// its nearest double (2^-53 further) rounded to a float. write_json_float
// takes the nine digits from one double product, value * 10^(8 - e), whose
// rounding (below 1e-15 relative) cannot matter, instead of the shortest
// digits std::to_chars searches for (Ryu): 512 floats in [-1, 1], an
// mlp16x512 answer, took 8.1 us with to_chars and take 4.6 us here (one core
// of the build machine, best of 30), in 6,386 characters instead of 5,665.
// The text is the shortest where that has nine digits, and a digit or two
// longer otherwise. Tests: JsonFloat.* (random bit patterns, every binade,
// subnormals and the extremes read back with std::from_chars as float and as
// double, and parse as JSON numbers).
constexpr int kLowestPower = -31, kHighestPower = 54;  // 10^(8 - e) for every float
constexpr auto kPowers = [] {
  std::array<double, kHighestPower - kLowestPower + 1> powers{};
  for (int e = kLowestPower; e <= kHighestPower; ++e) {
    double power = 1;  // exact up to 10^22; the rest round within 1e-15, which is enough
    for (int i = 0; i < (e < 0 ? -e : e); ++i) power *= 10;
    powers[static_cast<size_t>(e - kLowestPower)] = e < 0 ? 1 / power : power;
  }
  return powers;
}();

double power_of_ten(int e) { return kPowers[static_cast<size_t>(e - kLowestPower)]; }

}  // namespace

namespace {

[[gnu::always_inline]] inline char* write_float(char* out, float value) {
  if (std::signbit(value)) *out++ = '-';
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude == 0) {
    *out++ = '0';
    return out;
  }
  uint64_t bits = 0;
  std::memcpy(&bits, &magnitude, sizeof(bits));
  // magnitude in [2^b, 2^(b+1)) (a float is a normal double); floor(b * log10(2))
  // in integers (exact for |b| < 1600) is floor(log10(magnitude)) or one less.
  const int binary_exponent = static_cast<int>(bits >> 52) - 1023;
  int exponent = (binary_exponent * 78913) >> 18;
  // Rounded half up; either neighbour of a tie reads back alike (the Note).
  auto digits_at = [&](int e) {
    return static_cast<uint64_t>(magnitude * power_of_ten(8 - e) + 0.5);
  };
  uint64_t wide = digits_at(exponent);
  if (wide >= 1000000000) wide = digits_at(++exponent);
  if (wide >= 1000000000) {  // rounded up to 10^9
    wide /= 10;
    ++exponent;
  }
  // The nine digits: the first, then the other eight as ASCII in one word,
  // split in SIMD-within-a-register steps (4 + 4, then 2 + 2, then 1 + 1
  // digits per lane; exact quotients for these ranges), the most significant
  // digit in the lowest byte, so that it is stored as written.
  const auto digits = static_cast<uint32_t>(wide);
  const char first = static_cast<char>('0' + digits / 100000000);
  const uint64_t low = digits % 100000000;
  const uint64_t quads = low / 10000 | (low % 10000) << 32;
  const uint64_t hundreds = ((quads * 10486) >> 20) & 0x0000007F0000007F;  // per lane / 100
  const uint64_t pairs = hundreds | (quads - hundreds * 100) << 16;
  const uint64_t tens = ((pairs * 103) >> 10) & 0x000F000F000F000F;  // per lane / 10
  const uint64_t values = tens | (pairs - tens * 10) << 8;
  const uint64_t word = values + 0x3030303030303030;
  // Trailing zeros dropped: the zero digits at the top of the word (its last).
  const size_t n = 9 - (values == 0 ? 8 : static_cast<size_t>(std::countl_zero(values)) / 8);
  // Fixed-size stores (the caller's room is kJsonFloatChars), then the end moved to fit.
  if (exponent >= 0 && exponent < 9) {  // ddd, ddd.ddd
    char text[9];
    text[0] = first;
    std::memcpy(text + 1, &word, 8);
    const auto whole = static_cast<size_t>(exponent + 1);
    if (n <= whole) {
      std::memcpy(out, text, n);
      std::memset(out + n, '0', whole - n);
      return out + whole;
    }
    std::memcpy(out, text, whole);
    out[whole] = '.';
    std::memcpy(out + whole + 1, text + whole, n - whole);
    return out + n + 1;
  }
  if (exponent < 0 && exponent >= -5) {  // 0.000ddd
    const auto zeros = static_cast<size_t>(-exponent - 1);
    std::memcpy(out, "0.000000", 8);
    out[2 + zeros] = first;
    std::memcpy(out + 3 + zeros, &word, 8);
    return out + 2 + zeros + n;
  }
  out[0] = first;  // d.ddde-XX
  if (n > 1) {
    out[1] = '.';
    std::memcpy(out + 2, &word, 8);
    out += n + 1;
  } else {
    out += 1;
  }
  *out++ = 'e';
  if (exponent < 0) {
    *out++ = '-';
    exponent = -exponent;
  }
  if (exponent >= 10) *out++ = static_cast<char>('0' + exponent / 10);
  *out++ = static_cast<char>('0' + exponent % 10);
  return out;
}

}  // namespace

char* write_json_float(char* out, float value) { return write_float(out, value); }

char* write_json_float_list(char* out, const unsigned char* data, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) *out++ = ',';
    float value = 0;
    std::memcpy(&value, data + i * sizeof(float), sizeof(float));
    if (!std::isfinite(value)) {
      std::memcpy(out, "null", 4);
      out += 4;
      continue;
    }
    out = write_float(out, value);
  }
  return out;
}

namespace {

[[gnu::always_inline]] inline const char* read_number(const char* begin, const char* end,
                                                      JsonNumber* number, JsonPrecision precision) {
  const char* p = begin;
  const bool negative = p < end && *p == '-';
  if (negative) ++p;
  uint64_t digits = 0;  // the first 19 significant digits
  int significant = 0;
  int exponent = 0;        // of the last digit gathered
  bool truncated = false;  // a nonzero digit past the 19th was left out
  if (p < end && *p == '0') {
    ++p;
  } else if (p < end && *p >= '1' && *p <= '9') {
    for (; p < end && *p >= '0' && *p <= '9'; ++p) {
      if (significant < 19) {
        digits = digits * 10 + static_cast<uint64_t>(*p - '0');
        ++significant;
      } else {
        ++exponent;
        truncated |= *p != '0';
      }
    }
  } else {
    return nullptr;
  }
  bool integer = true;
  if (p < end && *p == '.') {
    ++p;
    const char* first = p;
    if (digits == 0) {  // zeros before the first significant digit only move the point
      while (p < end && *p == '0') ++p;
      exponent -= static_cast<int>(p - first);
    }
    // Eight digits at a time while they fit the 19 gathered (Note [Decimal
    // to double in one pass]), then one at a time.
    uint32_t eight = 0;
    while (significant + 8 <= 19 && end - p >= 8 && eight_digits(p, &eight)) {
      digits = digits * 100000000 + eight;
      significant += 8;
      exponent -= 8;
      p += 8;
    }
    for (; p < end && *p >= '0' && *p <= '9'; ++p) {
      if (significant < 19) {
        digits = digits * 10 + static_cast<uint64_t>(*p - '0');
        significant += digits != 0 ? 1 : 0;  // leading zeros are not significant
        --exponent;
      } else {
        truncated |= *p != '0';
      }
    }
    if (p == first) return nullptr;
    integer = false;
  }
  bool exponent_fits = true;
  if (p < end && (*p == 'e' || *p == 'E')) {
    ++p;
    bool exponent_negative = false;
    if (p < end && (*p == '+' || *p == '-')) exponent_negative = *p++ == '-';
    const char* first = p;
    int written = 0;
    for (; p < end && *p >= '0' && *p <= '9'; ++p) {
      if (written < 100000) written = written * 10 + (*p - '0');
    }
    if (p == first) return nullptr;
    exponent_fits = written < 100000;
    exponent += exponent_negative ? -written : written;
    integer = false;
  }
  if (integer && negative) {
    number->kind = JsonNumber::Kind::kInteger;
    if (std::from_chars(begin, p, number->integer).ec == std::errc()) return p;
  } else if (integer) {
    number->kind = JsonNumber::Kind::kUnsigned;
    if (std::from_chars(begin, p, number->unsigned_integer).ec == std::errc()) return p;
  }
  // A float token, or an integer past 64 bits (nlohmann reads it as a double).
  number->kind = JsonNumber::Kind::kFloat;
  if (!truncated && exponent_fits) {
    // Note [Decimal to float without the nearest double].
    if (precision == JsonPrecision::kFloat &&
        float_double(digits, exponent, negative, &number->floating)) {
      return p;
    }
    if (exact_double(digits, exponent, negative, &number->floating)) return p;
  }
  auto [last, error] = std::from_chars(begin, p, number->floating);
  return error == std::errc() && last == p && std::isfinite(number->floating) ? p : nullptr;
}

bool json_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

const char* read_json_number(const char* begin, const char* end, JsonNumber* number,
                             JsonPrecision precision) {
  return read_number(begin, end, number, precision);
}

const char* read_json_float_list(const char* begin, const char* end, unsigned char* out,
                                 size_t max_count, size_t* count) {
  *count = 0;
  const char* after = begin;  // after the last token stored
  const char* p = begin;
  while (*count < max_count) {
    JsonNumber number;
    const char* next = read_number(p, end, &number, JsonPrecision::kFloat);
    if (next == nullptr) break;
    float value = 0;
    switch (number.kind) {  // as the rows' reader narrows each kind (through a double)
      case JsonNumber::Kind::kFloat:
        value = static_cast<float>(number.floating);
        break;
      case JsonNumber::Kind::kInteger:
        value = static_cast<float>(static_cast<double>(number.integer));
        break;
      case JsonNumber::Kind::kUnsigned:
        value = static_cast<float>(static_cast<double>(number.unsigned_integer));
        break;
    }
    std::memcpy(out + *count * sizeof(float), &value, sizeof(float));
    ++*count;
    after = next;
    // On to the next token only past a comma (JSON whitespace around it).
    p = next;
    while (p < end && json_space(*p)) ++p;
    if (p == end || *p != ',') break;
    ++p;
    while (p < end && json_space(*p)) ++p;
  }
  return after;
}

}  // namespace grove::serving
