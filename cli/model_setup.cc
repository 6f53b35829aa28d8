#include "cli/model_setup.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/arguments.h"
#include "cli/paths.h"
#include "compiler/model_format/model_json.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "training/losses.h"

namespace grove::cli {
namespace {

using compiler::ir::Program;
using compiler::ir::ValueId;
using compiler::ir::ValueKind;
using runtime::DType;

std::string read_file(const std::string& path) {
  try {
    return compiler::model_format::read_model_file(path);
  } catch (const ModelFormatError& error) {
    throw ModelFormatError(str_cat(error.what(), " (e.g. benchmarks/models/mlp16x512.json)"));
  }
}

// Rewrites the dtype of every f32 input, param, buffer and `full` constant;
// the other nodes infer theirs.
std::string with_dtype(const std::string& text, DType dtype, const std::string& path) {
  nlohmann::json model;
  try {
    model = compiler::model_format::parse_model_json(text);  // depth-bounded
  } catch (const ModelFormatError& error) {
    throw ModelFormatError(str_cat("model file '", path, "': ", error.what()));
  }
  if (!model.is_object()) return text;  // the loader reports the shape of the problem
  for (const char* section : {"inputs", "params", "buffers"}) {
    auto entries = model.find(section);
    if (entries == model.end() || !entries->is_array()) continue;
    for (auto& entry : *entries) {
      // A dtype that is not a string is left for the loader to name (the
      // model fuzzer found value("dtype", "") throwing nlohmann's type_error).
      if (!entry.is_object()) continue;
      auto found = entry.find("dtype");
      if (found != entry.end() && found->is_string() && *found == "f32") {
        *found = runtime::dtype_name(dtype);
      }
    }
  }
  // Constants made by `full` default to f32 and would then meet bf16 operands
  // (gpt4x256 --dtype bf16 failed on its attention scale); they follow too.
  auto nodes = model.find("nodes");
  if (nodes != model.end() && nodes->is_array()) {
    for (auto& node : *nodes) {
      if (!node.is_object() || node.value("op", nlohmann::json()) != "full") continue;
      auto attrs = node.find("attrs");
      if (attrs == node.end()) attrs = node.emplace("attrs", nlohmann::json::object()).first;
      if (!attrs->is_object()) continue;
      auto found = attrs->find("dtype");
      if (found == attrs->end()) {
        (*attrs)["dtype"] = runtime::dtype_name(dtype);
      } else if (found->is_string() && *found == "f32") {
        *found = runtime::dtype_name(dtype);
      }
    }
  }
  return model.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The exclusive upper bound of the integer values `input` may hold.
int64_t index_bound(const Program& program, ValueId input) {
  for (const auto& node : program.nodes()) {
    if (node.operands.size() < 2 || node.operands[1] != input) continue;
    const auto& first = program.value(node.operands[0]).type.shape;
    if (node.op == "embedding" && !first.empty()) return first.front();
    if (node.op == "cross_entropy" && !first.empty()) return first.back();
  }
  return 2;
}

void fill_random(std::vector<uint8_t>& bytes, DType dtype, int64_t bound, std::mt19937_64& rng) {
  const size_t size = runtime::dtype_size(dtype);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (size_t at = 0; at < bytes.size(); at += size) {
    double value = 0;
    if (runtime::is_floating(dtype)) {
      value = uniform(rng);
    } else if (dtype == DType::kBool) {
      value = static_cast<double>(rng() & 1U);
    } else {
      value = static_cast<double>(rng() % static_cast<uint64_t>(bound));
    }
    runtime::store_element(bytes.data() + at, dtype, value);
  }
}

}  // namespace

std::vector<FlagSpec> model_flags(BoundDims dims) {
  std::vector<FlagSpec> flags = {
      {"--device", "DEVICE", "auto (default: cuda when present, else sim), cuda or sim"},
      {"--dtype", "TYPE", "f32 (default) or bf16 for the model's floating values"},
  };
  if (dims == BoundDims::kBatchAndSeq) {
    flags.push_back({"--batch", "N", "bind the model's 'batch' dimension"});
  }
  flags.push_back({"--seq", "T", "bind the model's 'seq' dimension"});
  return flags;
}

std::vector<FlagSpec> with_model_flags(BoundDims dims, const std::vector<FlagSpec>& flags) {
  std::vector<FlagSpec> all = model_flags(dims);
  all.insert(all.end(), flags.begin(), flags.end());
  return all;
}

ModelSpec parse_model_spec(const std::string& command, const ParsedFlags& args, BoundDims dims) {
  if (args.positional().empty()) {
    throw UsageError(
        str_cat(command, ": missing the model file (grove ", command, " MODEL.json [options])"));
  }
  ModelSpec spec;
  spec.path = args.positional().front();
  spec.device = parse_device_choice(args.value("--device", "auto"));
  if (dims == BoundDims::kBatchAndSeq && args.has("--batch")) {
    spec.dims["batch"] = parse_positive_int("--batch", args.value("--batch"), 1 << 20);
  }
  if (args.has("--seq")) {
    spec.dims["seq"] = parse_positive_int("--seq", args.value("--seq"), 1 << 20);
  }
  std::string dtype = args.value("--dtype", "f32");
  if (dtype != "f32" && dtype != "bf16") {
    throw UsageError(str_cat("--dtype expects f32 or bf16, found '", dtype, "'"));
  }
  spec.dtype = runtime::parse_dtype(dtype);
  return spec;
}

Program load_program(const ModelSpec& spec) {
  std::string text = read_file(resolve_input_path(spec.path));
  if (spec.dtype != DType::kF32) text = with_dtype(text, spec.dtype, spec.path);
  // Name the flag when the command line binds a dim the model does not have.
  nlohmann::json declared = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!declared.is_discarded() && declared.is_object()) {
    auto dims = declared.find("dims");
    for (const auto& [dim, value] : spec.dims) {
      if (dims == declared.end() || !dims->is_object() || !dims->contains(dim)) {
        throw UsageError(str_cat("--", dim, " ", value, ": model '", spec.path,
                                 "' has no dimension '", dim, "'",
                                 dims != declared.end() ? "; it declares " + dims->dump() : ""));
      }
    }
  }
  try {
    return compiler::model_format::load_model(text, spec.dims, spec.device);
  } catch (const ModelFormatError& error) {
    throw ModelFormatError(str_cat("model file '", spec.path, "': ", error.what()));
  }
}

TrainingSetup add_training_loss(const Program& model) {
  GROVE_CHECK(model.outputs().size() == 1, "--train: model '", model.name(), "' has ",
              model.outputs().size(),
              " outputs; grove trains models with exactly one output (the prediction or logits)");
  TrainingSetup setup{model, compiler::ir::kNoValue, ""};
  const ValueId output = setup.program.outputs().front();
  const auto& output_type = setup.program.value(output).type;
  for (ValueId input : setup.program.inputs_of_kind(ValueKind::kInput)) {
    const auto& type = setup.program.value(input).type;
    bool tokens = (type.dtype == DType::kI64 || type.dtype == DType::kI32) &&
                  type.shape.size() == 2 && output_type.shape.size() == 3 &&
                  output_type.shape[0] == type.shape[0] && output_type.shape[1] == type.shape[1];
    if (tokens) {
      setup.loss = training::add_next_token_loss(setup.program, output, input);
      setup.loss_name = "next-token cross entropy";
      return setup;
    }
  }
  setup.loss = training::add_mse_loss(setup.program, output);
  setup.loss_name = "mean squared error";
  return setup;
}

compiler::TensorList random_inputs(const Program& program, runtime::Device device, uint64_t seed) {
  // Each input is allocated on the device first and filled a chunk at a time,
  // so an input too large for the device fails naming it before any host
  // memory is spent (Note [Parameters made in chunks], compiler/backends/compile.cc).
  constexpr size_t kChunkBytes = size_t{8} << 20;
  std::mt19937_64 rng(seed);
  compiler::TensorList inputs;
  for (ValueId id : program.inputs_of_kind(ValueKind::kInput)) {
    const compiler::ir::Value& value = program.value(id);
    runtime::Tensor tensor;
    auto what = [&] {
      return str_cat("the random value of input '", value.name, "' (", value.type.str(),
                     ") of model '", program.name(), "'");
    };
    try {
      tensor = runtime::Tensor::empty(value.type.shape, value.type.dtype, device);
    } catch (const OutOfMemoryError& error) {
      throw OutOfMemoryError(str_cat(what(), ": ", error.what(), "; lower --batch or --seq"));
    } catch (const ShapeError& error) {
      throw ShapeError(str_cat(what(), ": ", error.what()));
    }
    const size_t element_size = runtime::dtype_size(value.type.dtype);
    const int64_t numel = tensor.numel();
    const int64_t chunk = static_cast<int64_t>(kChunkBytes / element_size);
    runtime::Tensor flat = tensor.view({numel});
    std::vector<uint8_t> bytes;
    for (int64_t first = 0; first < numel; first += chunk) {
      const int64_t count = std::min(chunk, numel - first);
      bytes.resize(static_cast<size_t>(count) * element_size);
      fill_random(bytes, value.type.dtype, index_bound(program, id), rng);
      flat.slice(0, first, first + count).copy_from_host(bytes.data());
    }
    inputs.push_back(tensor);
  }
  return inputs;
}

std::string describe_outputs(const compiler::TensorList& outputs) {
  std::string text;
  for (const runtime::Tensor& output : outputs) {
    text += (text.empty() ? "" : ", ") + std::string(runtime::dtype_name(output.dtype())) +
            runtime::shape_str(output.shape());
  }
  return text;
}

}  // namespace grove::cli
