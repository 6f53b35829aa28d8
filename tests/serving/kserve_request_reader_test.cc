// The two readers of a KServe v2 request's JSON (Note [Reading request
// data]): the fast one reads the common body, gives up on what it does not
// fully check, and wherever it answers, it answers as the reference reader
// (nlohmann's SAX parser) does; parse_infer_request refuses malformed numbers
// and counts with a message naming the field, whichever reader read them.
#include "serving/kserve_request_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <regex>

#include "serving/kserve_protocol.h"

namespace grove::serving {
namespace {

using nlohmann::json;
using runtime::DType;

// The document or the error's message, for comparing readers.
struct Outcome {
  std::optional<RequestDocument> document;
  std::string error;
};

template <typename Read>
Outcome outcome_of(Read read) {
  Outcome outcome;
  try {
    outcome.document = read();
  } catch (const ProtocolError& error) {
    outcome.error = error.what();
  }
  return outcome;
}

// Same tree and the same data values, kind and bits.
void expect_same(const RequestDocument& a, const RequestDocument& b, const std::string& text) {
  EXPECT_EQ(a.json, b.json) << text;
  ASSERT_EQ(a.data.size(), b.data.size()) << text;
  for (size_t i = 0; i < a.data.size(); ++i) {
    EXPECT_EQ(a.data[i].read, b.data[i].read) << text;
    EXPECT_EQ(a.data[i].count, b.data[i].count) << "inputs[" << i << "] " << text;
    ASSERT_EQ(a.data[i].values.size(), b.data[i].values.size()) << "inputs[" << i << "] " << text;
    for (size_t e = 0; e < a.data[i].values.size(); ++e) {
      const DataValue& x = a.data[i].values[e];
      const DataValue& y = b.data[i].values[e];
      ASSERT_EQ(x.kind, y.kind) << "inputs[" << i << "].data[" << e << "] " << text;
      EXPECT_EQ(a.data[i].value_json(x), b.data[i].value_json(y))
          << "inputs[" << i << "].data[" << e << "] " << text;
      if (x.kind == DataValue::Kind::kFloat) {  // -0.0 == 0.0: compare the bits
        EXPECT_EQ(std::signbit(x.floating), std::signbit(y.floating)) << text;
      }
    }
  }
}

// A number as a client might write it: shortest, %.17g, with an exponent,
// as an integer, or an integer past 64 bits.
std::string random_number(std::mt19937& random) {
  std::uniform_real_distribution<double> uniform(-3, 3);
  char text[64];
  switch (random() % 7) {
    case 0:
      return json(static_cast<float>(uniform(random))).dump();
    case 1:
      std::snprintf(text, sizeof(text), "%.17g", uniform(random));
      return text;
    case 2:
      std::snprintf(text, sizeof(text), "%.6e", uniform(random) * 1e30);
      return text;
    case 3:
      return std::to_string(static_cast<int64_t>(random() % 2000) - 1000);
    case 4:
      return random() % 2 ? "-0" : "-0.0";
    case 5:
      return random() % 2 ? "18446744073709551616" : "-9223372036854775809";
    default:
      std::snprintf(text, sizeof(text), "%.4fE%+d", uniform(random),
                    static_cast<int>(random() % 40) - 20);
      return text;
  }
}

std::string random_space(std::mt19937& random) {
  static const char* kSpaces[] = {"", "", " ", "\n  ", "\t"};
  return kSpaces[random() % 5];
}

// A request with 1 or 2 inputs, data flat or nested, keys in random order.
std::string random_body(std::mt19937& random) {
  const int inputs = 1 + static_cast<int>(random() % 2);
  std::string body = "{" + random_space(random) + "\"inputs\":" + random_space(random) + "[";
  for (int i = 0; i < inputs; ++i) {
    if (i > 0) body += "," + random_space(random);
    std::string data = "[";
    const int rows = 1 + static_cast<int>(random() % 3);
    const bool nested = random() % 2;
    for (int r = 0; r < rows; ++r) {
      if (nested) data += r > 0 ? ",[" : "[";
      for (int e = 0; e < 4; ++e) {
        if (e > 0 || (!nested && r > 0)) data += "," + random_space(random);
        data += random_number(random);
      }
      if (nested) data += random_space(random) + "]";
    }
    data += "]";
    std::vector<std::string> members = {
        "\"name\": \"x" + std::to_string(i) + "\"",
        "\"shape\": [" + std::to_string(rows) + ", 4]",
        "\"datatype\": \"FP32\"",
        "\"data\":" + random_space(random) + data,
    };
    std::shuffle(members.begin(), members.end(), random);
    body += "{";
    for (size_t m = 0; m < members.size(); ++m) body += (m ? ", " : "") + members[m];
    body += "}";
  }
  body += "]";
  if (random() % 2) body += ", \"id\": \"r\\u0031\"";
  return body + random_space(random) + "}";
}

TEST(KserveRequestReader, FastReaderTakesTheCommonBodyAsTheReferenceDoes) {
  const std::string body =
      R"({"id": "7", "inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32",
          "data": [[0.5, -1, 2e3], [-0, 18446744073709551616, 1E-2]]}],
          "outputs": [{"name": "y"}]})";
  std::optional<RequestDocument> fast = read_request_document_fast(body);
  ASSERT_TRUE(fast.has_value());
  expect_same(*fast, read_request_document_reference(body), body);
  const std::vector<DataValue>& values = fast->data[0].values;
  ASSERT_EQ(values.size(), 6u);
  EXPECT_EQ(values[0].kind, DataValue::Kind::kFloat);
  EXPECT_EQ(values[1].kind, DataValue::Kind::kInteger);
  EXPECT_EQ(values[2].kind, DataValue::Kind::kFloat);
  EXPECT_EQ(values[3].kind, DataValue::Kind::kInteger);  // -0 is the integer 0, as in nlohmann
  EXPECT_EQ(values[4].kind, DataValue::Kind::kFloat);    // past 64 bits: a double
  EXPECT_EQ(fast->json["inputs"][0]["data"], json::array());
  EXPECT_EQ(fast->json["outputs"][0]["name"], "y");
}

