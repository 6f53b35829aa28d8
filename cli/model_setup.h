// Turning a model file and the command's options into what `grove run` and
// `grove demo` execute: the Program (dims bound, dtype applied, on the chosen
// device), seeded random inputs of the right shapes and dtypes, and the
// training loss when training.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cli/common/flags.h"
#include "compiler/ir/program.h"
#include "compiler/lowered_function.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

namespace grove::cli {

struct ModelSpec {
  std::string path;
  std::map<std::string, int64_t> dims;          // "batch", "seq", ... as bound on the command line
  runtime::DType dtype = runtime::DType::kF32;  // floating values: f32 or bf16
  runtime::Device device;
};

// Which of the model's dims a command lets the command line bind.
enum class BoundDims : uint8_t {
  kSeq,          // --seq (`grove serve`: the server binds the batch per bucket)
  kBatchAndSeq,  // --batch and --seq (`grove run`)
};

// The flags that say which model a command runs and how, one table for every
// command that takes MODEL.json: --device, --dtype, and --batch / --seq.
std::vector<FlagSpec> model_flags(BoundDims dims);
// `flags` after model_flags(dims): a command's whole table.
std::vector<FlagSpec> with_model_flags(BoundDims dims, const std::vector<FlagSpec>& flags);
// The model file (the first positional argument) and the flags of
// model_flags(dims); UsageError naming `command`'s usage or the flag.
ModelSpec parse_model_spec(const std::string& command, const ParsedFlags& args, BoundDims dims);

// Loads the model; throws ModelFormatError (missing file, malformed model,
// unknown dim) or UsageError (a dim the command line binds that the model
// does not declare, naming the flag). With dtype bf16, every f32 input, param
// and buffer of the file becomes bf16.
compiler::ir::Program load_program(const ModelSpec& spec);

// How a model is trained by `--train`: next-token cross entropy for a model
// whose integer input feeds an embedding and whose output is [B, T, V];
// mean squared error against a new `target` input otherwise.
struct TrainingSetup {
  compiler::ir::Program program;  // the model with its loss
  compiler::ir::ValueId loss;
  std::string loss_name;  // "next-token cross entropy", "mean squared error"
};
TrainingSetup add_training_loss(const compiler::ir::Program& model);

// One random tensor per `input` value of `program` (call order), from `seed`:
// floats uniform in [-1, 1), integers in [0, bound) where bound is the
// embedding table's row count or the class count the input indexes (2 when
// the model says nothing), booleans fair coins.
compiler::TensorList random_inputs(const compiler::ir::Program& program, runtime::Device device,
                                   uint64_t seed);

// "f32[1, 32, 512]" for each output, comma separated.
std::string describe_outputs(const compiler::TensorList& outputs);

}  // namespace grove::cli
