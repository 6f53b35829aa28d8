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
// Note [Values across segments]: the steps of a program are split into
// segments at every step that cannot be captured (nonzero, print, elementwise
// work on their data-dependent shapes); each run of capturable steps is one
// segment. Every value lives in a *slot*. A segment's function takes the slots
// it reads but does not define (program inputs or outputs of earlier
// segments, ascending slot order: LoweredSegment::inputs) and returns the
// slots it defines that a later segment or the program's outputs read
// (LoweredSegment::outputs). Running the program is: put the program inputs
// in their slots, call each segment on its input slots, store its outputs,
// drop slots no later segment reads, return the output slots. Because a
// segment's outputs are ordinary tensors, a backend may replace any segment's
// call (e.g. with a graph replay) as long as it returns tensors of the same
// shapes, dtypes and strides. A segment writes in place only into its inputs
// listed in mutated_input_indices; an output that views or updates an input
// is listed in output_aliases_input.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/program.h"
#include "compiler/lowered_function.h"
#include "compiler/ops/op_registry.h"

namespace grove::compiler::lowering {

struct LowerOptions {
  ops::ExecMode mode = ops::ExecMode::kInference;
  // Receives the text of `print` nodes ("<message>: f32[2] [1, 2]"); stderr when empty.
  std::function<void(const std::string&)> print_sink;
};

// What one call launches, in order.
struct KernelReport {
  std::vector<std::string> kernels;  // generated kernels (spec names)
  size_t library_gemms = 0;          // cuBLAS / host GEMM launches
  size_t host_ops = 0;               // nonzero / print steps (synchronizing)
  size_t launches() const { return kernels.size() + library_gemms; }
  // "42 kernels + 33 GEMMs: embedding_add, layer_norm, ..."
  std::string str() const;
};

struct LoweredSegment {
  LoweredFunction function;
  std::vector<int> inputs;   // slot ids (Note [Values across segments])
  std::vector<int> outputs;  // slot ids
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
};

class LoweredProgram {
 public:
  struct State;
  explicit LoweredProgram(std::shared_ptr<const State> state);

  // The whole program: takes every program input in Program::inputs() order
  // (checked: count, shapes, dtypes, devices, contiguity, with errors naming the
  // input) and returns the outputs.
  const LoweredFunction& function() const;
  const std::vector<LoweredSegment>& segments() const;
  // Runs the program calling `segment_calls[i]` for segment i (same signature
  // as segments()[i].function.call). Inputs are checked as in function().
  TensorList run_with(const std::vector<Callable>& segment_calls, const TensorList& inputs) const;

  KernelReport kernel_report() const;
  // Kernel code generation time spent lowering this program (0 when every
  // kernel was already cached).
  double compile_ms() const;
  const ir::Program& program() const;
  // One line per step: "kernel add_gelu  <- fc0" etc., with segment headers.
  std::string describe() const;

 private:
  std::shared_ptr<const State> state_;
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
