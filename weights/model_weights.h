// A compiled model's weights as a safetensors file: load_weights() checks a
// file against the model's params and buffers and copies it into them;
// weights_of() reads them back out (for `grove export-weights`).
//
//   SafetensorsFile file = SafetensorsFile::open("mlp.safetensors");
//   CompiledModel model = compile(program, {.backend = "cudagraphs"});
//   load_weights(model, file);
//
// Note [Weights match the model exactly]
// A weights file holds exactly the model's params and buffers (the names of
// its JSON, as a PyTorch state_dict names them), each with the model's shape
// and dtype; grove's own generator buffers ("grove.*", Note [Implicit
// generator]) are not weights and are neither read nor written. Everything is
// checked before anything is copied, so a mismatch leaves the model as it
// was, and the error names the first mismatch in name order: a tensor the
// model needs and the file lacks, one the file has and the model does not,
// or a shape or dtype that differs. Each tensor is copied to the device once,
// straight from the file's mapping. Tests: ModelWeights.* in
// tests/weights/model_weights_test.cc.
#pragma once

#include <string>
#include <vector>

#include "compiler/backends/compile.h"
#include "weights/safetensors.h"

namespace grove::weights {

// The names weights files hold for `program`: its params and buffers, in name
// order, without grove's own state.
std::vector<std::string> weight_names(const compiler::ir::Program& program);

// Checks `file` against `program`'s params and buffers; WeightsFormatError
// naming the first mismatch (Note [Weights match the model exactly]).
void check_weights(const compiler::ir::Program& program, const SafetensorsFile& file);

// check_weights(), then copies every tensor into the model's state on its
// device. Returns the bytes copied.
uint64_t load_weights(const compiler::backends::CompiledModel& model, const SafetensorsFile& file);

// The model's params and buffers as tensors to write (their current values).
std::vector<TensorToWrite> weights_of(const compiler::backends::CompiledModel& model);
// The program's params and buffers as their initializers make them (made on
// the program's device), without compiling it.
std::vector<TensorToWrite> initial_weights(const compiler::ir::Program& program);

}  // namespace grove::weights
