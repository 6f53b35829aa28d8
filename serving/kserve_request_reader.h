// How grove reads the JSON of a KServe v2 inference request
// (serving/kserve_protocol.h): a tree of everything but the inputs' "data"
// arrays, whose elements are kept beside it as flat values, without a JSON
// node, or a field name, per element. parse_infer_request() checks both.
//
//   RequestDocument document = read_request_document(body);
//   document.json["inputs"][0]["data"];  // [] (an array, emptied)
//   document.data[0].values;             // its 512 numbers, row-major
//
// Note [Reading request data]
// A 512-float row is most of a request, and reading it into nlohmann::json
// nodes cost more CPU than the rest of the HTTP path (serve_http on sim, a
// model that costs nothing: 69% of the process's CPU in parse_infer_request,
// half of it naming a field per element). Two readers give the same result:
//  * the reference reader, nlohmann's SAX parser over the whole text: the
//    tree as nlohmann::json::parse builds it (the last of duplicate keys
//    wins), "data" arrays under root.inputs[i] kept as flat values (nested
//    arrays flattened, row-major), and any error thrown as
//    parse_infer_request always did ("not valid JSON: ...", "nests deeper");
//  * the fast reader, for the common body: a scan that finds each
//    root.inputs[i].data array of plain JSON numbers (nested arrays too),
//    converts them with std::from_chars exactly as nlohmann's lexer would
//    (an integer token as a signed or unsigned 64-bit integer when it fits,
//    else as a double; -0 is the integer 0), then runs the reference reader
//    on the text with those arrays replaced by [] and puts the values back.
//    Replacing a valid JSON value by another keeps the text valid or invalid
//    alike, so it only has to find the arrays right in valid JSON: it gives up
//    on anything it does not fully check (a key with an escape, a duplicate
//    "inputs" or "data", a string or literal among the numbers, a number
//    from_chars will not take, nesting past kMaxRequestDepth), and on any
//    error the reference reader reads the original text, so every refusal
//    keeps its message. Tests: KserveRequestReader.* (both readers agree on
//    random and mutated bodies).
//
// Note [Request memory bounded by the model]
// A value costs 16 bytes as a DataValue and a JSON node 16 or more, while it
// may take 2 bytes of the body ("0,"): a 16 MiB body of zeros once cost 164 MB
// (issue 35). So both readers keep at most `max_values` data values (the most
// a valid request holds: max batch rows of every input) and only count the
// rest, which parse_infer_request() then refuses with the same message as
// before ("N values for shape ..."), and refuse a body of more than
// kMaxRequestNodes JSON values besides the data. A request's memory is then
// its body, the fast reader's copy of the text besides the data, and at most
// 16 bytes per value the model can take. Where every input of the model has
// one numeric datatype (data_as: FP32, FP64, FP16, BF16, INT32 or INT64), the
// fast reader writes each number straight into the row bytes as the element
// store_values() would make of it (moved into the request's HostRows, no
// copy), and gives up on a value store_values() would refuse, so the
// reference reader names it: a valid request then costs its body and its
// rows. FP32 rows are read a run of numbers at a time (read_json_float_list),
// each rounded to the float its nearest double rounds to without always
// finding that double (Note [Decimal to float without the nearest double]),
// which halved the read of a 512-float request. Tests:
// KserveRequestReader.KeepsAtMostMaxValuesAndCountsTheRest,
// KserveRequestReader.RowsAreTheElementsOfTheReferenceValues,
// KserveProtocol.LargeFloatBodyCostsItsRowsNotAValuePerElement,
// KserveProtocol.LargeIntegerBodyCostsItsRowsNotAValuePerElement,
// test_memory_per_request_is_bounded_near_the_body (tests/serving/http_abuse_test.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/tensor.h"
#include "serving/request_bytes.h"

