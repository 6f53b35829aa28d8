// read_json_number: one JSON number token read as nlohmann's lexer reads it
// (an integer token as a signed or unsigned 64-bit integer when it fits,
// anything else as the double nearest its decimal value), in one pass over
// its characters: the scan that finds the token's end also gathers its
// digits, and most floats are converted without a second look at the text
// (Note [Decimal to double in one pass]). The fast request reader
// (serving/kserve_request_reader.h) reads every data number through it.
// write_json_float is the answer's side: a float as a JSON number that reads
// back as the same float (Note [Floats in nine digits]).
#pragma once

#include <cstddef>
#include <cstdint>

namespace grove::serving {

struct JsonNumber {
  enum class Kind : uint8_t { kInteger, kUnsigned, kFloat };
  Kind kind = Kind::kFloat;
  union {
    int64_t integer;
    uint64_t unsigned_integer;
    double floating;
  };
  JsonNumber() : unsigned_integer(0) {}
};

// Reads the number token at `begin` (JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?,
// nothing else) and returns the first character after it, or nullptr when
// `begin` holds no such token or its value is not a finite double.
const char* read_json_number(const char* begin, const char* end, JsonNumber* number);

// The most characters write_json_float writes ("-1.23456789e-38").
inline constexpr size_t kJsonFloatChars = 16;

// Writes finite `value` at `out` (room for kJsonFloatChars) as a JSON number
// of at most nine significant digits, trailing zeros dropped, that reads back
// as `value` exactly, whether read as a float or read as a double and then
// rounded to a float (Note [Floats in nine digits]); returns the end.
char* write_json_float(char* out, float value);

}  // namespace grove::serving
