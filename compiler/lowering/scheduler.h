// schedule_program: from a Program to the steps one call runs (steps.h),
// their slots and static layouts, and the split of the steps into segments.
// Kernels are generated and loaded here, so calls never compile (except the
// elementwise work on data-dependent shapes after `nonzero`).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/program.h"
#include "compiler/lowered_function.h"
#include "compiler/lowering/fusion.h"
#include "compiler/lowering/lowering_graph.h"
#include "compiler/lowering/small_m_gemm_mode.h"
#include "compiler/lowering/steps.h"
#include "compiler/ops/op_registry.h"

namespace grove::compiler::lowering {

struct SegmentPlan {
  size_t first_step = 0;
  size_t end_step = 0;  // exclusive
  CaptureBlocker blocker = CaptureBlocker::kNone;
  std::string op;                 // the op that blocks capture
  std::string node_name;          // its node
  std::vector<int> input_slots;   // read here, defined before (ascending)
  std::vector<int> output_slots;  // defined here, read later or program outputs (ascending)
  std::vector<int> drop_after;    // slots nothing after this segment reads
  size_t kernel_count = 0;
  size_t gemm_count = 0;
};

struct ScheduledProgram {
  std::shared_ptr<const ir::Program> program;
  std::shared_ptr<const LoweringGraph> graph;
  FusionPlan fusion;
  runtime::Device device;
  std::vector<SlotInfo> slots;  // graph values first (same ids), then temporaries
  std::vector<Step> steps;
  std::vector<SegmentPlan> segments;
  std::vector<int> input_slots;   // Program::inputs() order
  std::vector<int> output_slots;  // Program::outputs() order
  double compile_ms = 0;          // code generation time spent scheduling this program
};

struct ScheduleOptions {
  ops::ExecMode mode = ops::ExecMode::kInference;
  // False: build every KernelSpec but do not generate or load code (e.g. to
  // inspect the PTX of a cuda program on a machine without a GPU). The result
  // cannot run.
  bool load_kernels = true;
  // This compile's mode (Note [Small-M GEMM selection]); none: GROVE_SMALL_M_GEMM.
  std::optional<SmallMGemmMode> small_m_gemm;
  // False: every attention node runs grove's generated kernel (Note [Fused
  // attention kernel]) even where the runtime's sequence attention kernel
  // takes it (Note [Attention on the sequence attention kernel]); for tests.
  bool sequence_attention = true;
  // True: this program's library GEMMs take the fastest of cuBLASLt's
  // candidates, timed once per process and shape (GemmArgs::search; Note [GEMM
  // algorithms by measurement], runtime/cuda/gemm_algorithm_search.h).
  bool gemm_search = false;
  // True: the program is rewritten first (Note [Sibling GEMMs as one],
  // sibling_gemms.h), as GROVE_FUSE_SIBLING_GEMMS=1 does for every program.
  bool sibling_gemms = false;
};

// Throws grove::Error naming the node when something cannot be lowered.
ScheduledProgram schedule_program(const ir::Program& program, const ScheduleOptions& options = {});

}  // namespace grove::compiler::lowering