namespace grove::serving {

// One element of an input's "data" as the JSON held it: the kind is the one
// nlohmann gives the number (unsigned for a non-negative integer token).
struct DataValue {
  enum class Kind : uint8_t { kInteger, kUnsigned, kFloat, kBool, kOther };
  Kind kind = Kind::kOther;
  union {
    int64_t integer;
    uint64_t unsigned_integer;
    double floating;
    bool boolean;
    size_t other;  // kOther: index into InputData::others
  };
};

// The elements of one inputs[i].data array.
struct InputData {
  bool read = false;                   // "data" is an array and its elements are here
  size_t count = 0;                    // its elements
  std::vector<DataValue> values;       // flat, row-major: the first ones, within max_values
  bool as_rows = false;                // the fast reader wrote them to row_bytes instead
  RowBytes row_bytes;                  // as the rows hold them (data_as), within max_values
  std::vector<nlohmann::json> others;  // the strings, nulls and objects among them

  // The element as a JSON value (for messages).
  nlohmann::json value_json(const DataValue& value) const;
};

struct RequestDocument {
  nlohmann::json json;          // the body, every root.inputs[i].data array emptied
  std::vector<InputData> data;  // per entry of root.inputs
};

// Note [Requests in the common layout]
// Most requests name each field once, in plain ASCII strings: a root object
// of "inputs" (objects of "name", "datatype", "shape" of plain integers, and
// "data" or "parameters": {"binary_data_size": N}), and perhaps "id",
// "outputs" ([{"name", "parameters": {"binary_data": B}}]) and "parameters":
// {"binary_data_output": B}, in any order, any whitespace. For such a body
// the fast reader's scan, which walks every field anyway, keeps the fields
// too, and parse_infer_request builds the request from them with the same
// checks, no JSON tree in between (the tree cost more than the binary tensor
// data's whole request on sim). A body with anything else (another key, a
// key twice, an escape or non-ASCII byte in a string, a number where a
// string belongs...) is read through the tree as before, and so is any body
// whose fields a check refuses, so every refusal keeps its message. Tests:
// KserveProtocol.CommonLayoutReadsAsTheTree (random and mutated bodies give
// the same request or the same refusal both ways).
struct CommonTensor {
  std::optional<std::string> name, datatype;
  std::optional<runtime::Shape> shape;
  std::optional<uint64_t> binary_data_size;
  bool has_data = false;
  InputData data;
};
struct CommonOutput {
  std::string name;
  std::optional<bool> binary_data;
};
struct CommonRequest {
  std::optional<std::string> id;
  std::vector<CommonTensor> inputs;
  std::optional<std::vector<CommonOutput>> outputs;
  std::optional<bool> binary_data_output;
};

// The body's fields, for a body in the common layout; nullopt for any other.
std::optional<CommonRequest> read_common_request(
    std::string_view text, size_t max_values = SIZE_MAX,
    std::optional<runtime::DType> data_as = std::nullopt);

// The body's fields in the common layout, or else its document as
// read_request_document() reads it, from one scan of the text.
std::variant<CommonRequest, RequestDocument> read_request(
    std::string_view text, size_t max_values = SIZE_MAX,
    std::optional<runtime::DType> data_as = std::nullopt);

// The most JSON values a request may hold besides its inputs' data numbers
// (Note [Request memory bounded by the model]).
inline constexpr size_t kMaxRequestNodes = size_t{1} << 16;

// Note [Reading request data]. Throws ProtocolError (kserve_protocol.h) for
// text that is not JSON, nests deeper than kMaxRequestDepth or holds more
// than kMaxRequestNodes values besides the data. Keeps at most `max_values`
// data values over all inputs (Note [Request memory bounded by the model]).
RequestDocument read_request_document(std::string_view text, size_t max_values = SIZE_MAX,
                                      std::optional<runtime::DType> data_as = std::nullopt);
// Each reader alone (tests compare them): the fast one's nullopt means it
// gave up on `text`, which read_request_document() then reads with the other.
// `data_as`: numbers as row bytes of that dtype (Note [Request memory bounded by the model]).
std::optional<RequestDocument> read_request_document_fast(
    std::string_view text, size_t max_values = SIZE_MAX,
    std::optional<runtime::DType> data_as = std::nullopt);
RequestDocument read_request_document_reference(std::string_view text,
                                                size_t max_values = SIZE_MAX);

}  // namespace grove::serving
