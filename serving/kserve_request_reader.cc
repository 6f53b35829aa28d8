#include "serving/kserve_request_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "serving/json_number.h"
#include "serving/kserve_protocol.h"

namespace grove::serving {
namespace {

using nlohmann::json;

// The fast reader's scan (Note [Reading request data]): finds the data arrays
// of root.inputs[i] and reads their numbers; nullopt where it gives up.
class DataArrayScan {
 public:
  struct Span {
    size_t input = 0;
    size_t begin = 0, end = 0;  // the array's text, brackets included
    InputData data;
  };

  DataArrayScan(std::string_view text, size_t max_values, std::optional<runtime::DType> data_as)
      : text_(text), max_values_(max_values), data_as_(data_as) {}

  std::optional<std::vector<Span>> run() {
    skip_space();
    if (!object([&](std::string_view key) {
          if (key == "inputs") {
            if (seen_inputs_ || peek() != '[') return false;
            seen_inputs_ = true;
            return inputs();
          }
          return common_field(1, [&] { return root_field(key); });
        })) {
      return std::nullopt;
    }
    skip_space();
    complete_ = complete_ && seen_inputs_ && at_ == text_.size();
    return std::move(spans_);
  }

  // Note [Requests in the common layout]: what run() read of such a body,
  // data left in the spans; nullopt for any other body.
  std::optional<CommonRequest> common() {
    if (!complete_) return std::nullopt;
    return std::move(common_);
  }

