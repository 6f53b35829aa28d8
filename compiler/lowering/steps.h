// The scheduled form of a lowered program: slots (one per value, plus
// temporaries) with their static layouts, and the steps one call executes in
// order. Built by schedule_program (scheduler.h), run by run_steps
// (executor.h).
#pragma once

#include <string>
#include <vector>

#include "compiler/codegen/kernel_compiler.h"
#include "compiler/codegen/kernel_spec.h"
#include "compiler/lowering/layout.h"
#include "runtime/blas.h"
#include "runtime/dtype.h"

namespace grove::compiler::lowering {

// Static facts about one slot (Note [Static layouts]).
struct SlotInfo {
  std::string name;
  runtime::DType dtype = runtime::DType::kF32;
  Layout layout;         // relative to the root slot's element 0
  int root = -1;         // the slot whose tensor holds the storage (itself for allocations)
  bool dynamic = false;  // shape known only at run time (after nonzero)
};

struct KernelLaunch {
  codegen::KernelSpec spec;
  codegen::CompiledKernel kernel;
  std::vector<int> input_slots;         // one per spec input; pointer = the slot's element 0
  std::vector<int> output_slots;        // one per spec output
  std::vector<int64_t> output_offsets;  // elements past the output slot's element 0
};

// One library GEMM (or strided batch); pointers are filled in per call.
struct GemmCall {
  int64_t a_offset = 0, b_offset = 0, c_offset = 0;  // elements past each slot's element 0
};

struct GemmLaunch {
  int a_slot = -1, b_slot = -1, c_slot = -1;
  int bias_slot = -1;  // with args.epilogue (Note [GEMM epilogues in lowering])
  // kBiasGeluAux: the pre-activation it writes; kDGelu: gelu's input it reads
  // (contiguous, like C).
  int aux_slot = -1;
  int bias_grad_slot = -1;  // with kBiasGradA: the row sums of op(A) (contiguous)
  runtime::GemmArgs args;   // row-major; a, b, c, bias, aux null
  // With a kBias epilogue: the exact gelu after the bias, which only grove's
  // small-M kernel applies (Note [Exact gelu in the small-M GEMM]).
  bool exact_gelu = false;
  std::vector<GemmCall> calls;
  // The slots the launch writes: C and its epilogue's extra outputs.
  std::vector<int> written_slots() const {
    std::vector<int> slots = {c_slot};
    if (aux_slot >= 0 && args.epilogue == runtime::GemmEpilogue::kBiasGeluAux) {
      slots.push_back(aux_slot);
    }
    if (bias_grad_slot >= 0) slots.push_back(bias_grad_slot);
    return slots;
  }
};

enum class StepKind : uint8_t {
  kKernel,              // a generated kernel
  kGemm,                // library GEMMs (cuBLAS on cuda, the host GEMM kernel on sim/cpu)
  kView,                // a strided alias of another slot: no work
  kAlias,               // the result is the source tensor itself (in-place results, print)
  kNonzero,             // host: synchronizes, reads the operand, makes the result
  kPrint,               // host: synchronizes, prints the operand
  kDynamicElementwise,  // an elementwise node over a data-dependent shape (compiled at call)
  kLaunch               // an op's runtime launch hook (OpDef::launch: collectives), in place
};

struct Step {
  StepKind kind = StepKind::kKernel;
  std::string node_name;  // the IR node this step comes from
  std::string op;
  // Slots allocated (contiguous, Tensor::empty) right before the step runs.
  std::vector<int> allocate;
  KernelLaunch kernel;       // kKernel
  GemmLaunch gemm;           // kGemm
  int source = -1;           // kView, kAlias, kNonzero, kPrint, kDynamicElementwise (operand 0)
  int result = -1;           // kView, kAlias, kNonzero, kPrint, kDynamicElementwise
  std::vector<int> sources;  // kDynamicElementwise: every operand slot
  int graph_node = -1;       // kDynamicElementwise, kLaunch: the LoweringGraph node
  std::vector<int> results;  // kLaunch: every result slot (each aliases an operand in `sources`)
  std::string message;       // kPrint
  // Slots not read after this step (dropped so their memory returns to the pool).
  std::vector<int> release;
};

}  // namespace grove::compiler::lowering