TEST(KserveRequestReader, FastReaderGivesUpOnWhatItDoesNotCheck) {
  for (const char* body : {
           R"({"inputs": [{"data": [1, "two"]}]})",         // a string among the numbers
           R"({"inputs": [{"data": [true]}]})",             // a literal
           R"({"inputs": [{"data": [01]}]})",               // not a JSON number
           R"({"inputs": [{"data": [1e400]}]})",            // overflows a double
           R"({"inputs": [{"data": [1], "data": [2]}]})",   // a duplicate "data"
           R"({"inputs": [], "inputs": [{"data": [2]}]})",  // a duplicate "inputs"
           R"({"inp\u0075ts": [{"data": [2]}]})",           // a key with an escape
           R"({"inputs": [{"data": [[[[[[[[[[[[[[1]]]]]]]]]]]]]]}]})",  // deep nesting
       }) {
    EXPECT_FALSE(read_request_document_fast(body).has_value()) << body;
  }
}

TEST(KserveRequestReader, ReadersAgreeOnRandomBodies) {
  const uint32_t seed = 2111;
  std::mt19937 random(seed);
  for (int trial = 0; trial < 500; ++trial) {
    const std::string body = random_body(random);
    SCOPED_TRACE(testing::Message() << "seed " << seed << " trial " << trial);
    std::optional<RequestDocument> document = read_request_document_fast(body);
    if (!document) {
      ADD_FAILURE() << "the fast reader gave up on " << body;
      continue;
    }
    expect_same(*document, read_request_document_reference(body), body);
  }
}

// Note [Request memory bounded by the model]: with data_as FP32 the fast
// reader writes the floats store_values() makes of the reference's values.
TEST(KserveRequestReader, F32RowsAreTheFloatsOfTheReferenceValues) {
  const uint32_t seed = 3535;
  std::mt19937 random(seed);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string body = random_body(random);
    SCOPED_TRACE(testing::Message() << "seed " << seed << " trial " << trial << " " << body);
    std::optional<RequestDocument> fast = read_request_document_fast(body, SIZE_MAX, DType::kF32);
    ASSERT_TRUE(fast.has_value());
    const RequestDocument reference = read_request_document_reference(body);
    EXPECT_EQ(fast->json, reference.json);
    ASSERT_EQ(fast->data.size(), reference.data.size());
    for (size_t i = 0; i < reference.data.size(); ++i) {
      if (!reference.data[i].read) continue;
      ASSERT_TRUE(fast->data[i].as_rows);
      EXPECT_EQ(fast->data[i].count, reference.data[i].count);
      RowBytes expected;
      for (const DataValue& value : reference.data[i].values) {
        double wide = value.floating;
        if (value.kind == DataValue::Kind::kInteger) wide = static_cast<double>(value.integer);
        if (value.kind == DataValue::Kind::kUnsigned) {
          wide = static_cast<double>(value.unsigned_integer);
        }
        const float narrow = static_cast<float>(wide);
        const auto* bytes = reinterpret_cast<const uint8_t*>(&narrow);
        expected.insert(expected.end(), bytes, bytes + 4);
      }
      EXPECT_EQ(fast->data[i].row_bytes, expected) << "inputs[" << i << "]";
    }
  }
}