 private:
  char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }
  void skip_space() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\r' || text_[at_] == '\t')) {
      ++at_;
    }
  }
  bool consume(char c) {
    if (peek() != c) return false;
    ++at_;
    return true;
  }
  bool expect(char c) {
    skip_space();
    if (peek() != c) return false;
    ++at_;
    skip_space();
    return true;
  }

  // A string's raw text between its quotes; false at its end of text.
  bool string(std::string_view* raw) {
    if (peek() != '"') return false;
    const size_t begin = ++at_;
    while (at_ < text_.size() && text_[at_] != '"') at_ += text_[at_] == '\\' ? 2 : 1;
    if (at_ >= text_.size()) return false;
    if (raw != nullptr) *raw = text_.substr(begin, at_ - begin);
    ++at_;
    return true;
  }

  // {key: value, ...} at depth 0; `member` reads each value (at_ on it).
  template <typename Member>
  bool object(Member member) {
    if (!expect('{')) return false;
    if (consume('}')) return true;
    while (true) {
      std::string_view key;
      if (!string(&key) || key.find('\\') != std::string_view::npos) return false;
      if (!expect(':') || !member(key)) return false;
      skip_space();
      if (consume('}')) return true;
      if (!expect(',')) return false;
    }
  }

  // The root's "inputs" array (depth 1).
  bool inputs() {
    if (!expect('[')) return false;
    if (consume(']')) return true;
    for (size_t index = 0;; ++index) {
      if (peek() == '{') {
        bool seen_data = false;
        CommonTensor& tensor = common_.inputs.emplace_back();
        if (!object([&](std::string_view key) {
              if (key != "data" || peek() != '[') {
                return common_field(3, [&] { return tensor_field(key, tensor); });
              }
              if (seen_data) return false;
              seen_data = true;
              tensor.has_data = true;
              return data(index);
            })) {
          return false;
        }
      } else {
        complete_ = false;
        common_.inputs.emplace_back();
        if (!skip_value(2)) return false;
      }
      skip_space();
      if (consume(']')) return true;
      if (!expect(',')) return false;
    }
  }

  // Note [Requests in the common layout]: `read` takes the value of a field
  // the common layout knows; anything else (or a value it refuses) leaves the
  // body to the tree, and the value is skipped from where it began.
  template <typename Read>
  bool common_field(int depth, Read read) {
    const size_t begin = at_;
    if (complete_ && read()) return true;
    complete_ = false;
    at_ = begin;
    return skip_value(depth);
  }

  // A string of printable ASCII without escapes (all the common layout takes).
  bool plain_string(std::string* out) {
    if (peek() != '"') return false;
    const size_t begin = ++at_;
    while (at_ < text_.size() && text_[at_] != '"') {
      const char c = text_[at_];
      if (c < 0x20 || c > 0x7E || c == '\\') return false;
      ++at_;
    }
    if (at_ >= text_.size()) return false;
    out->assign(text_.data() + begin, at_ - begin);
    ++at_;
    return true;
  }

  // A JSON integer token without sign, fraction or exponent, within uint64.
  bool plain_unsigned(uint64_t* value) {
    const size_t begin = at_;
    while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
    if (at_ == begin || (text_[begin] == '0' && at_ - begin > 1)) return false;
    if (at_ < text_.size() && std::string_view(".eE").find(text_[at_]) != std::string_view::npos) {
      return false;
    }
    return std::from_chars(text_.data() + begin, text_.data() + at_, *value).ec == std::errc();
  }

  bool literal_bool(bool* value) {
    if (text_.substr(at_, 4) == "true") {
      at_ += 4;
      *value = true;
    } else if (text_.substr(at_, 5) == "false") {
      at_ += 5;
      *value = false;
    } else {
      return false;
    }
    return at_ == text_.size() ||
           std::string_view(",]} \n\r\t").find(text_[at_]) != std::string_view::npos;
  }

  // {} or {"<name>": true|false}.
  bool flag_object(std::string_view name, std::optional<bool>* flag) {
    bool seen = false;
    return object([&](std::string_view key) {
      bool value = false;
      if (key != name || seen || !literal_bool(&value)) return false;
      seen = true;
      *flag = value;
      return true;
    });
  }

  // The root's "id", "parameters" and "outputs" (at_ on the value).
  bool root_field(std::string_view key) {
    if (key == "id" && !common_.id) return plain_string(&common_.id.emplace());
    if (key == "parameters" && !seen_root_parameters_) {
      seen_root_parameters_ = true;
      return flag_object("binary_data_output", &common_.binary_data_output);
    }
    if (key == "outputs" && !common_.outputs) {
      std::vector<CommonOutput>& outputs = common_.outputs.emplace();
      if (!expect('[')) return false;
      if (consume(']')) return true;
      while (true) {
        // As many as a request may name without passing kMaxRequestNodes.
        if (outputs.size() >= 1024 || peek() != '{') return false;
        CommonOutput& output = outputs.emplace_back();
        bool seen_name = false, seen_parameters = false;
        if (!object([&](std::string_view field) {
              if (field == "name" && !seen_name) return seen_name = plain_string(&output.name);
              if (field == "parameters" && !seen_parameters) {
                seen_parameters = true;
                return flag_object("binary_data", &output.binary_data);
              }
              return false;
            }) ||
            !seen_name) {
          return false;
        }
        skip_space();
        if (consume(']')) return true;
        if (!expect(',')) return false;
      }
    }
    return false;
  }

  // A tensor's "name", "datatype", "shape" and "parameters" (at_ on the value).
  bool tensor_field(std::string_view key, CommonTensor& tensor) {
    if (key == "name" && !tensor.name) return plain_string(&tensor.name.emplace());
    if (key == "datatype" && !tensor.datatype) return plain_string(&tensor.datatype.emplace());
    if (key == "shape" && !tensor.shape) {
      runtime::Shape& shape = tensor.shape.emplace();
      if (!expect('[')) return false;
      if (consume(']')) return true;
      while (true) {
        uint64_t size = 0;
        if (shape.size() >= 16 || !plain_unsigned(&size) || size > (uint64_t{1} << 30)) {
          return false;
        }
        shape.push_back(static_cast<int64_t>(size));
        skip_space();
        if (consume(']')) return true;
        if (!expect(',')) return false;
      }
    }
    if (key == "parameters" && !tensor.binary_data_size) {
      bool seen = false;
      return object([&](std::string_view field) {
               uint64_t size = 0;
               if (field != "binary_data_size" || seen || !plain_unsigned(&size)) return false;
               seen = true;
               tensor.binary_data_size = size;
               return true;
             }) &&
             seen;
    }
    return false;
  }

  // Any value, unchecked (the reference reader checks it in the rest of the
  // text); `depth` containers are open around it.
  bool skip_value(int depth) {
    skip_space();
    const char c = peek();
    if (c == '"') return string(nullptr);
    if (c == '{' || c == '[') {
      if (depth >= kMaxRequestDepth) return false;
      const char close = c == '{' ? '}' : ']';
      ++at_;
      skip_space();
      if (consume(close)) return true;
      while (true) {
        if (c == '{' && (!string(nullptr) || !expect(':'))) return false;
        if (!skip_value(depth + 1)) return false;
        skip_space();
        if (consume(close)) return true;
        if (!expect(',')) return false;
      }
    }
    const size_t begin = at_;
    while (at_ < text_.size() &&
           std::string_view(",]} \n\r\t").find(text_[at_]) == std::string_view::npos) {
      ++at_;
    }
    return at_ > begin;
  }

  // root.inputs[index].data (its "[" at at_; depth 3 around it).
  bool data(size_t index) {
    Span span;
    span.input = index;
    span.begin = at_;
    span.data.read = true;
    span.data.as_rows = data_as_.has_value();
    if (data_as_) {
      // At most the values left to keep, and at most one per 2 bytes of text.
      const size_t bound = std::min(max_values_ - kept_, (text_.size() - at_) / 2 + 1);
      // Note [Rows read into a scratch]: small arrays through this thread's
      // scratch, large ones straight into their pinned block.
      const size_t bound_bytes = bound * runtime::dtype_size(*data_as_);
      rows_ = &span.data.row_bytes;
      if (bound_bytes <= kRowScratchBytes) {
        if (row_scratch().size() < bound_bytes) row_scratch().resize(bound_bytes);
        rows_ = &row_scratch();
      } else {
        span.data.row_bytes.resize(bound_bytes);
      }
      row_at_ = 0;
    } else {
      span.data.values.reserve(1024);
    }
    if (!numbers(span.data, 3)) return false;
    if (data_as_ && rows_ == &row_scratch()) {
      assign_row_bytes(span.data.row_bytes, row_scratch().data(), row_at_);
    } else if (data_as_) {
      span.data.row_bytes.resize(row_at_);
    }
    span.end = at_;
    spans_.push_back(std::move(span));
    return true;
  }

  bool numbers(InputData& data, int depth) {
    if (depth >= kMaxRequestDepth) return false;
    ++at_;  // '['
    skip_space();
    if (consume(']')) return true;
    while (true) {
      if (peek() == '[') {
        if (!numbers(data, depth + 1)) return false;
      } else if (size_t read = float_run(); read > 0) {
        data.count += read;  // a run of FP32 values at once (read_json_float_list)
      } else {
        // Note [Request memory bounded by the model]: past max_values, counted only.
        ++data.count;
        const bool keep = kept_ < max_values_;
        DataValue scratch;
        if (!number(keep && !data_as_ ? data.values.emplace_back() : scratch)) return false;
        if (keep && data_as_ && !append_element(*rows_, row_at_, scratch, *data_as_)) {
          return false;
        }
        kept_ += keep ? 1 : 0;
      }
      skip_space();
      if (consume(']')) return true;
      if (peek() != ',') return false;
      ++at_;
      skip_space();
    }
  }

  // FP32 rows: the run of numbers at at_ (within the values left to keep)
  // read straight into the rows, as number() and append_element() would
  // read them one by one; 0 where there is none to read that way.
  size_t float_run() {
    if (data_as_ != runtime::DType::kF32 || kept_ >= max_values_) return 0;
    const size_t room = std::min(max_values_ - kept_, (rows_->size() - row_at_) / sizeof(float));
    size_t read = 0;
    const char* after = read_json_float_list(text_.data() + at_, text_.data() + text_.size(),
                                             rows_->data() + row_at_, room, &read);
    at_ = static_cast<size_t>(after - text_.data());
    kept_ += read;
    row_at_ += read * sizeof(float);
    return read;
  }

  // The element store_values() (kserve_protocol.cc) makes of `value` as
  // `dtype`, written to `bytes` at `at` (which then moves past it); false
  // where it would refuse the value (a float or an integer out of range for
  // INT32 or INT64): the reference reader then reads the body and the
  // refusal names the element.
  // Note [Rows read into a scratch]
  // The numbers of a data array are written as row bytes into a buffer sized
  // for the most the array may hold (one value per 2 bytes of text, at most
  // the values the model takes). Where that bound is small, the buffer is
  // this thread's scratch and the rows are then copied into a pinned block of
  // exactly their size: reserving the bound in pinned memory per request, as
  // before, took a block of up to half the body (16 KiB for a 512-float row
  // of 2 KiB) and zeroed it. A large array is written straight into its
  // pinned block, cut to size after, so that a large request never holds its
  // rows twice (Note [Request memory bounded by the model]). The scratch
  // keeps its largest size, at most kRowScratchBytes, per thread. Tests:
  // KserveProtocol.DecodedRowsLieInPinnedMemory (the rows' capacity is their
  // size), KserveProtocol.LargeFloatBodyCostsItsRowsNotAValuePerElement.
  static constexpr size_t kRowScratchBytes = size_t{256} << 10;
  static RowBytes& row_scratch() {
    thread_local RowBytes scratch;
    return scratch;
  }

  static bool append_element(RowBytes& bytes, size_t& at, const DataValue& value,
                             runtime::DType dtype) {
    if (dtype == runtime::DType::kF32 && value.kind == DataValue::Kind::kFloat) {
      // The common case first, without the general path's size lookup.
      if (at + 4 > bytes.size()) bytes.resize(at + 4);          // past the bound: never, but safe
      const float narrow = static_cast<float>(value.floating);  // as store_values rounds
      std::memcpy(bytes.data() + at, &narrow, 4);
      at += 4;
      return true;
    }
    const size_t element = runtime::dtype_size(dtype);
    if (at + element > bytes.size()) bytes.resize(at + element);  // past the bound: never, but safe
    uint8_t* out = bytes.data() + at;
    const bool is_signed = value.kind == DataValue::Kind::kInteger;
    const bool is_unsigned = value.kind == DataValue::Kind::kUnsigned;
    switch (dtype) {
      case runtime::DType::kI32: {
        if (is_signed ? value.integer < INT32_MIN || value.integer > INT32_MAX
                      : !is_unsigned || value.unsigned_integer > INT32_MAX) {
          return false;
        }
        const auto narrow = static_cast<int32_t>(
            is_signed ? value.integer : static_cast<int64_t>(value.unsigned_integer));
        std::memcpy(out, &narrow, 4);
        at += 4;
        return true;
      }
      case runtime::DType::kI64: {
        if (!is_signed && (!is_unsigned || value.unsigned_integer > INT64_MAX)) return false;
        const int64_t wide =
            is_signed ? value.integer : static_cast<int64_t>(value.unsigned_integer);
        std::memcpy(out, &wide, 8);
        at += 8;
        return true;
      }
      case runtime::DType::kBool:
        return false;  // numbers are not BOOL values
      default: {
        double wide = value.floating;
        if (is_signed) wide = static_cast<double>(value.integer);
        if (is_unsigned) wide = static_cast<double>(value.unsigned_integer);
        if (dtype == runtime::DType::kF32) {
          const float narrow = static_cast<float>(wide);  // as store_values rounds
          std::memcpy(out, &narrow, 4);
        } else {
          runtime::store_element(out, dtype, wide);
        }
        at += element;
        return true;
      }
    }
  }

  // A JSON number token, converted as nlohmann's lexer converts it (Note
  // [Decimal to double in one pass]).
  bool number(DataValue& value) {
    JsonNumber number;
    // Note [Decimal to float without the nearest double]: FP32 rows keep floats.
    const JsonPrecision precision =
        data_as_ == runtime::DType::kF32 ? JsonPrecision::kFloat : JsonPrecision::kDouble;
    const char* after =
        read_json_number(text_.data() + at_, text_.data() + text_.size(), &number, precision);
    if (after == nullptr) return false;
    at_ = static_cast<size_t>(after - text_.data());
    switch (number.kind) {
      case JsonNumber::Kind::kInteger:
        value.kind = DataValue::Kind::kInteger;
        value.integer = number.integer;
        break;
      case JsonNumber::Kind::kUnsigned:
        value.kind = DataValue::Kind::kUnsigned;
        value.unsigned_integer = number.unsigned_integer;
        break;
      case JsonNumber::Kind::kFloat:
        value.kind = DataValue::Kind::kFloat;
        value.floating = number.floating;
        break;
    }
    return true;
  }

  std::string_view text_;
  const size_t max_values_;
  const std::optional<runtime::DType> data_as_;
  size_t kept_ = 0;           // data values kept, over all inputs
  size_t row_at_ = 0;         // bytes written to the data array's row_bytes
  RowBytes* rows_ = nullptr;  // where they are written (Note [Rows read into a scratch])
  size_t at_ = 0;
  bool seen_inputs_ = false;
  std::vector<Span> spans_;
  // Note [Requests in the common layout].
  bool complete_ = true;  // every field so far is one the common layout takes
  bool seen_root_parameters_ = false;
  CommonRequest common_;
};

}  // namespace

