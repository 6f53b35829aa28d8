// read_json_number (Note [Decimal to double in one pass]): every token reads
// as nlohmann's lexer reads it (std::from_chars for floats and integers),
// whichever path converted it. write_json_float (Note [Floats in nine
// digits]): every finite float reads back as itself.
#include "serving/json_number.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

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

// A random JSON number token: any length of digits, a fraction, an exponent.
std::string random_token(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> digit(0, 9), length(1, 26), small(0, 3), exponent(-350, 350);
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
  return token;
}

TEST(JsonNumber, RandomDigitStringsReadAsFromChars) {
  const uint64_t seed = 36;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 200000; ++i) {
    expect_reads_as_reference(random_token(rng));
    if (HasFatalFailure()) FAIL() << "seed " << seed;
  }
}

uint32_t float_bits(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, 4);
  return bits;
}

// Read with JsonPrecision::kFloat, a float token gives the float that the
// nearest double (std::from_chars) rounds to; an integer token reads exactly
// (Note [Decimal to float without the nearest double]).
void expect_float_precision_as_reference(const std::string& token) {
  const std::string text = token + ",";
  JsonNumber number;
  const char* after =
      read_json_number(text.data(), text.data() + text.size(), &number, JsonPrecision::kFloat);
  const std::optional<JsonNumber> expected = reference(token);
  ASSERT_EQ(after != nullptr, expected.has_value()) << token;
  if (!expected) return;
  EXPECT_EQ(after, text.data() + token.size()) << token;
  ASSERT_EQ(number.kind, expected->kind) << token;
  if (number.kind != JsonNumber::Kind::kFloat) {
    EXPECT_EQ(number.unsigned_integer, expected->unsigned_integer) << token;
    return;
  }
  const auto got = static_cast<float>(number.floating);
  const auto want = static_cast<float>(expected->floating);
  EXPECT_EQ(float_bits(got), float_bits(want))
      << token << " read as " << got << ", expected " << want << " (the nearest double "
      << expected->floating << " narrowed)";
}

TEST(JsonNumber, FloatPrecisionRoundsAsTheNearestDouble) {
  const uint64_t seed = 37;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::uniform_int_distribution<int> scale(-40, 40);
  for (int i = 0; i < 200000; ++i) {
    // Floats widened to doubles (what clients send), then any digit string.
    const double value = static_cast<double>(uniform(rng)) * std::pow(10.0, scale(rng));
    char text[40];
    auto [end, error] = std::to_chars(text, text + sizeof(text), value);
    ASSERT_EQ(error, std::errc());
    expect_float_precision_as_reference(std::string(text, end));
    expect_float_precision_as_reference(random_token(rng));
    if (HasFatalFailure()) FAIL() << "seed " << seed;
  }
}

TEST(JsonNumber, FloatMidpointsTakeTheExactPath) {
  // Doubles at, and a few units from, the midpoint between two neighbouring
  // floats, where an approximation's rounding could differ from the nearest
  // double's: each printed so that it reads back as that double.
  const uint64_t seed = 38;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> bits(0x00800000u, 0x7F7FFFFEu);  // normal floats
  for (int i = 0; i < 100000; ++i) {
    float low = 0;
    const uint32_t pattern = bits(rng);
    std::memcpy(&low, &pattern, 4);
    const float high = std::nextafter(low, INFINITY);
    const double midpoint = (static_cast<double>(low) + static_cast<double>(high)) / 2;
    for (int step : {0, 1, -1, 2, -2, 3, -3, 70, -70}) {
      double value = midpoint;
      for (int k = 0; k < std::abs(step); ++k) value = std::nextafter(value, step > 0 ? 1e300 : 0);
      char text[40];
      auto [end, error] = std::to_chars(text, text + sizeof(text), value);
      ASSERT_EQ(error, std::errc());
      expect_float_precision_as_reference(std::string(text, end));
      // And as 17 significant digits with an exponent, another path through the digits.
      const int length = std::snprintf(text, sizeof(text), "%.16e", value);
      expect_float_precision_as_reference(std::string(text, static_cast<size_t>(length)));
    }
    if (HasFatalFailure()) FAIL() << "seed " << seed;
  }
}

