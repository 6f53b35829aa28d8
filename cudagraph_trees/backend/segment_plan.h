// What the cudagraphs backend decides once per lowered program, at prepare
// time: for each segment whether it is recorded into the tree or left eager
// (Note [Segments left eager] in cudagraphs_backend.h), and which program
// inputs every call must check before its segments run (the Notes in
// prepared_program.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/backends/backend_registry.h"
#include "compiler/lowered_function.h"
#include "compiler/lowered_program.h"
#include "cudagraph_trees/config.h"
#include "cudagraph_trees/function_registry.h"
#include "runtime/device.h"

namespace grove::cudagraph_trees::backend {

// The tree manager's mode for a program compiled with `options`.
CompilationMode mode_for(const compiler::backends::CompileOptions& options);

// What the backend decided for one segment.
struct SegmentPlan {
  bool captured = false;
  std::string reason;     // why not, when not captured
  std::string category;   // stable key: a capture blocker name or "too few kernels"
  bool fallback = false;  // a real fallback (not "too few kernels")
  FunctionSpec spec;      // for captured segments (body set)
};

// The program a segment belongs to, as planning sees it.
struct SegmentContext {
  const compiler::backends::CompileOptions& options;
  const TreeConfig& config;  // min_segment_kernels, strict
  const std::string& model_name;
  runtime::Device device;
  bool graphs = false;  // the device records graphs (not cpu)
  int64_t program_id = 0;
};

// Plans segment `index` of a program: captured, or left eager with the reason
// (logged once). Throws NotCapturedError for a real fallback under strict mode.
SegmentPlan plan_segment(const compiler::LoweredFunction& segment, size_t index,
                         const SegmentContext& context);

// The program inputs a call checks before its segments run.
struct InputChecks {
  bool piecewise = false;  // more than one segment
  // Positions to check (Note [Pool inputs of piecewise programs]); empty for a
  // one-segment program that returns no input, or one that continues a step.
  std::vector<size_t> pool_input_candidates;
  // Every mutated input that is not static, for Note [Private copies of
  // mutated storage] and, in piecewise programs, for Notes [Mutated pool
  // inputs of piecewise programs] and [Aliased mutated inputs of piecewise
  // programs].
  std::vector<size_t> mutated_inputs;
};

// The checks for a program that records at least one segment on a graph device.
InputChecks plan_input_checks(const compiler::lowering::LoweredProgram& lowered,
                              const compiler::backends::CompileOptions& options);

}  // namespace grove::cudagraph_trees::backend