namespace {

// The fast reader's document from its scan's spans (Note [Reading request data]).
std::optional<RequestDocument> document_from_spans(
    std::string_view text, std::optional<std::vector<DataArrayScan::Span>> spans) {
  if (!spans) return std::nullopt;
  std::string rest;
  rest.reserve(text.size());
  size_t at = 0;
  for (const DataArrayScan::Span& span : *spans) {
    rest.append(text.substr(at, span.begin - at));
    rest += "[]";
    at = span.end;
  }
  rest.append(text.substr(at));
  RequestDocument document;
  try {
    document = read_request_document_reference(rest);
  } catch (const ProtocolError&) {
    return std::nullopt;  // the reference reader names the error in the original text
  }
  for (DataArrayScan::Span& span : *spans) {
    if (span.input >= document.data.size() || !document.data[span.input].read ||
        !document.data[span.input].values.empty()) {
      return std::nullopt;  // not where the reference reader found it: read it all again
    }
    document.data[span.input] = std::move(span.data);
  }
  return document;
}

}  // namespace

std::optional<RequestDocument> read_request_document_fast(std::string_view text, size_t max_values,
                                                          std::optional<runtime::DType> data_as) {
  return document_from_spans(text, DataArrayScan(text, max_values, data_as).run());
}

std::variant<CommonRequest, RequestDocument> read_request(std::string_view text, size_t max_values,
                                                          std::optional<runtime::DType> data_as) {
  DataArrayScan scan(text, max_values, data_as);
  std::optional<std::vector<DataArrayScan::Span>> spans = scan.run();
  if (spans) {
    if (std::optional<CommonRequest> common = scan.common()) {
      for (DataArrayScan::Span& span : *spans) {
        common->inputs.at(span.input).data = std::move(span.data);
      }
      return std::move(*common);
    }
  }
  if (std::optional<RequestDocument> document = document_from_spans(text, std::move(spans))) {
    return std::move(*document);
  }
  return read_request_document_reference(text, max_values);
}

std::optional<CommonRequest> read_common_request(std::string_view text, size_t max_values,
                                                 std::optional<runtime::DType> data_as) {
  DataArrayScan scan(text, max_values, data_as);
  std::optional<std::vector<DataArrayScan::Span>> spans = scan.run();
  if (!spans) return std::nullopt;
  std::optional<CommonRequest> common = scan.common();
  if (!common) return std::nullopt;
  for (DataArrayScan::Span& span : *spans)
    common->inputs.at(span.input).data = std::move(span.data);
  return common;
}

RequestDocument read_request_document(std::string_view text, size_t max_values,
                                      std::optional<runtime::DType> data_as) {
  // Note [Reading request data].
  if (std::optional<RequestDocument> document =
          read_request_document_fast(text, max_values, data_as))
    return std::move(*document);
  return read_request_document_reference(text, max_values);
}

}  // namespace grove::serving