// Note [Request memory bounded by the model]: with data_as another datatype
// the fast reader writes the elements store_values() makes of the reference's
// values, and gives up wherever store_values() would refuse one (a float or
// an out-of-range integer for INT32 and INT64), so that the reference reader
// names it.
TEST(KserveRequestReader, RowsAreTheElementsOfTheReferenceValues) {
  const uint32_t seed = 3536;
  std::mt19937 random(seed);
  for (DType dtype : {DType::kF64, DType::kF16, DType::kBF16, DType::kI32, DType::kI64}) {
    int read_as_rows = 0;
    for (int trial = 0; trial < 300; ++trial) {
      std::string body = random_body(random);
      if (trial % 2 == 0) {  // integers only, as an INT32 or INT64 client sends
        body = std::regex_replace(body, std::regex(R"(-?[0-9][0-9.eE+-]*\.[0-9eE+-]+)"), "7");
      }
      SCOPED_TRACE(testing::Message() << "seed " << seed << " trial " << trial << " "
                                      << runtime::dtype_name(dtype) << " " << body);
      const RequestDocument reference = read_request_document_reference(body);
      // What store_values() makes of each value, or nullopt where it refuses one.
      std::vector<std::optional<std::vector<uint8_t>>> expected;
      bool refused = false;
      for (const InputData& data : reference.data) {
        std::vector<uint8_t> bytes;
        for (const DataValue& value : data.values) {
          const bool is_signed = value.kind == DataValue::Kind::kInteger;
          const bool is_unsigned = value.kind == DataValue::Kind::kUnsigned;
          const double wide = is_signed     ? static_cast<double>(value.integer)
                              : is_unsigned ? static_cast<double>(value.unsigned_integer)
                                            : value.floating;
          const size_t at = bytes.size();
          bytes.resize(at + runtime::dtype_size(dtype));
          if (dtype == DType::kI32 || dtype == DType::kI64) {
            const int64_t low = dtype == DType::kI32 ? INT32_MIN : INT64_MIN;
            const uint64_t high = dtype == DType::kI32 ? INT32_MAX : INT64_MAX;
            if (!(is_signed && value.integer >= low && value.integer <= int64_t(high)) &&
                !(is_unsigned && value.unsigned_integer <= high)) {
              refused = true;
              break;
            }
            const int64_t exact = is_signed ? value.integer : int64_t(value.unsigned_integer);
            const int32_t narrow = static_cast<int32_t>(exact);
            std::memcpy(bytes.data() + at,
                        dtype == DType::kI32 ? static_cast<const void*>(&narrow)
                                             : static_cast<const void*>(&exact),
                        runtime::dtype_size(dtype));
          } else {
            runtime::store_element(bytes.data() + at, dtype, wide);
          }
        }
        expected.emplace_back(std::move(bytes));
      }
      std::optional<RequestDocument> fast = read_request_document_fast(body, SIZE_MAX, dtype);
      if (refused) {
        EXPECT_FALSE(fast.has_value()) << "kept a value store_values() refuses";
        continue;
      }
      ASSERT_TRUE(fast.has_value());
      ++read_as_rows;
      EXPECT_EQ(fast->json, reference.json);
      ASSERT_EQ(fast->data.size(), reference.data.size());
      for (size_t i = 0; i < reference.data.size(); ++i) {
        if (!reference.data[i].read) continue;
        ASSERT_TRUE(fast->data[i].as_rows);
        EXPECT_EQ(fast->data[i].count, reference.data[i].count);
        const RowBytes& read = fast->data[i].row_bytes;
        EXPECT_EQ(std::vector<uint8_t>(read.begin(), read.end()), *expected[i])
            << "inputs[" << i << "]";
      }
    }
    EXPECT_GT(read_as_rows, 20) << runtime::dtype_name(dtype);
  }
}