// read_json_float_list stores what read_json_number (kFloat) reads of each
// token, narrowed as the request reader narrows it, and stops before
// anything else.
TEST(JsonNumber, FloatListReadsEachTokenAsReadJsonNumber) {
  const uint64_t seed = 39;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> count(0, 40), small(0, 5);
  const char* const spaces[] = {"", " ", "\n", "\t ", "\r\n  "};
  const char* const enders[] = {"]",  ",[1]",   ", \"x\"", ",", " , ]",
                                ",-", ",1e999", ",01",     "}", ""};
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    std::vector<std::string> tokens;
    const int n = count(rng);
    for (int k = 0; k < n; ++k) {
      if (k > 0) {
        text += spaces[small(rng) % 5];
        text += ",";
        text += spaces[small(rng) % 5];
      }
      tokens.push_back(small(rng) == 0 ? std::to_string(static_cast<int64_t>(rng()))
                                       : random_token(rng));
      text += tokens.back();
    }
    text += enders[small(rng) % 10];
    if (small(rng) == 0) text += " 1";
    // The tokens read one by one: each number, then on past a comma.
    std::vector<float> expected;
    size_t expected_end = 0;
    {
      const char* p = text.data();
      const char* const end = text.data() + text.size();
      auto skip_spaces = [&] {
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
      };
      while (true) {
        JsonNumber number;
        const char* after = read_json_number(p, end, &number, JsonPrecision::kFloat);
        if (after == nullptr) break;
        switch (number.kind) {
          case JsonNumber::Kind::kFloat:
            expected.push_back(static_cast<float>(number.floating));
            break;
          case JsonNumber::Kind::kInteger:
            expected.push_back(static_cast<float>(static_cast<double>(number.integer)));
            break;
          case JsonNumber::Kind::kUnsigned:
            expected.push_back(static_cast<float>(static_cast<double>(number.unsigned_integer)));
            break;
        }
        expected_end = static_cast<size_t>(after - text.data());
        p = after;
        skip_spaces();
        if (p == end || *p != ',') break;
        ++p;
        skip_spaces();
      }
      // Every generated token is read unless one of them is not a finite number.
      if (expected.size() < tokens.size()) {
        bool refused = false;
        for (const std::string& token : tokens) refused |= !reference(token).has_value();
        EXPECT_TRUE(refused) << text;
      }
    }
    for (size_t max_count : {size_t{1000}, expected.size() / 2}) {
      std::vector<unsigned char> out(1000 * 4 + 4, 0xAB);
      size_t read = 0;
      const char* after = read_json_float_list(text.data(), text.data() + text.size(), out.data(),
                                               max_count, &read);
      const size_t want = std::min(max_count, expected.size());
      ASSERT_EQ(read, want) << text;
      for (size_t k = 0; k < read; ++k) {
        float value = 0;
        std::memcpy(&value, out.data() + 4 * k, 4);
        ASSERT_EQ(float_bits(value), float_bits(expected[k])) << text << " element " << k;
      }
      EXPECT_EQ(out[4 * read], 0xAB) << "written past the values read: " << text;
      if (read == expected.size()) {
        EXPECT_EQ(static_cast<size_t>(after - text.data()), read == 0 ? 0 : expected_end) << text;
      }
    }
    if (HasFatalFailure()) FAIL() << "seed " << seed;
  }
}

// The float read_json_number (kFloat) makes of one whole token, narrowed as
// the request reader narrows it; nullopt where it refuses the token.
std::optional<float> token_as_float(const std::string& token) {
  JsonNumber number;
  const char* end = token.data() + token.size();
  if (read_json_number(token.data(), end, &number, JsonPrecision::kFloat) != end) {
    return std::nullopt;
  }
  switch (number.kind) {
    case JsonNumber::Kind::kFloat:
      return static_cast<float>(number.floating);
    case JsonNumber::Kind::kInteger:
      return static_cast<float>(static_cast<double>(number.integer));
    case JsonNumber::Kind::kUnsigned:
      return static_cast<float>(static_cast<double>(number.unsigned_integer));
  }
  return std::nullopt;
}

