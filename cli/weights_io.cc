#include "cli/weights_io.h"

#include <set>

#include "cli/common/table.h"

namespace grove::cli {

using weights::SafetensorsEntry;
using weights::SafetensorsFile;
using weights::TensorToWrite;
using weights::WeightsFormatError;

compiler::TensorList inputs_from_file(const compiler::ir::Program& program, runtime::Device device,
                                      const std::string& path) {
  SafetensorsFile file = SafetensorsFile::open(path);
  compiler::TensorList inputs;
  std::set<std::string> used;
  for (compiler::ir::ValueId id : program.inputs_of_kind(compiler::ir::ValueKind::kInput)) {
    const compiler::ir::Value& value = program.value(id);
    const SafetensorsEntry& entry = file.entry(value.name);
    std::vector<int64_t> shape(value.type.shape.begin(), value.type.shape.end());
    GROVE_CHECK_AS(WeightsFormatError, entry.shape == shape && entry.dtype == value.type.dtype,
                   "inputs file '", path, "', tensor '", value.name, "': ", entry.dtype_name,
                   runtime::shape_str(runtime::Shape(entry.shape)), " but the model's input is ",
                   runtime::dtype_name(value.type.dtype), runtime::shape_str(value.type.shape),
                   " (bind --batch/--seq to match the file)");
    inputs.push_back(runtime::Tensor::from_host(file.bytes(entry).data(), value.type.shape,
                                                value.type.dtype, device));
    used.insert(value.name);
  }
  for (const SafetensorsEntry& entry : file.entries()) {
    GROVE_CHECK_AS(WeightsFormatError, used.count(entry.name) != 0, "inputs file '", path,
                   "' holds tensor '", entry.name, "', which is not an input of model '",
                   program.name(), "'");
  }
  return inputs;
}

void write_outputs_file(const compiler::ir::Program& program,
                        const std::vector<std::vector<uint8_t>>& output_bytes,
                        const std::string& path) {
  const std::vector<compiler::ir::ValueId>& outputs = program.outputs();
  GROVE_CHECK(outputs.size() == output_bytes.size(), "write_outputs_file: ", output_bytes.size(),
              " results for ", outputs.size(), " outputs of model '", program.name(), "'");
  std::vector<TensorToWrite> tensors;
  std::set<std::string> written;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const compiler::ir::Value& value = program.value(outputs[i]);
    if (!written.insert(value.name).second) continue;
    tensors.push_back({value.name, value.type.dtype,
                       std::vector<int64_t>(value.type.shape.begin(), value.type.shape.end()),
                       output_bytes[i]});
  }
  weights::write_safetensors(path, tensors, {{"producer", "grove run"}});
}

std::string weights_summary(const SafetensorsFile& file) {
  uint64_t bytes = 0;
  for (const SafetensorsEntry& entry : file.entries()) bytes += entry.nbytes();
  return str_cat(file.entries().size(), " tensors, ",
                 format_fixed(static_cast<double>(bytes) / double(1 << 20), 1), " MiB");
}

}  // namespace grove::cli
