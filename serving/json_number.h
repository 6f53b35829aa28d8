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

// How exactly a float token must be read: as the double nearest its decimal
// value, or as any double that rounds to the same float as that nearest
// double does (a reader that stores the number as a float; Note [Decimal to
// float without the nearest double]).
enum class JsonPrecision : uint8_t { kDouble, kFloat };

// Reads the number token at `begin` (JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?,
// nothing else) and returns the first character after it, or nullptr when
// `begin` holds no such token or its value is not a finite double. Integers
// are read exactly either way.
const char* read_json_number(const char* begin, const char* end, JsonNumber* number,
                             JsonPrecision precision = JsonPrecision::kDouble);

// Reads the longest run of JSON number tokens, each after the first behind a
// comma (JSON whitespace around it allowed), at most `max_count` of them, as
// f32 values into `out` (little-endian bytes, room for max_count floats), as
// read_json_number with JsonPrecision::kFloat reads each and narrowed to a
// float through a double (an integer as int64 or uint64 first). Stops before
// anything else (a nested array, a closing bracket, a token
// read_json_number refuses) and returns the end of the last token stored
// (`begin` if none), with their number in `*count`. The request reader's
// loop for FP32 rows: one call per array instead of one per number.
const char* read_json_float_list(const char* begin, const char* end, unsigned char* out,
                                 size_t max_count, size_t* count);

// The most characters write_json_float writes ("-1.23456789e-38").
inline constexpr size_t kJsonFloatChars = 16;

// Writes finite `value` at `out` (room for kJsonFloatChars) as a JSON number
// of at most nine significant digits, trailing zeros dropped, that reads back
// as `value` exactly, whether read as a float or read as a double and then
// rounded to a float (Note [Floats in nine digits]); returns the end.
char* write_json_float(char* out, float value);

// Writes the `count` f32 values at `data` (little-endian bytes, any
// alignment) as the elements of a JSON array, "v,v,...,v" without brackets:
// each finite one as write_json_float writes it, a NaN or an infinity
// (which JSON cannot hold) as null. `out` has room for count *
// (kJsonFloatChars + 1) characters; returns the end. One call per array, so
// that the digits of one value are worked out while the last is stored.
char* write_json_float_list(char* out, const unsigned char* data, size_t count);

}  // namespace grove::serving
