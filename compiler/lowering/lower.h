// lower(): a Program becomes a LoweredProgram, the compiler's executable form:
// the whole program as one compiler::LoweredFunction (what the "eager" backend
// runs), the same work split into segment functions (what the "cudagraphs"
// backend captures piecewise), and a report of the kernels one call launches.
//
// API summary:
//   LoweredProgram lowered = lower(program, {ExecMode::kInference});
//   TensorList outputs = lowered.function().call(inputs);  // Program::inputs() order
//   lowered.segments()[i].function                         // one segment
//   lowered.run_with(segment_calls, inputs)                 // the whole, via other segment calls
//   lowered.kernel_report()                                 // names, GEMMs, launches per call
//
// The program it returns is declared in compiler/lowered_program.h (with
// Note [Values across segments]): what backends see of the compiler.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/program.h"
#include "compiler/lowered_function.h"
#include "compiler/lowered_program.h"
#include "compiler/lowering/small_m_gemm_mode.h"
#include "compiler/ops/op_registry.h"

namespace grove::compiler::lowering {

struct LowerOptions {
  ops::ExecMode mode = ops::ExecMode::kInference;
  // Receives the text of `print` nodes ("<message>: f32[2] [1, 2]"); stderr when empty.
  std::function<void(const std::string&)> print_sink;
  // This compile's mode (Note [Small-M GEMM selection]); none: GROVE_SMALL_M_GEMM.
  std::optional<SmallMGemmMode> small_m_gemm;
  // ScheduleOptions::sequence_attention (tests of the generated attention kernel).
  bool sequence_attention = true;
  // ScheduleOptions::gemm_search (compile option gemm_search).
  bool gemm_search = false;
  // ScheduleOptions::sibling_gemms (compile option sibling_gemms).
  bool sibling_gemms = false;
};

// Throws grove::Error naming the node when the program cannot be lowered.
LoweredProgram lower(const ir::Program& program, const LowerOptions& options = {});

// Checks `inputs` against `program`'s inputs (Program::inputs() order); errors
// (grove::Error, ShapeError, DTypeError, DeviceError) name the input, what was
// expected and what was found. `what` prefixes the message. Every input must
// be contiguous unless `written_inputs` (per input: the program writes it) says
// it is a per-call input the program only reads: such an input may have any
// layout, and a lowered program runs on a contiguous copy of it.
//
// Note [Strided inputs]
// Compiled kernels index their operands as contiguous (strides are baked in).
// A per-call input of another layout (expanded with stride 0, transposed,
// sliced) is copied once per call into a contiguous tensor by the runtime's
// strided copy kernel, in stream order, before any segment runs, so eager and
// cudagraphs see the same values (under cudagraphs the copy is a new tensor
// each call, which the tree copies into its placeholder). An input the
// program writes in place, and a param or buffer, must be contiguous: writing
// into a copy would lose the write. Contiguous inputs take the cheap path
// (Note [Cheap input checks]) and are never copied. Tests:
// Lowering.ExpandedAndTransposedInputsGiveTheContiguousResults,
// BadCallInput.NonContiguousAndExpandedInputsGiveTheResultsOfTheirContiguousCopies.
void check_program_inputs(const ir::Program& program, const TensorList& inputs,
                          const std::string& what,
                          const std::vector<bool>* written_inputs = nullptr);

}  // namespace grove::compiler::lowering
