// Helpers for lowering tests: seeded random inputs for a Program, moving
// reference HostTensors to and from devices, and running a program both
// through lower() on a device and through the float64 reference.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "compiler/ir/program.h"
#include "compiler/lowering/lower.h"
#include "compiler/reference/reference_interpreter.h"
#include "runtime/tensor.h"

namespace grove::testing {

using compiler::reference::HostTensor;
using compiler::reference::HostTensorList;

// `value` as it reads back after a store to `dtype`.
double round_to(double value, runtime::DType dtype);
runtime::Tensor to_device(const HostTensor& host, runtime::Device device);
HostTensor to_host(const runtime::Tensor& tensor);

struct InputRanges {
  double float_low = -2.0, float_high = 2.0;
  int64_t int_low = 0, int_high = 4;  // [low, high)
};

// Random values for every `input` of `program` and the initial values of its
// params and buffers (Program::inputs() order), rounded to each dtype.
HostTensorList random_inputs(const compiler::ir::Program& program, uint32_t seed,
                             const InputRanges& ranges = {});

struct Tolerance {
  double rtol = 1e-4, atol = 1e-5;
};
Tolerance tolerance_for(runtime::DType dtype);

// Whether every element of `actual` is within tolerance of `expected`
// (NaNs equal). On failure, `why` says which element.
bool all_close(const HostTensor& actual, const HostTensor& expected, const Tolerance& tolerance,
               std::string* why);

// Runs `lowered` on `device` with `inputs` and the reference on the same
// inputs; checks every output (and, with `check_state`, every mutated input).
void expect_matches_reference(const compiler::ir::Program& program, const HostTensorList& inputs,
                              runtime::Device device, const Tolerance& tolerance,
                              const std::string& label,
                              const compiler::lowering::LowerOptions& options = {});

}  // namespace grove::testing
