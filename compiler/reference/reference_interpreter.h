// The float64 reference interpreter: runs a Program on the host, computing
// every op in double precision, as the oracle the kernels are tested against.
// Values are HostTensors (shape + dtype + doubles); results are rounded to
// their dtype where the dtype is narrower (integers truncate, bool is 0/1,
// bf16/f32 values are *not* rounded: the oracle stays in float64).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/ir/program.h"

namespace grove::compiler::reference {

struct HostTensor {
  ir::Shape shape;
  ir::DType dtype = ir::DType::kF32;
  std::vector<double> data;  // row-major, shape_numel(shape) elements

  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  double at(const std::vector<int64_t>& index) const;  // for tests
  static HostTensor scalar(double value, ir::DType dtype = ir::DType::kF32);
};

using HostTensorList = std::vector<HostTensor>;

struct ReferenceOptions {
  // Receives the text of every `print` node ("<message>: <values>"); stderr if empty.
  std::function<void(const std::string&)> print_sink;
};

// The initial values of every param and buffer of `program`, indexed like
// program.inputs(); entries for kInput are left empty.
HostTensorList initial_state(const ir::Program& program);

// Runs `program` on `inputs` (one per program.inputs(), shapes and dtypes
// checked, errors naming the input). Returns the outputs.
HostTensorList reference_run(const ir::Program& program, const HostTensorList& inputs,
                             const ReferenceOptions& options = {});
// As reference_run, and writes the new contents of mutated inputs (params and
// buffers updated by copy_into / optimizer ops) back into `inputs`.
HostTensorList reference_run_in_place(const ir::Program& program, HostTensorList& inputs,
                                      const ReferenceOptions& options = {});

}  // namespace grove::compiler::reference
