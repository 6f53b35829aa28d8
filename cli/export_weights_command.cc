// `grove export-weights MODEL.json OUT.safetensors`: the model's params and
// buffers as its initializers make them, in a safetensors file that
// `grove run --weights` and `grove serve --weights` read back (and that shows
// a PyTorch user which names, shapes and dtypes grove expects).
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/common/json_report.h"
#include "cli/model_setup.h"
#include "cli/terminal_text.h"
#include "weights/model_weights.h"

namespace grove::cli {

const CommandSpec& export_weights_command_spec() {
  static const CommandSpec spec{
      "grove",
      "export-weights",
      "MODEL.json OUT.safetensors",
      "write a model's initial params and buffers to a safetensors file",
      "Loads MODEL.json, makes its params and buffers from their initializers (as grove run\n"
      "does) and writes them to OUT.safetensors under the model's names, with the model's\n"
      "shapes and dtypes: the layout grove run --weights and grove serve --weights expect.",
      {
          {"--device", "DEVICE", "where the initializers run: auto (default), cuda or sim"},
          {"--batch", "N", "bind the model's 'batch' dimension (when a param's shape uses it)"},
          {"--seq", "T", "bind the model's 'seq' dimension (when a param's shape uses it)"},
          {"--dtype", "TYPE", "f32 (default) or bf16 for the model's floating values"},
      }};
  return spec;
}

int export_weights_command(const std::vector<std::string>& args) {
  ParsedFlags parsed = parse_flags(export_weights_command_spec(), args);
  if (parsed.help_requested()) {
    std::fputs(help_text(export_weights_command_spec()).c_str(), stdout);
    return 0;
  }
  if (parsed.positional().size() != 2) {
    throw UsageError(
        "export-weights: expected MODEL.json OUT.safetensors (grove export-weights MODEL.json "
        "OUT.safetensors)");
  }
  ModelSpec spec;
  spec.path = parsed.positional()[0];
  const std::string out = parsed.positional()[1];
  spec.device = parse_device_choice(parsed.value("--device", "auto"));
  for (const char* dim : {"batch", "seq"}) {
    const std::string flag = str_cat("--", dim);
    if (parsed.has(flag)) spec.dims[dim] = parse_positive_int(flag, parsed.value(flag), 1 << 20);
  }
  std::string dtype = parsed.value("--dtype", "f32");
  if (dtype != "f32" && dtype != "bf16") {
    throw UsageError(str_cat("--dtype expects f32 or bf16, found '", dtype, "'"));
  }
  spec.dtype = runtime::parse_dtype(dtype);
  std::error_code same_error;
  if (std::filesystem::equivalent(out, spec.path, same_error)) {
    throw UsageError(str_cat("export-weights: ", out,
                             " is the model file itself; writing there would destroy the model"));
  }
  check_output_path("OUT.safetensors", out);
  compiler::ir::Program program = load_program(spec);
  std::vector<weights::TensorToWrite> tensors = weights::initial_weights(program);
  uint64_t bytes = 0;
  for (const auto& tensor : tensors) bytes += tensor.bytes.size();
  weights::write_safetensors(out, tensors,
                             {{"producer", "grove export-weights"}, {"model", program.name()}});
  std::printf("wrote %zu tensors (%llu bytes) of %s to %s\n", tensors.size(),
              static_cast<unsigned long long>(bytes), printable(program.name()).c_str(),
              printable(out).c_str());
  return 0;
}

}  // namespace grove::cli
