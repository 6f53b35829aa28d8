// read_json_number (Note [Decimal to double in one pass]): every token reads
// as nlohmann's lexer reads it (std::from_chars for floats and integers),
// whichever path converted it.
#include "serving/json_number.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

namespace grove::serving {
namespace {

// What the reader before read_json_number made of a whole token.
std::optional<JsonNumber> reference(const std::string& token) {
  const char* begin = token.data();
  const char* end = begin + token.size();
  const bool integer = token.find_first_of(".eE") == std::string::npos;
  JsonNumber number;
  if (integer && token[0] == '-') {
    number.kind = JsonNumber::Kind::kInteger;
    if (std::from_chars(begin, end, number.integer).ec == std::errc()) return number;
  } else if (integer) {
    number.kind = JsonNumber::Kind::kUnsigned;
    if (std::from_chars(begin, end, number.unsigned_integer).ec == std::errc()) return number;
  }
  number.kind = JsonNumber::Kind::kFloat;
  auto [last, error] = std::from_chars(begin, end, number.floating);
  if (error != std::errc() || last != end || !std::isfinite(number.floating)) return std::nullopt;
  return number;
}

void expect_reads_as_reference(const std::string& token) {
  const std::string text = token + ",";  // the token ends where the number does
  JsonNumber number;
  const char* after = read_json_number(text.data(), text.data() + text.size(), &number);
  const std::optional<JsonNumber> expected = reference(token);
  ASSERT_EQ(after != nullptr, expected.has_value()) << token;
  if (!expected) return;
  EXPECT_EQ(after, text.data() + token.size()) << token;
  ASSERT_EQ(number.kind, expected->kind) << token;
  uint64_t bits = 0, expected_bits = 0;
  std::memcpy(&bits, &number.floating, 8);  // the union's 8 bytes, whatever the kind
  std::memcpy(&expected_bits, &expected->floating, 8);
  EXPECT_EQ(bits, expected_bits) << token << " read as " << number.floating << ", expected "
                                 << expected->floating;
}

TEST(JsonNumber, FloatsWidenedToDoublesReadBitExact) {
  // What serve_http's clients and numpy's tolist() send: float32 values as
  // the shortest text of the double they widen to (16-17 digits).
  const uint64_t seed = 35;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::uniform_int_distribution<int> scale(-30, 30);
  for (int i = 0; i < 200000; ++i) {
    const double value = static_cast<double>(uniform(rng)) * std::pow(10.0, scale(rng) % 8);
    char text[40];
    auto [end, error] = std::to_chars(text, text + sizeof(text), value);
    ASSERT_EQ(error, std::errc());
    expect_reads_as_reference(std::string(text, end));
    if (HasFatalFailure()) FAIL() << "seed " << seed;
  }
}

TEST(JsonNumber, RandomDigitStringsReadAsFromChars) {
  const uint64_t seed = 36;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> digit(0, 9), length(1, 26), small(0, 3), exponent(-350, 350);
  for (int i = 0; i < 200000; ++i) {
    std::string token = small(rng) == 0 ? "-" : "";
    const int integer_digits = length(rng);
    if (small(rng) == 0) {
      token += "0";
    } else {
      token += static_cast<char>('1' + digit(rng) % 9);
      for (int d = 1; d < integer_digits; ++d) token += static_cast<char>('0' + digit(rng));
    }
    if (small(rng) != 0) {
      token += ".";
      const int fraction_digits = length(rng);
      const bool zeros_first = small(rng) == 0;
      for (int d = 0; d < fraction_digits; ++d) {
        token += zeros_first && d < 5 ? '0' : static_cast<char>('0' + digit(rng));
      }
    }
    if (small(rng) == 0) {
      token += small(rng) == 0 ? "E" : "e";
      const int e = small(rng) == 0 ? exponent(rng) : exponent(rng) % 30;
      if (e >= 0 && small(rng) == 0) token += "+";
      token += std::to_string(e);
    }
    expect_reads_as_reference(token);
    if (HasFatalFailure()) FAIL() << "seed " << seed;
  }
}

TEST(JsonNumber, EdgeCasesReadAsFromChars) {
  for (const char* token : {"0",
                            "-0",
                            "0.0",
                            "-0.0",
                            "0e0",
                            "-0e-5",
                            "1",
                            "-1",
                            "9007199254740992",
                            "9007199254740993",
                            "18446744073709551615",
                            "18446744073709551616",
                            "-9223372036854775808",
                            "-9223372036854775809",
                            "1e22",
                            "1e23",
                            "1e27",
                            "1e28",
                            "1e-22",
                            "1e-23",
                            "1e-27",
                            "1e-28",
                            "0.1",
                            "0.2",
                            "0.3",
                            "2.2250738585072014e-308",
                            "4.9e-324",
                            "1e-400",
                            "1.7976931348623157e308",
                            "1e309",
                            "1e400",
                            "123456789012345678901234567890",
                            "0.000000000000000000000000000001",
                            "9.999999999999999e22",
                            "0.10000000149011612",
                            "-0.7636574506759644",
                            "1.00000000000000011102230246251565404236316680908203125",
                            "1.00000000000000011102230246251565404236316680908203124",
                            "1.00000000000000011102230246251565404236316680908203126",
                            "7.0e-10",
                            "1e0000000000000001"}) {
    expect_reads_as_reference(token);
  }
}

TEST(JsonNumber, NonNumbersAreRefused) {
  for (const char* text : {"", "-", "+1", ".5", "1.", "1e", "1e+", "01x", "-a", "e5", "1.e5"}) {
    JsonNumber number;
    const char* end = text + std::strlen(text);
    const char* after = read_json_number(text, end, &number);
    // "01x" reads "0" and stops before "1": the caller then finds no separator.
    if (std::string(text) == "01x") {
      EXPECT_EQ(after, text + 1);
      continue;
    }
    EXPECT_EQ(after, nullptr) << text;
  }
}

}  // namespace
}  // namespace grove::serving