// Random edits of valid bodies: both readers refuse with the same message or
// read the same document.
TEST(KserveRequestReader, ReadersAgreeOnMutatedBodies) {
  const uint32_t seed = 99;
  std::mt19937 random(seed);
  const std::string alphabet = "0123456789[]{}\",:-+.eE truefalsnul\\";
  for (int trial = 0; trial < 4000; ++trial) {
    std::string body = random_body(random);
    for (int m = 0; m < 1 + static_cast<int>(random() % 3); ++m) {
      const size_t at = random() % body.size();
      if (random() % 2) {
        body[at] = alphabet[random() % alphabet.size()];
      } else {
        body.erase(at, 1 + random() % 4);
        if (body.empty()) body = "{";
      }
    }
    SCOPED_TRACE(testing::Message() << "seed " << seed << " trial " << trial << ": " << body);
    Outcome reference = outcome_of([&] { return read_request_document_reference(body); });
    Outcome combined = outcome_of([&] { return read_request_document(body); });
    EXPECT_EQ(combined.error, reference.error);
    if (reference.document && combined.document) {
      expect_same(*combined.document, *reference.document, body);
    }
    std::optional<RequestDocument> fast;
    ASSERT_NO_THROW(fast = read_request_document_fast(body));
    if (fast) {
      ASSERT_TRUE(reference.document.has_value()) << "the fast reader took a refused body";
      expect_same(*fast, *reference.document, body);
    }
  }
}

ModelSignature signature(DType dtype) {
  ModelSignature s;
  s.inputs.push_back({"x", {3}, dtype, 3 * runtime::dtype_size(dtype)});
  s.outputs.push_back({"y", {3}, dtype, 3 * runtime::dtype_size(dtype)});
  return s;
}

std::string body_with(const std::string& data, const char* datatype = "FP32",
                      const std::string& shape = "[1, 3]") {
  return std::string(R"({"inputs": [{"name": "x", "shape": )") + shape + R"(, "datatype": ")" +
         datatype + R"(", "data": )" + data + "}]}";
}

std::string error_of(const std::string& body, DType dtype = DType::kF32) {
  try {
    parse_infer_request(body, signature(dtype), 4);
  } catch (const ProtocolError& error) {
    return error.what();
  }
  return "no error";
}

TEST(KserveRequestReader, MalformedNumbersAreInvalidJson) {
  for (const char* data : {"[01, 2, 3]", "[1., 2, 3]", "[.5, 2, 3]", "[1e, 2, 3]", "[+1, 2, 3]",
                           "[-, 2, 3]", "[NaN, 2, 3]", "[Infinity, 2, 3]", "[-Infinity, 2, 3]",
                           "[1 2, 3]", "[1,, 3]", "[1, 2, 3,]", "[0x10, 2, 3]"}) {
    EXPECT_NE(error_of(body_with(data)).find("request body is not valid JSON"), std::string::npos)
        << data << ": " << error_of(body_with(data));
  }
  EXPECT_NE(error_of(body_with("[1e400, 2, 3]")).find("number overflow parsing '1e400'"),
            std::string::npos);
}

TEST(KserveRequestReader, WrongCountsAndValuesNameTheField) {
  EXPECT_NE(error_of(body_with("[1, 2]")).find("inputs[0] ('x').data: 2 values for shape [1, 3]"),
            std::string::npos);
  EXPECT_NE(error_of(body_with("[[1, 2, 3], [4]]")).find("4 values for shape [1, 3]"),
            std::string::npos);
  EXPECT_NE(error_of(body_with("[1, 2, 3, 4, 5, 6, 7, 8, 9]", "FP32", "[2, 3]"))
                .find("9 values for shape [2, 3], which holds 6"),
            std::string::npos);
  EXPECT_NE(
      error_of(body_with("[1, null, 3]")).find("data[1]: expected a number for FP32, found null"),
      std::string::npos);
  EXPECT_NE(error_of(body_with("[1, 2, {\"a\": [1]}]"))
                .find("data[2]: expected a number for FP32, found {\"a\":[1]}"),
            std::string::npos);
  EXPECT_NE(error_of(body_with("[1, 2.5, 3]", "INT32"), DType::kI32)
                .find("data[1]: expected an integer for INT32, found 2.5"),
            std::string::npos);
  EXPECT_NE(error_of(body_with("[1, 2147483648, 3]", "INT32"), DType::kI32)
                .find("data[1]: 2147483648 does not fit INT32"),
            std::string::npos);
  EXPECT_NE(error_of(body_with("[1, 2, 9223372036854775808]", "INT64"), DType::kI64)
                .find("data[2]: 9223372036854775808 does not fit INT64"),
            std::string::npos);
  EXPECT_NE(error_of(body_with("[true, 1, false]", "BOOL"), DType::kBool)
                .find("data[1]: expected true or false for BOOL, found 1"),
            std::string::npos);
}

