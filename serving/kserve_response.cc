// The KServe v2 answer's JSON form (serving/kserve_protocol.h): the outputs a
// request asked for, as JSON numbers or, with the binary tensor data
// extension, as raw bytes after the JSON.
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "serving/json_number.h"
#include "serving/kserve_protocol.h"

namespace grove::serving {
namespace {

using nlohmann::json;

// `text` as a JSON string: as it is between quotes when it needs no escape
// (printable ASCII without quote or backslash), else as json_text() writes it.
void append_json_string(std::string& out, const std::string& text) {
  for (const char c : text) {
    if (c < 0x20 || c > 0x7E || c == '"' || c == '\\') {
      out += json_text(json(text));
      return;
    }
  }
  out += '"';
  out += text;
  out += '"';
}

// Note [Response numbers]
// Answers are written by hand, not through nlohmann::json: each float in at
// most nine significant digits that read back as the same float
// (write_json_float, Note [Floats in nine digits]; a double or an integer in
// the fewest, std::to_chars), which keeps a 512-wide f32 row near 6 KB
// instead of the 10 KB it takes printed as a double, and saves building a
// JSON tree per answer. A NaN or an infinity,
// which JSON cannot hold, is written as null. Test:
// KserveProtocol.ResponseFloatsReadBackBitExactAndNonFiniteAreNull.
//
// Note [Answer numbers through a scratch]
// An answer's numbers are written into this thread's scratch, sized once for
// the largest array it has written, and appended to the body in one copy:
// growing the body to the widest text every number could take (32 bytes
// each) zero-filled three times the answer's size per answer, and touched
// fresh pages whenever the allocator had returned them. Test:
// KserveProtocol.ResponseFloatsReadBackBitExactAndNonFiniteAreNull.
std::vector<char>& number_scratch(size_t size) {
  thread_local std::vector<char> scratch;
  if (scratch.size() < size) scratch.resize(size);
  return scratch;
}

// `count` numbers as a JSON array, each load(i) written by std::to_chars
// (a non-finite float as null).
template <typename Load>
void append_numbers(std::string& out, size_t count, Load load) {
  constexpr size_t kWidest = 32;  // "-1.7976931348623157e+308" and a comma
  std::vector<char>& scratch = number_scratch(count * kWidest + 2);
  char* p = scratch.data();
  char* const end = scratch.data() + scratch.size();
  *p++ = '[';
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) *p++ = ',';
    const auto value = load(i);
    if constexpr (std::is_floating_point_v<decltype(value)>) {
      if (!std::isfinite(value)) {  // JSON has no NaN or infinity
        std::memcpy(p, "null", 4);
        p += 4;
        continue;
      }
    }
    if constexpr (std::is_same_v<std::remove_cv_t<decltype(value)>, float>) {
      p = write_json_float(p, value);  // Note [Floats in nine digits]
    } else {
      p = std::to_chars(p, end, value).ptr;
    }
  }
  *p++ = ']';
  out.append(scratch.data(), static_cast<size_t>(p - scratch.data()));
}

// An f32 array (Note [Floats in nine digits]), the commonest answer.
void append_floats(std::string& out, const uint8_t* data, size_t count) {
  std::vector<char>& scratch = number_scratch(count * (kJsonFloatChars + 1) + 2);
  char* p = scratch.data();
  *p++ = '[';
  p = write_json_float_list(p, data, count);
  *p++ = ']';
  out.append(scratch.data(), static_cast<size_t>(p - scratch.data()));
}

// The elements of `rows` as a flat JSON array.
void append_data(std::string& out, const HostRows& rows) {
  const size_t element = runtime::dtype_size(rows.dtype);
  const size_t count = rows.bytes.size() / element;
  const uint8_t* data = rows.bytes.data();
  auto as = [data](auto zero) {
    return [data, zero](size_t i) {
      decltype(zero) value;
      std::memcpy(&value, data + i * sizeof(value), sizeof(value));
      return value;
    };
  };
  switch (rows.dtype) {
    case runtime::DType::kBool:
      out += '[';
      for (size_t i = 0; i < count; ++i) {
        if (i > 0) out += ',';
        out += data[i] ? "true" : "false";
      }
      out += ']';
      return;
    case runtime::DType::kI32:
      return append_numbers(out, count, as(int32_t{0}));
    case runtime::DType::kI64:
      return append_numbers(out, count, as(int64_t{0}));
    case runtime::DType::kF64:
      return append_numbers(out, count, as(0.0));
    case runtime::DType::kF32:
      return append_floats(out, data, count);
    default:  // f16, bf16: every value is a float exactly
      return append_numbers(out, count, [&](size_t i) {
        return static_cast<float>(runtime::load_element(data + i * element, rows.dtype));
      });
  }
}

}  // namespace

std::string infer_response_json(const std::string& model_name, const InferRequest& request,
                                const ModelSignature& signature, const Response& response,
                                size_t* json_length) {
  // Note [Response numbers].
  size_t room = 256 + model_name.size() + request.id.size();  // the text around the data
  for (size_t o : request.outputs) {
    const HostRows& rows = response.outputs.at(o);
    // An f32 array's widest text; binary bytes as they are. Others grow the body as they go.
    room += 64 + signature.outputs[o].name.size() +
            (rows.dtype == runtime::DType::kF32 ? rows.bytes.size() / 4 * (kJsonFloatChars + 1)
                                                : rows.bytes.size());
  }
  std::string out;
  out.reserve(room);
  out += "{\"model_name\":";
  append_json_string(out, model_name);
  if (!request.id.empty()) {
    out += ",\"id\":";
    append_json_string(out, request.id);
  }
  out += ",\"outputs\":[";
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    const size_t o = request.outputs[i];
    const HostRows& rows = response.outputs.at(o);
    if (i > 0) out += ',';
    out += "{\"name\":";
    append_json_string(out, signature.outputs[o].name);
    out += ",\"datatype\":\"";
    out += kserve_datatype(rows.dtype);
    out += "\",\"shape\":[";
    for (size_t d = 0; d < rows.shape.size(); ++d) {
      if (d > 0) out += ',';
      out += std::to_string(rows.shape[d]);
    }
    out += ']';
    if (i < request.binary.size() && request.binary[i]) {
      out += ",\"parameters\":{\"binary_data_size\":" + std::to_string(rows.bytes.size()) + "}}";
      continue;
    }
    out += ",\"data\":";
    append_data(out, rows);
    out += '}';
  }
  out += "]}";
  const size_t text = out.size();
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    if (i < request.binary.size() && request.binary[i]) {
      const RowBytes& bytes = response.outputs.at(request.outputs[i]).bytes;
      out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
  }
  if (json_length != nullptr) *json_length = out.size() > text ? text : 0;
  return out;
}

}  // namespace grove::serving
