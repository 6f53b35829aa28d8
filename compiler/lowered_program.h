// LoweredProgram is the compiler's executable form of a Program, as execution
// backends see it: the whole program as one LoweredFunction (what "eager"
// runs), the same work split into segment functions (what "cudagraphs"
// captures piecewise), and a report of the kernels one call launches. The
// compiler makes one with lowering::lower() (compiler/lowering/lower.h, the
// compiler's internals); a backend receives it through
// ExecutionBackend::prepare and includes only this header.
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

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/program.h"
#include "compiler/lowered_function.h"

namespace grove::compiler::lowering {

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

// Who checks the inputs of a call of a lowered program.
//
// Note [One input check per call]
// A call through the door is checked once, at the door: CompiledModel::
// operator() checks the inputs it is given (count, device, dtype, shape, with
// errors naming the input) and holds its params and buffers, right by
// construction, so the backend's callable (ExecutionBackend::prepare, called
// only by the door) runs the lowered program with kCheckedByDoor: only the
// layout is looked at (a strided input takes Note [Strided inputs]' path,
// which words its own errors). Direct callers of a lowered program get the
// full check (Note [Cheap input checks]). A caller that feeds the same
// tensors again and again (a server's bucket inputs) binds them once
// (CompiledModel::bind_inputs, which checks them) and calls with the
// BoundInputs, which checks nothing again; so a served request is checked
// once, where it enters the server (Note [Requests checked once]). Tests:
// compile_test.cc (the door's errors, bound inputs), BadCallInput.* (the door's
// errors, and strided inputs through the door on both backends),
// segments_test.cc (a lowered program's own errors).
enum class InputCheck {
  kHere,           // shapes, dtypes, devices and layout, errors naming the input
  kCheckedByDoor,  // CompiledModel::operator() checked them; layout only
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
  TensorList run_with(const std::vector<Callable>& segment_calls, const TensorList& inputs,
                      InputCheck check = InputCheck::kHere) const;
  // function().call(inputs), the inputs checked as `check` says.
  TensorList run(const TensorList& inputs, InputCheck check) const;

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

}  // namespace grove::compiler::lowering
