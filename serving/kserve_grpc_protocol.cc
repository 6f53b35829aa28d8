#include "serving/kserve_grpc_protocol.h"

#include <cstring>
#include <type_traits>
#include <vector>

namespace grove::serving {
namespace {

using inference::InferTensorContents;

// The typed fields of `contents` that hold values.
std::vector<const char*> typed_fields_given(const InferTensorContents& contents) {
  std::vector<const char*> given;
  if (contents.bool_contents_size() > 0) given.push_back("bool_contents");
  if (contents.int_contents_size() > 0) given.push_back("int_contents");
  if (contents.int64_contents_size() > 0) given.push_back("int64_contents");
  if (contents.uint_contents_size() > 0) given.push_back("uint_contents");
  if (contents.uint64_contents_size() > 0) given.push_back("uint64_contents");
  if (contents.fp32_contents_size() > 0) given.push_back("fp32_contents");
  if (contents.fp64_contents_size() > 0) given.push_back("fp64_contents");
  if (contents.bytes_contents_size() > 0) given.push_back("bytes_contents");
  return given;
}

// Rows of `shape` from a typed field whose element type is the dtype's.
template <typename Values>
HostRows typed_rows(const InputField& where, const char* field, const Values& values,
                    const runtime::Shape& shape, runtime::DType dtype) {
  const int64_t elements = runtime::shape_numel(shape);
  GROVE_CHECK_AS(ProtocolError, values.size() == elements, where, ".contents.", field, ": ",
                 values.size(), " values for shape ", runtime::shape_str(shape), ", which holds ",
                 elements);
  HostRows rows;
  rows.shape = shape;
  rows.dtype = dtype;
  rows.bytes.resize(static_cast<size_t>(elements) * runtime::dtype_size(dtype));
  using Element = std::decay_t<decltype(*values.begin())>;
  if constexpr (std::is_same_v<Element, bool>) {
    for (int i = 0; i < values.size(); ++i) rows.bytes[static_cast<size_t>(i)] = values[i] ? 1 : 0;
  } else {
    static_assert(sizeof(Element) == 4 || sizeof(Element) == 8);
    std::memcpy(rows.bytes.data(), values.data(), rows.bytes.size());
  }
  return rows;
}

// Note [gRPC tensor contents]: the typed form.
HostRows rows_from_contents(const InputField& where, const InferTensorContents& contents,
                            const runtime::Shape& shape, runtime::DType dtype) {
  const char* field = nullptr;
  switch (dtype) {
    case runtime::DType::kF32:
      field = "fp32_contents";
      break;
    case runtime::DType::kF64:
      field = "fp64_contents";
      break;
    case runtime::DType::kI32:
      field = "int_contents";
      break;
    case runtime::DType::kI64:
      field = "int64_contents";
      break;
    case runtime::DType::kBool:
      field = "bool_contents";
      break;
    default:
      throw ProtocolError(str_cat(where, ".contents: ", kserve_datatype(dtype),
                                  " has no typed contents field; give its bytes in "
                                  "raw_input_contents"));
  }
  for (const char* given : typed_fields_given(contents)) {
    GROVE_CHECK_AS(ProtocolError, std::strcmp(given, field) == 0, where,
                   ".contents: ", kserve_datatype(dtype), " values go in ", field, ", found ",
                   given);
  }
  switch (dtype) {
    case runtime::DType::kF32:
      return typed_rows(where, field, contents.fp32_contents(), shape, dtype);
    case runtime::DType::kF64:
      return typed_rows(where, field, contents.fp64_contents(), shape, dtype);
    case runtime::DType::kI32:
      return typed_rows(where, field, contents.int_contents(), shape, dtype);
    case runtime::DType::kI64:
      return typed_rows(where, field, contents.int64_contents(), shape, dtype);
    default:
      return typed_rows(where, field, contents.bool_contents(), shape, dtype);
  }
}

}  // namespace

InferRequest parse_grpc_infer_request(const inference::ModelInferRequest& request,
                                      const ModelSignature& signature, int64_t max_batch) {
  // Note [One set of request checks]; Note [gRPC tensor contents].
  InferRequest result;
  result.id = request.id();
  InputChecks checks(signature, max_batch);
  checks.count(static_cast<size_t>(request.inputs_size()));
  const bool raw = request.raw_input_contents_size() > 0;
  GROVE_CHECK_AS(ProtocolError, !raw || request.raw_input_contents_size() == request.inputs_size(),
                 "raw_input_contents: ", request.raw_input_contents_size(), " entries for ",
                 request.inputs_size(), " inputs; give one per input, in the order of inputs");
  Request given;
  given.inputs.resize(signature.inputs.size());
  for (int i = 0; i < request.inputs_size(); ++i) {
    const inference::ModelInferRequest::InferInputTensor& tensor = request.inputs(i);
    const InputField field{static_cast<size_t>(i)};
    const size_t k = checks.input(field, tensor.name());
    const RowSpec& spec = signature.inputs[k];
    const InputField where = checks.where(field, k);
    checks.datatype(where, k, tensor.datatype());
    const runtime::Shape shape(tensor.shape().begin(), tensor.shape().end());
    checks.shape(where, k, shape);
    if (!raw) {
      given.inputs[k] = rows_from_contents(where, tensor.contents(), shape, spec.dtype);
      continue;
    }
    GROVE_CHECK_AS(ProtocolError, !tensor.has_contents(), where,
                   ".contents: give every input in raw_input_contents or every input in "
                   "contents, not both");
    const std::string& bytes = request.raw_input_contents(i);
    const uint64_t expected =
        static_cast<uint64_t>(runtime::shape_numel(shape)) * runtime::dtype_size(spec.dtype);
    GROVE_CHECK_AS(ProtocolError, bytes.size() == expected, "raw_input_contents[", i, "] (", where,
                   "): ", bytes.size(), " bytes, but shape ", runtime::shape_str(shape), " of ",
                   kserve_datatype(spec.dtype), " holds ", expected);
    given.inputs[k] = rows_from_bytes(shape, spec.dtype,
                                      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  result.request = checks.checked(std::move(given));
  if (request.outputs_size() == 0) {
    for (size_t o = 0; o < signature.outputs.size(); ++o) result.outputs.push_back(o);
  }
  for (int i = 0; i < request.outputs_size(); ++i) {
    result.outputs.push_back(
        requested_output(str_cat("outputs[", i, "]"), request.outputs(i).name(), signature));
  }
  result.binary.assign(result.outputs.size(), true);
  return result;
}

void fill_grpc_infer_response(const std::string& model_name, const InferRequest& request,
                              const ModelSignature& signature, const Response& answer,
                              inference::ModelInferResponse* response) {
  response->set_model_name(model_name);
  response->set_id(request.id);
  for (size_t o : request.outputs) {
    const HostRows& rows = answer.outputs.at(o);
    inference::ModelInferResponse::InferOutputTensor* tensor = response->add_outputs();
    tensor->set_name(signature.outputs.at(o).name);
    const char* datatype = kserve_datatype(rows.dtype);
    tensor->set_datatype(datatype ? datatype : runtime::dtype_name(rows.dtype));
    for (int64_t size : rows.shape) tensor->add_shape(size);
    response->add_raw_output_contents(reinterpret_cast<const char*>(rows.bytes.data()),
                                      rows.bytes.size());
  }
}

void fill_grpc_model_metadata(const std::string& model_name, const ModelSignature& signature,
                              inference::ModelMetadataResponse* response) {
  response->set_name(model_name);
  response->add_versions("1");
  response->set_platform("grove");
  auto add = [](const RowSpec& spec, inference::ModelMetadataResponse::TensorMetadata* tensor) {
    tensor->set_name(spec.name);
    const char* datatype = kserve_datatype(spec.dtype);
    tensor->set_datatype(datatype ? datatype : runtime::dtype_name(spec.dtype));
    tensor->add_shape(-1);
    for (int64_t size : spec.row_shape) tensor->add_shape(size);
  };
  for (const RowSpec& spec : signature.inputs) add(spec, response->add_inputs());
  for (const RowSpec& spec : signature.outputs) add(spec, response->add_outputs());
}

}  // namespace grove::serving
