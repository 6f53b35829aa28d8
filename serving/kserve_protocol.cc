#include "serving/kserve_protocol.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>

#include "serving/kserve_request_reader.h"

namespace grove::serving {
namespace {

using nlohmann::json;

struct DatatypeName {
  runtime::DType dtype;
  const char* name;
};

constexpr DatatypeName kDatatypes[] = {
    {runtime::DType::kF32, "FP32"},  {runtime::DType::kF16, "FP16"},
    {runtime::DType::kBF16, "BF16"}, {runtime::DType::kF64, "FP64"},
    {runtime::DType::kI32, "INT32"}, {runtime::DType::kI64, "INT64"},
    {runtime::DType::kBool, "BOOL"},
};

std::string shape_text(const runtime::Shape& shape) { return runtime::shape_str(shape); }

// A value as the message quotes it: its JSON, cut after 40 characters.
std::string brief(const json& value) {
  std::string text = json_text(value);
  return text.size() <= 40 ? text : text.substr(0, 40) + "...";
}

// Why `dtype` cannot hold the element `value` of `data` (the rest of a
// message that names the element first); "" when it can.
std::string refusal(const InputData& data, const DataValue& value, runtime::DType dtype) {
  using Kind = DataValue::Kind;
  const bool integer = value.kind == Kind::kInteger || value.kind == Kind::kUnsigned;
  switch (dtype) {
    case runtime::DType::kBool:
      if (value.kind != Kind::kBool) {
        return str_cat(": expected true or false for BOOL, found ", brief(data.value_json(value)));
      }
      return "";
    case runtime::DType::kI32:
      if (!integer) {
        return str_cat(": expected an integer for INT32, found ", brief(data.value_json(value)));
      }
      if (value.kind == Kind::kInteger ? value.integer < INT32_MIN || value.integer > INT32_MAX
                                       : value.unsigned_integer > INT32_MAX) {
        return str_cat(": ", brief(data.value_json(value)), " does not fit INT32");
      }
      return "";
    case runtime::DType::kI64:
      if (!integer) {
        return str_cat(": expected an integer for INT64, found ", brief(data.value_json(value)));
      }
      if (value.kind == Kind::kUnsigned && value.unsigned_integer > INT64_MAX) {
        return str_cat(": ", brief(data.value_json(value)), " does not fit INT64");
      }
      return "";
    default:
      if (!integer && value.kind != Kind::kFloat) {
        return str_cat(": expected a number for ", kserve_datatype(dtype), ", found ",
                       brief(data.value_json(value)));
      }
      return "";
  }
}

double number_of(const DataValue& value) {
  switch (value.kind) {
    case DataValue::Kind::kInteger:
      return static_cast<double>(value.integer);
    case DataValue::Kind::kUnsigned:
      return static_cast<double>(value.unsigned_integer);
    default:
      return value.floating;
  }
}

// Writes the elements of `data` as `dtype` to `out`; throws ProtocolError
// naming the first one `dtype` cannot hold ("inputs[0] ('x').data[17]").
// Note [Reading request data]: the field is named only for a refusal.
void store_values(const InputData& data, runtime::DType dtype, uint8_t* out,
                  const InputField& where) {
  using Kind = DataValue::Kind;
  const size_t element = runtime::dtype_size(dtype);
  for (size_t e = 0; e < data.values.size(); ++e) {
    const DataValue& value = data.values[e];
    uint8_t* at = out + e * element;
    if (dtype == runtime::DType::kF32 && value.kind == Kind::kFloat) {
      const float narrow = static_cast<float>(value.floating);  // as store_element rounds
      std::memcpy(at, &narrow, 4);
      continue;
    }
    const std::string refused = refusal(data, value, dtype);
    if (!refused.empty()) throw ProtocolError(str_cat(where, ".data[", e, "]", refused));
    switch (dtype) {
      case runtime::DType::kBool:
        *at = value.boolean ? 1 : 0;
        break;
      case runtime::DType::kI32: {
        const auto narrow = static_cast<int32_t>(
            value.kind == Kind::kInteger ? value.integer
                                         : static_cast<int64_t>(value.unsigned_integer));
        std::memcpy(at, &narrow, 4);
        break;
      }
      case runtime::DType::kI64: {
        const int64_t wide = value.kind == Kind::kInteger
                                 ? value.integer
                                 : static_cast<int64_t>(value.unsigned_integer);
        std::memcpy(at, &wide, 8);
        break;
      }
      default:
        runtime::store_element(at, dtype, number_of(value));
        break;
    }
  }
}

// The elements of a "data" tree, flattened row-major (for a tree the reader
// did not take apart: Note [Reading request data] keeps every root.inputs[i].data).
void flatten(const json& tree, InputData& data) {
  for (const json& item : tree) {
    if (item.is_array()) {
      flatten(item, data);
      continue;
    }
    ++data.count;
    DataValue& value = data.values.emplace_back();
    if (item.is_number_unsigned()) {
      value.kind = DataValue::Kind::kUnsigned;
      value.unsigned_integer = item.get<uint64_t>();
    } else if (item.is_number_integer()) {
      value.kind = DataValue::Kind::kInteger;
      value.integer = item.get<int64_t>();
    } else if (item.is_number_float()) {
      value.kind = DataValue::Kind::kFloat;
      value.floating = item.get<double>();
    } else if (item.is_boolean()) {
      value.kind = DataValue::Kind::kBool;
      value.boolean = item.get<bool>();
    } else {
      value.kind = DataValue::Kind::kOther;
      value.other = data.others.size();
      data.others.push_back(item);
    }
  }
  data.read = true;
}

}  // namespace

std::optional<std::string> model_in_path(const std::string& path, const std::string& rest) {
  const std::string prefix = "/v2/models/";
  if (path.rfind(prefix, 0) != 0 || path.size() <= prefix.size() + rest.size()) return {};
  if (path.compare(path.size() - rest.size(), rest.size(), rest) != 0) return {};
  std::string name = path.substr(prefix.size(), path.size() - prefix.size() - rest.size());
  if (name.empty() || name.find('/') != std::string::npos) return {};
  return name;
}

const char* kserve_datatype(runtime::DType dtype) {
  for (const DatatypeName& entry : kDatatypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return nullptr;
}

InputChecks::InputChecks(const ModelSignature& signature, int64_t max_batch)
    : signature_(signature), max_batch_(max_batch), given_(signature.inputs.size(), false) {}

void InputChecks::count(size_t given) const {
  GROVE_CHECK_AS(ProtocolError, given == signature_.inputs.size(), "inputs: the model takes ",
                 signature_.inputs.size(), " input(s), the request gives ", given);
}

std::ostream& operator<<(std::ostream& out, const InputField& field) {
  out << "inputs[" << field.index << "]";
  if (field.name != nullptr) out << " ('" << *field.name << "')";
  return out;
}

size_t InputChecks::input(const InputField& field, const std::string& name) {
  size_t k = 0;
  while (k < signature_.inputs.size() && signature_.inputs[k].name != name) ++k;
  GROVE_CHECK_AS(ProtocolError, k < signature_.inputs.size(), field,
                 ".name: the model has no input '", name, "'");
  GROVE_CHECK_AS(ProtocolError, !given_[k], field, ".name: input '", signature_.inputs[k].name,
                 "' is given twice");
  given_[k] = true;
  return k;
}

InputField InputChecks::where(const InputField& field, size_t input) const {
  return {field.index, &signature_.inputs.at(input).name};
}

void InputChecks::datatype(const InputField& where, size_t input,
                           const std::string& datatype) const {
  const runtime::DType dtype = signature_.inputs.at(input).dtype;
  GROVE_CHECK_AS(ProtocolError, datatype == kserve_datatype(dtype), where, ".datatype: expected ",
                 kserve_datatype(dtype), ", found ", datatype);
}

CheckedRequest InputChecks::checked(Request request) const {
  // Every check ran as the request was read; what remains are the reader's
  // own invariants (an error here is grove's, not the client's).
  GROVE_CHECK(rows_ >= 1 && request.inputs.size() == signature_.inputs.size(),
              "InputChecks::checked: a request of ", request.inputs.size(), " inputs and ", rows_,
              " rows was not read through every check");
  for (size_t k = 0; k < request.inputs.size(); ++k) {
    GROVE_CHECK(request.inputs[k].bytes.size() ==
                    static_cast<size_t>(rows_) * signature_.inputs[k].row_bytes,
                "InputChecks::checked: input '", signature_.inputs[k].name, "' holds ",
                request.inputs[k].bytes.size(), " bytes for ", rows_, " rows");
  }
  signature_.count_request_check();
  return CheckedRequest(std::move(request), rows_);
}

void InputChecks::shape(const InputField& where, size_t input, const runtime::Shape& shape) {
  // Written only into a refusal's message.
  auto given = [&] { return brief(json(std::vector<int64_t>(shape.begin(), shape.end()))); };
  for (int64_t size : shape) {
    GROVE_CHECK_AS(ProtocolError, size >= 0 && size <= (int64_t{1} << 30), where,
                   ".shape: ", given(), " holds ", size, "; sizes are integers in [0, 2^30]");
  }
  const runtime::Shape& expected_row = signature_.inputs.at(input).row_shape;
  GROVE_CHECK_AS(
      ProtocolError,
      shape.size() == expected_row.size() + 1 &&
          std::equal(expected_row.begin(), expected_row.end(), shape.begin() + 1),
      where, ".shape: expected [rows, ",
      [&] {
        std::string dims;
        for (int64_t d : expected_row) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
        return dims;
      }(),
      "], found ", given());
  GROVE_CHECK_AS(ProtocolError, shape[0] >= 1 && shape[0] <= max_batch_, where,
                 ".shape: ", shape[0], " rows is outside [1, ", max_batch_, "] (--max-batch)");
  GROVE_CHECK_AS(ProtocolError, rows_ < 0 || rows_ == shape[0], where, ".shape: ", shape[0],
                 " rows, but an earlier input has ", rows_, "; every input has the same rows");
  rows_ = shape[0];
}

size_t requested_output(const std::string& field, const std::string& name,
                        const ModelSignature& signature) {
  size_t o = 0;
  while (o < signature.outputs.size() && signature.outputs[o].name != name) ++o;
  GROVE_CHECK_AS(ProtocolError, o < signature.outputs.size(), field,
                 ".name: the model has no output '", name, "'");
  return o;
}

HostRows rows_from_bytes(const runtime::Shape& shape, runtime::DType dtype, const uint8_t* bytes,
                         size_t size) {
  HostRows rows;
  rows.shape = shape;
  rows.dtype = dtype;
  assign_row_bytes(rows.bytes, bytes, size);
  if (dtype == runtime::DType::kBool) {
    for (uint8_t& byte : rows.bytes) byte = byte != 0;
  }
  return rows;
}

namespace {

// Note [Reading request data]; Note [Request memory bounded by the model].
struct DataLimits {
  size_t max_values = 0;
  std::optional<runtime::DType> data_as;  // the one datatype of every input, if any
};

DataLimits data_limits(const ModelSignature& signature, int64_t max_batch) {
  DataLimits limits;
  for (size_t i = 0; i < signature.inputs.size(); ++i) {
    const RowSpec& spec = signature.inputs[i];
    limits.max_values +=
        static_cast<size_t>(max_batch) * static_cast<size_t>(runtime::shape_numel(spec.row_shape));
    if (i == 0) limits.data_as = spec.dtype;
    if (limits.data_as != spec.dtype || spec.dtype == runtime::DType::kBool) limits.data_as.reset();
  }
  return limits;
}

// An input's data values, as many as `shape` holds, into `host`.
void take_data(InputData& values, const runtime::Shape& shape, const RowSpec& spec,
               const InputField& where, HostRows& host) {
  const int64_t count = runtime::shape_numel(shape);
  GROVE_CHECK_AS(ProtocolError, static_cast<int64_t>(values.count) == count, where,
                 ".data: ", values.count, " values for shape ", shape_text(shape), ", which holds ",
                 count);
  const size_t element_size = runtime::dtype_size(spec.dtype);
  host.shape = shape;
  host.dtype = spec.dtype;
  if (values.as_rows) {  // Note [Request memory bounded by the model]: the rows as read
    GROVE_CHECK(values.row_bytes.size() == static_cast<size_t>(count) * element_size, where,
                ".data: ", values.row_bytes.size(), " bytes read for ", count, " values of ",
                kserve_datatype(spec.dtype), " (an error in grove's request reader)");
    host.bytes = std::move(values.row_bytes);
    return;
  }
  host.bytes.resize(static_cast<size_t>(count) * element_size);
  store_values(values, spec.dtype, host.bytes.data(), where);
}

// Note [Requests in the common layout]: the request from the body's fields,
// with every check parse_infer_request_from_document() makes (ProtocolError
// where one fails, for that function to name).
InferRequest infer_request_of(CommonRequest& common, const std::string& body,
                              const ModelSignature& signature, int64_t max_batch,
                              std::optional<size_t> json_length) {
  InferRequest result;
  if (common.id) result.id = std::move(*common.id);
  InputChecks checks(signature, max_batch);
  checks.count(common.inputs.size());
  Request request;
  request.inputs.resize(signature.inputs.size());
  size_t binary_at = json_length ? *json_length : body.size();
  for (size_t i = 0; i < common.inputs.size(); ++i) {
    CommonTensor& tensor = common.inputs[i];
    const InputField field{i};
    GROVE_CHECK_AS(ProtocolError, tensor.name && tensor.datatype && tensor.shape, field,
                   ": a field is missing");
    const size_t k = checks.input(field, *tensor.name);
    const RowSpec& spec = signature.inputs[k];
    const InputField where = checks.where(field, k);
    checks.datatype(where, k, *tensor.datatype);
    checks.shape(where, k, *tensor.shape);
    if (tensor.binary_data_size) {
      const uint64_t expected = static_cast<uint64_t>(runtime::shape_numel(*tensor.shape)) *
                                runtime::dtype_size(spec.dtype);
      GROVE_CHECK_AS(ProtocolError,
                     json_length && !tensor.has_data && *tensor.binary_data_size == expected &&
                         expected <= body.size() - binary_at,
                     where, ".parameters.binary_data_size: refused");
      request.inputs[k] =
          rows_from_bytes(*tensor.shape, spec.dtype,
                          reinterpret_cast<const uint8_t*>(body.data()) + binary_at, expected);
      binary_at += expected;
      continue;
    }
    GROVE_CHECK_AS(ProtocolError, tensor.has_data, where, ".data: missing");
    take_data(tensor.data, *tensor.shape, spec, where, request.inputs[k]);
  }
  result.request = checks.checked(std::move(request));
  GROVE_CHECK_AS(ProtocolError, binary_at == body.size(), "bytes after the JSON");
  const bool all_binary = common.binary_data_output.value_or(false);
  if (common.outputs) {
    for (size_t i = 0; i < common.outputs->size(); ++i) {
      const CommonOutput& wanted = (*common.outputs)[i];
      result.outputs.push_back(
          requested_output(str_cat("outputs[", i, "]"), wanted.name, signature));
      result.binary.push_back(wanted.binary_data.value_or(all_binary));
    }
  } else {
    for (size_t o = 0; o < signature.outputs.size(); ++o) {
      result.outputs.push_back(o);
      result.binary.push_back(all_binary);
    }
  }
  return result;
}

}  // namespace

InferRequest parse_infer_request(const std::string& body, const ModelSignature& signature,
                                 int64_t max_batch, std::optional<size_t> json_length) {
  GROVE_CHECK_AS(ProtocolError, !json_length || *json_length <= body.size(),
                 "Inference-Header-Content-Length ", json_length.value_or(0),
                 " is beyond the body's ", body.size(), " bytes");
  const size_t text_end = json_length ? *json_length : body.size();
  const DataLimits limits = data_limits(signature, max_batch);
  std::variant<CommonRequest, RequestDocument> read =
      read_request(std::string_view(body.data(), text_end), limits.max_values, limits.data_as);
  if (CommonRequest* common = std::get_if<CommonRequest>(&read)) {
    try {
      return infer_request_of(*common, body, signature, max_batch, json_length);
    } catch (const ProtocolError&) {
      // The tree names the refusal (Note [Requests in the common layout]).
      read = read_request_document(std::string_view(body.data(), text_end), limits.max_values,
                                   limits.data_as);
    }
  }
  return parse_infer_request_from_document(std::get<RequestDocument>(read), body, signature,
                                           max_batch, json_length);
}

std::optional<InferRequest> parse_common_infer_request(const std::string& body,
                                                       const ModelSignature& signature,
                                                       int64_t max_batch,
                                                       std::optional<size_t> json_length) {
  if (json_length && *json_length > body.size()) return std::nullopt;
  const DataLimits limits = data_limits(signature, max_batch);
  std::optional<CommonRequest> common =
      read_common_request(std::string_view(body.data(), json_length.value_or(body.size())),
                          limits.max_values, limits.data_as);
  if (!common) return std::nullopt;
  try {
    return infer_request_of(*common, body, signature, max_batch, json_length);
  } catch (const ProtocolError&) {
    return std::nullopt;
  }
}

InferRequest parse_infer_request_from_document(RequestDocument& read, const std::string& body,
                                               const ModelSignature& signature, int64_t max_batch,
                                               std::optional<size_t> json_length) {
  GROVE_CHECK_AS(ProtocolError, !json_length || *json_length <= body.size(),
                 "Inference-Header-Content-Length ", json_length.value_or(0),
                 " is beyond the body's ", body.size(), " bytes");
  const size_t text_end = json_length ? *json_length : body.size();
  size_t binary_at = text_end;  // the next binary tensor's first byte
  const json& document = read.json;
  GROVE_CHECK_AS(ProtocolError, document.is_object(),
                 "request body must be a JSON object with "
                 "\"inputs\"");
  InferRequest result;
  if (auto id = document.find("id"); id != document.end()) {
    GROVE_CHECK_AS(ProtocolError, id->is_string(), "id: expected a string, found ", brief(*id));
    result.id = id->get<std::string>();
  }
  auto inputs = document.find("inputs");
  GROVE_CHECK_AS(ProtocolError, inputs != document.end() && inputs->is_array(),
                 "inputs: missing, or not an array of tensors");
  InputChecks checks(signature, max_batch);
  checks.count(inputs->size());
  Request request;
  request.inputs.resize(signature.inputs.size());
  for (size_t i = 0; i < inputs->size(); ++i) {
    const json& tensor = (*inputs)[i];
    const InputField field{i};
    GROVE_CHECK_AS(ProtocolError, tensor.is_object(), field, ": expected an object");
    auto name = tensor.find("name");
    GROVE_CHECK_AS(ProtocolError, name != tensor.end() && name->is_string(), field,
                   ".name: missing or not a string");
    const size_t k = checks.input(field, name->get<std::string>());
    const RowSpec& spec = signature.inputs[k];
    const InputField where = checks.where(field, k);

    auto datatype = tensor.find("datatype");
    GROVE_CHECK_AS(ProtocolError, datatype != tensor.end() && datatype->is_string(), where,
                   ".datatype: missing or not a string");
    checks.datatype(where, k, datatype->get<std::string>());

    auto shape_json = tensor.find("shape");
    GROVE_CHECK_AS(ProtocolError, shape_json != tensor.end() && shape_json->is_array(), where,
                   ".shape: missing or not an array");
    runtime::Shape shape;
    for (const json& size : *shape_json) {
      GROVE_CHECK_AS(ProtocolError, size.is_number_unsigned() && size.get<uint64_t>() <= (1u << 30),
                     where, ".shape: ", brief(*shape_json), " holds ", brief(size),
                     "; sizes are integers in [0, 2^30]");
      shape.push_back(size.get<int64_t>());
    }
    checks.shape(where, k, shape);

    const int64_t elements = runtime::shape_numel(shape);
    const size_t element_size = runtime::dtype_size(spec.dtype);
    auto parameters = tensor.find("parameters");
    if (parameters != tensor.end() && parameters->is_object() &&
        parameters->contains("binary_data_size")) {
      const json& size = (*parameters)["binary_data_size"];
      GROVE_CHECK_AS(ProtocolError, json_length.has_value(), where,
                     ".parameters.binary_data_size: binary data needs the "
                     "Inference-Header-Content-Length header");
      GROVE_CHECK_AS(ProtocolError, !tensor.contains("data"), where,
                     ": give either data or parameters.binary_data_size, not both");
      const uint64_t expected = static_cast<uint64_t>(elements) * element_size;
      GROVE_CHECK_AS(ProtocolError, size.is_number_unsigned() && size.get<uint64_t>() == expected,
                     where, ".parameters.binary_data_size: ", brief(size), " bytes, but shape ",
                     shape_text(shape), " of ", kserve_datatype(spec.dtype), " holds ", expected);
      GROVE_CHECK_AS(ProtocolError, expected <= body.size() - binary_at, where,
                     ".parameters.binary_data_size: ", expected, " bytes, but only ",
                     body.size() - binary_at, " binary bytes are left in the body");
      request.inputs[k] = rows_from_bytes(
          shape, spec.dtype, reinterpret_cast<const uint8_t*>(body.data()) + binary_at, expected);
      binary_at += expected;
      continue;
    }
    auto data = tensor.find("data");
    GROVE_CHECK_AS(ProtocolError, data != tensor.end() && data->is_array(), where,
                   ".data: missing or not an array");
    InputData flattened;
    InputData* values = i < read.data.size() && read.data[i].read ? &read.data[i] : nullptr;
    if (values == nullptr) {
      flatten(*data, flattened);
      values = &flattened;
    }
    take_data(*values, shape, spec, where, request.inputs[k]);
  }

  result.request = checks.checked(std::move(request));

  GROVE_CHECK_AS(ProtocolError, binary_at == body.size(), body.size() - binary_at,
                 " bytes after the JSON belong to no input's parameters.binary_data_size");
  bool all_binary = false;
  if (auto parameters = document.find("parameters"); parameters != document.end()) {
    GROVE_CHECK_AS(ProtocolError, parameters->is_object(), "parameters: expected an object");
    if (auto flag = parameters->find("binary_data_output"); flag != parameters->end()) {
      GROVE_CHECK_AS(ProtocolError, flag->is_boolean(),
                     "parameters.binary_data_output: expected true or false");
      all_binary = flag->get<bool>();
    }
  }
  if (auto outputs = document.find("outputs"); outputs != document.end()) {
    GROVE_CHECK_AS(ProtocolError, outputs->is_array(), "outputs: expected an array of {\"name\"}");
    for (size_t i = 0; i < outputs->size(); ++i) {
      const json& wanted = (*outputs)[i];
      GROVE_CHECK_AS(ProtocolError,
                     wanted.is_object() && wanted.contains("name") && wanted["name"].is_string(),
                     "outputs[", i, "]: expected {\"name\": ...}");
      const size_t o = requested_output(str_cat("outputs[", i, "]"),
                                        wanted["name"].get<std::string>(), signature);
      result.outputs.push_back(o);
      bool binary = all_binary;
      if (auto parameters = wanted.find("parameters"); parameters != wanted.end()) {
        GROVE_CHECK_AS(ProtocolError, parameters->is_object(), "outputs[", i,
                       "].parameters: expected an object");
        if (auto flag = parameters->find("binary_data"); flag != parameters->end()) {
          GROVE_CHECK_AS(ProtocolError, flag->is_boolean(), "outputs[", i,
                         "].parameters.binary_data: expected true or false");
          binary = flag->get<bool>();
        }
      }
      result.binary.push_back(binary);
    }
  } else {
    for (size_t o = 0; o < signature.outputs.size(); ++o) {
      result.outputs.push_back(o);
      result.binary.push_back(all_binary);
    }
  }
  return result;
}

nlohmann::json model_metadata(const std::string& model_name, const ModelSignature& signature,
                              int64_t max_batch) {
  auto tensors = [](const std::vector<RowSpec>& specs) {
    json list = json::array();
    for (const RowSpec& spec : specs) {
      std::vector<int64_t> shape{-1};
      shape.insert(shape.end(), spec.row_shape.begin(), spec.row_shape.end());
      const char* datatype = kserve_datatype(spec.dtype);
      list.push_back({{"name", spec.name},
                      {"datatype", datatype ? datatype : runtime::dtype_name(spec.dtype)},
                      {"shape", shape}});
    }
    return list;
  };
  return json{{"name", model_name},
              {"versions", {"1"}},
              {"platform", "grove"},
              {"inputs", tensors(signature.inputs)},
              {"outputs", tensors(signature.outputs)},
              {"parameters", {{"max_batch_size", max_batch}}}};
}

std::string json_text(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string error_json(const std::string& message) { return json_text(json{{"error", message}}); }

}  // namespace grove::serving
