// Tensors that `grove` commands read from and write to safetensors files:
// a model's weights (--weights), its inputs (--inputs) and the outputs of its
// last call (--save-outputs), each named as the model's JSON names them.
#pragma once

#include <string>
#include <vector>

#include "compiler/backends/compile.h"
#include "compiler/ir/program.h"
#include "compiler/lowered_function.h"
#include "weights/safetensors.h"

namespace grove::cli {

// The model's `input` values from `path`: one tensor per input, named, shaped
// and typed like it (WeightsFormatError naming the first mismatch), on
// `device`.
compiler::TensorList inputs_from_file(const compiler::ir::Program& program, runtime::Device device,
                                      const std::string& path);

// Writes the program's outputs (as host bytes, in output order) to `path`,
// each under its value name; an output that repeats a name is written once.
void write_outputs_file(const compiler::ir::Program& program,
                        const std::vector<std::vector<uint8_t>>& output_bytes,
                        const std::string& path);

// "12 tensors, 16.0 MiB".
std::string weights_summary(const weights::SafetensorsFile& file);

}  // namespace grove::cli