TEST(KserveRequestReader, NumbersBecomeElementsAsBefore) {
  // -0 is the integer 0 (+0.0f); a double past FLT_MAX rounds to infinity as
  // store_element rounds it (JSON itself cannot hold NaN or infinity).
  InferRequest parsed =
      parse_infer_request(body_with("[-0, 1e39, 0.1]"), signature(DType::kF32), 4);
  const std::vector<float> values = parsed.request.inputs()[0].values<float>();
  EXPECT_FALSE(std::signbit(values[0]));
  EXPECT_EQ(values[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(values[2], 0.1f);
  parsed =
      parse_infer_request(body_with("[-0.0, 16777217, -2147483648]"), signature(DType::kF32), 4);
  const std::vector<float> more = parsed.request.inputs()[0].values<float>();
  EXPECT_TRUE(std::signbit(more[0]));
  EXPECT_EQ(more[1], 16777216.0f);
  EXPECT_EQ(more[2], -2147483648.0f);
  parsed = parse_infer_request(body_with("[-9223372036854775808, 0, 9223372036854775807]", "INT64"),
                               signature(DType::kI64), 4);
  EXPECT_EQ(parsed.request.inputs()[0].values<int64_t>(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 0,
                                  std::numeric_limits<int64_t>::max()}));
}

TEST(KserveRequestReader, ManyValuesAreCountedNotStored) {
  // A body far past the shape's count is refused by its count, naming it.
  std::string data = "[";
  for (int i = 0; i < 200000; ++i) data += i ? ",1" : "1";
  data += "]";
  EXPECT_NE(error_of(body_with(data)).find("200000 values for shape [1, 3]"), std::string::npos);
}

TEST(KserveRequestReader, KeepsAtMostMaxValuesAndCountsTheRest) {
  // Note [Request memory bounded by the model]: past max_values, counted only.
  const std::string body =
      R"({"inputs": [{"name": "x", "data": [1, 2.5, [3, 4]]}, {"name": "y", "data": [5, 6]}]})";
  std::optional<RequestDocument> fast = read_request_document_fast(body, 4);
  ASSERT_TRUE(fast.has_value());
  const RequestDocument reference = read_request_document_reference(body, 4);
  expect_same(*fast, reference, body);
  EXPECT_EQ(reference.data[0].count, 4u);
  EXPECT_EQ(reference.data[0].values.size(), 4u);
  EXPECT_EQ(reference.data[1].count, 2u);
  EXPECT_TRUE(reference.data[1].values.empty());
  // Through parse_infer_request, the message names the full count.
  std::string data = "[";
  for (int i = 0; i < 5000; ++i) data += i ? ",0" : "0";
  data += "]";
  EXPECT_NE(error_of(body_with(data)).find("5000 values for shape [1, 3]"), std::string::npos);
}

TEST(KserveRequestReader, TooManyJsonValuesBesidesTheDataAreRefused) {
  std::string padding = "[";
  for (size_t i = 0; i <= kMaxRequestNodes; ++i) padding += i ? ",0" : "0";
  padding += "]";
  const std::string body = R"({"parameters": {"padding": )" + padding + R"(}, "inputs": []})";
  for (const Outcome& outcome :
       {outcome_of([&] { return read_request_document(body); }),
        outcome_of([&] { return read_request_document_reference(body); })}) {
    EXPECT_NE(outcome.error.find("more than 65536 JSON values besides the inputs' data"),
              std::string::npos)
        << outcome.error;
  }
}

}  // namespace
}  // namespace grove::serving
