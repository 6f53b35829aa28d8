#include "weights/model_weights.h"

#include <algorithm>

#include "runtime/tensor.h"

namespace grove::weights {
namespace {

bool is_grove_state(const std::string& name) { return name.rfind("grove.", 0) == 0; }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

std::vector<std::string> weight_names(const compiler::ir::Program& program) {
  std::vector<std::string> names;
  for (compiler::ir::ValueId id : program.inputs()) {
    const compiler::ir::Value& value = program.value(id);
    if (value.is_persistent() && !is_grove_state(value.name)) names.push_back(value.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

void check_weights(const compiler::ir::Program& program, const SafetensorsFile& file) {
  // Note [Weights match the model exactly].
  const std::vector<std::string> needed = weight_names(program);
  const std::string model = str_cat("model '", program.name(), "'");
  for (const std::string& name : needed) {
    const SafetensorsEntry* entry = file.find(name);
    GROVE_CHECK_AS(WeightsFormatError, entry != nullptr, "weights file '", file.path(),
                   "' lacks tensor '", name, "', which ", model, " needs (", file.entries().size(),
                   " tensors in the file, ", needed.size(), " in the model)");
    const compiler::ir::Value& value = program.value(*program.find_value(name));
    std::vector<int64_t> shape(value.type.shape.begin(), value.type.shape.end());
    GROVE_CHECK_AS(WeightsFormatError, entry->shape == shape, "weights file '", file.path(),
                   "', tensor '", name, "': shape ", shape_text(entry->shape), " but ", model,
                   " has ", shape_text(shape));
    GROVE_CHECK_AS(WeightsFormatError, entry->dtype == value.type.dtype, "weights file '",
                   file.path(), "', tensor '", name, "': dtype ", entry->dtype_name, " but ", model,
                   " has ", runtime::dtype_name(value.type.dtype), " (",
                   safetensors_dtype_name(value.type.dtype), "); convert the file");
  }
  for (const SafetensorsEntry& entry : file.entries()) {
    GROVE_CHECK_AS(WeightsFormatError, std::binary_search(needed.begin(), needed.end(), entry.name),
                   "weights file '", file.path(), "' holds tensor '", entry.name, "', which ",
                   model, " has no param or buffer for; is it the weights of another model?");
  }
}

uint64_t load_weights(const compiler::backends::CompiledModel& model, const SafetensorsFile& file) {
  check_weights(model.program(), file);
  uint64_t copied = 0;
  for (const std::string& name : weight_names(model.program())) {
    const SafetensorsEntry& entry = file.entry(name);
    runtime::Tensor state = model.state(name);
    if (entry.nbytes() == 0) continue;
    state.copy_from_host(file.bytes(entry).data());
    copied += entry.nbytes();
  }
  return copied;
}

namespace {

TensorToWrite to_write(const std::string& name, const runtime::Tensor& tensor) {
  TensorToWrite result;
  result.name = name;
  result.dtype = tensor.dtype();
  result.shape.assign(tensor.shape().begin(), tensor.shape().end());
  result.bytes = tensor.to_host_bytes();
  return result;
}

}  // namespace

std::vector<TensorToWrite> weights_of(const compiler::backends::CompiledModel& model) {
  std::vector<TensorToWrite> tensors;
  for (const std::string& name : weight_names(model.program())) {
    tensors.push_back(to_write(name, model.state(name)));
  }
  return tensors;
}

std::vector<TensorToWrite> initial_weights(const compiler::ir::Program& program) {
  std::vector<TensorToWrite> tensors;
  for (const std::string& name : weight_names(program)) {
    const compiler::ir::Value& value = program.value(*program.find_value(name));
    tensors.push_back(to_write(name, compiler::backends::initial_tensor(value, program.device())));
  }
  return tensors;
}

}  // namespace grove::weights