// Lists of what clients send (a float printed shortest, or widened to a
// double and printed shortest, with one digit before the point), and of
// tokens of that shape next to a float's rounding midpoint, read as
// read_json_number reads each token alone.
TEST(JsonNumber, FloatListReadsClientFloatsAsReadJsonNumber) {
  const uint64_t seed = 40;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::uniform_int_distribution<int> kind(0, 4), scale(-6, 1);
  std::uniform_int_distribution<uint32_t> in_one_to_ten(0x3F800000u, 0x411FFFFFu);  // [1, 10)
  for (int i = 0; i < 4000; ++i) {
    std::vector<std::string> tokens;
    for (int k = 0; k < 64; ++k) {
      char text[48];
      const int what = kind(rng);
      if (what <= 1) {  // a float near [-1, 1], shortest as a float or as a widened double
        const float value = uniform(rng) * std::pow(10.f, static_cast<float>(scale(rng) % 2));
        auto [end, error] =
            what == 0 ? std::to_chars(text, text + sizeof(text), value)
                      : std::to_chars(text, text + sizeof(text), static_cast<double>(value));
        ASSERT_EQ(error, std::errc());
        tokens.emplace_back(text, end);
      } else if (what == 2) {  // a small float, 0.0000ddd
        const double value = static_cast<double>(uniform(rng)) * std::pow(10.0, scale(rng));
        tokens.emplace_back(text,
                            static_cast<size_t>(std::snprintf(text, sizeof(text), "%.17f", value)));
      } else {  // d.ddd at, or a few units from, a float midpoint in [1, 10)
        float low = 0;
        const uint32_t pattern = in_one_to_ten(rng);
        std::memcpy(&low, &pattern, 4);
        double value =
            (static_cast<double>(low) + static_cast<double>(std::nextafter(low, INFINITY))) / 2;
        for (int step = kind(rng) - 2; step != 0; step += step > 0 ? -1 : 1) {
          value = std::nextafter(value, step > 0 ? 1e300 : 0);
        }
        const int fraction = what == 3 ? 16 : 8 + kind(rng);
        tokens.emplace_back(
            text, static_cast<size_t>(std::snprintf(text, sizeof(text), "%.*f", fraction, value)));
      }
    }
    std::string text;
    for (const std::string& token : tokens) text += (text.empty() ? "" : ",") + token;
    text += "]";
    std::vector<unsigned char> out(tokens.size() * 4, 0);
    size_t read = 0;
    const char* after = read_json_float_list(text.data(), text.data() + text.size(), out.data(),
                                             tokens.size(), &read);
    ASSERT_EQ(read, tokens.size()) << text;
    EXPECT_EQ(*after, ']') << text;
    for (size_t k = 0; k < read; ++k) {
      const std::optional<float> expected = token_as_float(tokens[k]);
      ASSERT_TRUE(expected.has_value()) << tokens[k];
      float value = 0;
      std::memcpy(&value, out.data() + 4 * k, 4);
      ASSERT_EQ(float_bits(value), float_bits(*expected)) << tokens[k];
    }
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

// The text write_json_float gives `value`, checked: a whole JSON number
// (read_json_number takes all of it), at most nine significant digits, and
// `value` again read as a float and read as a double rounded to a float.
void expect_float_reads_back(float value) {
  char text[kJsonFloatChars + 8];
  char* end = write_json_float(text, value);
  const std::string token(text, end);
  ASSERT_LE(token.size(), kJsonFloatChars) << token;
  JsonNumber number;
  ASSERT_EQ(read_json_number(text, end, &number), end) << token << " is not one JSON number";
  const std::string mantissa = token.substr(0, token.find('e'));
  const size_t first = mantissa.find_first_of("123456789");
  size_t significant = 0;
  for (size_t i = first; first != std::string::npos && i < mantissa.size(); ++i) {
    significant += std::isdigit(static_cast<unsigned char>(mantissa[i])) ? 1 : 0;
  }
  // Trailing zeros of an integer ("12000") are not significant digits written.
  EXPECT_LE(significant, token.find_first_of(".e") == std::string::npos ? 39u : 9u) << token;
  float as_float = 0;
  auto [float_end, float_error] = std::from_chars(text, end, as_float);
  ASSERT_EQ(float_error, std::errc()) << token;
  EXPECT_EQ(float_end, end) << token;
  double as_double = 0;
  std::from_chars(text, end, as_double);
  uint32_t bits = 0, float_bits = 0, double_bits = 0;
  const float narrowed = static_cast<float>(as_double);
  std::memcpy(&bits, &value, 4);
  std::memcpy(&float_bits, &as_float, 4);
  std::memcpy(&double_bits, &narrowed, 4);
  EXPECT_EQ(float_bits, bits) << token << " read as a float";
  EXPECT_EQ(double_bits, bits) << token << " read as a double";
}

TEST(JsonFloat, RandomBitPatternsReadBackExactly) {
  std::mt19937 random(35);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t bits = random();
    float value = 0;
    std::memcpy(&value, &bits, 4);
    if (!std::isfinite(value)) continue;
    expect_float_reads_back(value);
    if (HasFailure()) return;
  }
}

TEST(JsonFloat, EveryBinadeSubnormalsAndExtremesReadBackExactly) {
  std::mt19937 random(36);
  for (uint32_t exponent = 0; exponent < 255; ++exponent) {
    for (uint32_t mantissa :
         {0u, 1u, 0x7FFFFFu, 0x400000u, 0x3FFFFFu, static_cast<uint32_t>(random() & 0x7FFFFFu)}) {
      for (uint32_t sign : {0u, 1u}) {
        const uint32_t bits = sign << 31 | exponent << 23 | mantissa;
        float value = 0;
        std::memcpy(&value, &bits, 4);
        expect_float_reads_back(value);
      }
    }
  }
  for (float value : {0.0f,
                      -0.0f,
                      1.0f,
                      -1.0f,
                      0.1f,
                      0.5f,
                      1e-5f,
                      1e-6f,
                      1e8f,
                      1e9f,
                      1e10f,
                      123456789.0f,
                      999999999.0f,
                      9.9999999e-5f,
                      std::numeric_limits<float>::max(),
                      std::numeric_limits<float>::lowest(),
                      std::numeric_limits<float>::min(),
                      std::numeric_limits<float>::denorm_min(),
                      std::nextafter(1.0f, 0.0f),
                      std::nextafter(1.0f, 2.0f)}) {
    expect_float_reads_back(value);
  }
}

TEST(JsonFloat, CommonValuesReadAsWrittenByHand) {
  auto text = [](float value) {
    char buffer[kJsonFloatChars];
    return std::string(buffer, write_json_float(buffer, value));
  };
  EXPECT_EQ(text(0.0f), "0");
  EXPECT_EQ(text(-0.0f), "-0");
  EXPECT_EQ(text(1.0f), "1");
  EXPECT_EQ(text(0.5f), "0.5");
  EXPECT_EQ(text(-2.25f), "-2.25");
  EXPECT_EQ(text(12000.0f), "12000");
  EXPECT_EQ(text(0x1p-20f), "9.53674316e-7");  // 9.5367431640625e-7
  EXPECT_EQ(text(0.1f), "0.100000001");        // nine digits, not the shortest "0.1"
  EXPECT_EQ(text(0x1p70f), "1.18059162e21");   // 1180591620717411303424
  EXPECT_EQ(text(-0x1p-12f), "-0.000244140625");
}

}  // namespace
}  // namespace grove::serving
