#include "serving/model_signature.h"

namespace grove::serving {
namespace {

using compiler::ir::Program;
using compiler::ir::ValueId;

RowSpec row_spec(const Program& program, ValueId id, int64_t batch, const char* role) {
  const compiler::ir::Value& value = program.value(id);
  const runtime::Shape& shape = value.type.shape;
  GROVE_CHECK_AS(ConfigError, !shape.empty() && shape.front() == batch, "served model '",
                 program.name(), "': ", role, " '", value.name, "' has shape ",
                 runtime::shape_str(shape), " when built for batch ", batch,
                 "; every input and output must be [batch, ...] (rows along dim 0)");
  RowSpec spec{value.name, runtime::Shape(shape.begin() + 1, shape.end()), value.type.dtype, 0};
  spec.row_bytes =
      static_cast<size_t>(runtime::shape_numel(spec.row_shape)) * runtime::dtype_size(spec.dtype);
  return spec;
}

void check_same_specs(const std::vector<RowSpec>& a, const std::vector<RowSpec>& b,
                      const char* role, const std::string& what) {
  GROVE_CHECK_AS(ConfigError, a.size() == b.size(), what, ": ", b.size(), " ", role,
                 "s where the first bucket has ", a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    GROVE_CHECK_AS(
        ConfigError,
        a[i].name == b[i].name && a[i].row_shape == b[i].row_shape && a[i].dtype == b[i].dtype,
        what, ": ", role, " ", i, " is '", b[i].name, "' ", runtime::dtype_name(b[i].dtype),
        " rows of ", runtime::shape_str(b[i].row_shape), " where the first bucket has '", a[i].name,
        "' ", runtime::dtype_name(a[i].dtype), " rows of ", runtime::shape_str(a[i].row_shape),
        "; the model factory must change only the batch");
  }
}

// "[rows, 512]" for rows of [512], "[rows]" for scalar rows.
std::string rows_shape_str(const runtime::Shape& row_shape) {
  std::string text = "[rows";
  for (int64_t extent : row_shape) text += ", " + std::to_string(extent);
  return text + "]";
}

}  // namespace

ModelSignature ModelSignature::of(const Program& program, int64_t batch) {
  ModelSignature signature;
  for (ValueId id : program.inputs_of_kind(compiler::ir::ValueKind::kInput)) {
    signature.inputs.push_back(row_spec(program, id, batch, "input"));
  }
  GROVE_CHECK_AS(ConfigError, !signature.inputs.empty(), "served model '", program.name(),
                 "' has no `input` value; a server feeds request rows to its inputs");
  for (ValueId id : program.outputs()) {
    signature.outputs.push_back(row_spec(program, id, batch, "output"));
  }
  return signature;
}

void ModelSignature::check_matches(const ModelSignature& other, const std::string& what) const {
  check_same_specs(inputs, other.inputs, "input", what);
  check_same_specs(outputs, other.outputs, "output", what);
}

CheckedRequest ModelSignature::check_request(Request request, int64_t max_batch) const {
  GROVE_CHECK_AS(
      ShapeError, request.inputs.size() == inputs.size(), "request has ", request.inputs.size(),
      " inputs; the model takes ", inputs.size(), " (",
      [&] {
        std::string names;
        for (const RowSpec& spec : inputs) names += (names.empty() ? "" : ", ") + spec.name;
        return names;
      }(),
      "), one HostRows each");
  int64_t rows = request.inputs.front().rows();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const HostRows& given = request.inputs[i];
    const RowSpec& spec = inputs[i];
    GROVE_CHECK_AS(DTypeError, given.dtype == spec.dtype, "request input '", spec.name, "' is ",
                   given.str(), "; the model expects ", runtime::dtype_name(spec.dtype), " rows");
    GROVE_CHECK_AS(ShapeError, !given.shape.empty() && given.row_shape() == spec.row_shape,
                   "request input '", spec.name, "' is ", given.str(), "; the model expects ",
                   rows_shape_str(spec.row_shape));
    GROVE_CHECK_AS(ShapeError, given.rows() >= 1 && given.rows() <= max_batch, "request input '",
                   spec.name, "' has ", given.rows(), " rows; a request carries 1 to ", max_batch,
                   " (ServerConfig::max_batch) rows; split larger requests");
    GROVE_CHECK_AS(ShapeError, given.rows() == rows, "request input '", spec.name, "' has ",
                   given.rows(), " rows but input '", inputs.front().name, "' has ", rows,
                   "; every input of a request carries the same rows");
    GROVE_CHECK_AS(ShapeError, given.bytes.size() == static_cast<size_t>(rows) * spec.row_bytes,
                   "request input '", spec.name, "' (", given.str(), ") holds ", given.bytes.size(),
                   " bytes; its shape needs ", static_cast<size_t>(rows) * spec.row_bytes);
  }
  count_request_check();
  return CheckedRequest(std::move(request), rows);
}

}  // namespace grove::serving
