#include "cudagraph_trees/backend/segment_plan.h"

#include <algorithm>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace grove::cudagraph_trees::backend {
namespace {

std::string fallback_reason(const compiler::Segment& segment, const std::string& model,
                            size_t index) {
  std::string where = segment.node_name.empty() ? str_cat("segment", index) : segment.node_name;
  std::string op = segment.op.empty() ? "?" : segment.op;
  return str_cat("not captured: ", compiler::capture_blocker_name(segment.blocker), " at ", op,
                 " in ", model, ":", where);
}

}  // namespace

CompilationMode mode_for(const compiler::backends::CompileOptions& options) {
  using compiler::backends::Stage;
  switch (options.stage) {
    case Stage::kForward:
      return CompilationMode::kForward;
    case Stage::kBackward:
      return CompilationMode::kBackward;
    case Stage::kInference:
    // The optimizer step's in-place param updates are static-input mutations
    // (category (b)); as an inference function it does not hold the generation
    // open waiting for a backward.
    case Stage::kOptimizer:
      return CompilationMode::kInference;
  }
  return CompilationMode::kInference;
}

SegmentPlan plan_segment(const compiler::LoweredFunction& segment, size_t index,
                         const SegmentContext& context) {
  SegmentPlan plan;
  compiler::Segment meta = segment.segments.empty() ? compiler::Segment{} : segment.segments[0];
  if (!context.graphs) {
    meta.blocker = compiler::CaptureBlocker::kCpuTensors;
    if (meta.op.empty()) meta.op = "program device";
    if (meta.node_name.empty()) meta.node_name = context.device.str();
  }
  size_t launches = meta.kernel_count + meta.gemm_count;
  if (!meta.capturable()) {
    plan.reason = fallback_reason(meta, context.model_name, index);
    plan.category = compiler::capture_blocker_name(meta.blocker);
    plan.fallback = true;
    if (context.config.strict) {
      throw NotCapturedError(str_cat(plan.reason,
                                     " (strict mode: GROVE_CUDAGRAPHS_STRICT / "
                                     "TreeConfig::strict forbids the eager fallback; remove "
                                     "the op or move the model to a graph device)"));
    }
    log_once(LogLevel::kInfo, str_cat("cudagraphs:", context.program_id, ":", index), plan.reason);
  } else if (launches < static_cast<size_t>(context.config.min_segment_kernels)) {
    plan.reason =
        str_cat("not captured: ", launches, " kernels < min_segment_kernels ",
                context.config.min_segment_kernels, " in ", context.model_name, ":segment", index);
    plan.category = "too few kernels";
    log_once(LogLevel::kDebug, str_cat("cudagraphs:", context.program_id, ":", index), plan.reason);
  } else {
    const compiler::backends::Stage stage = context.options.stage;
    plan.captured = true;
    plan.spec.name = str_cat(context.model_name,
                             stage == compiler::backends::Stage::kInference
                                 ? ""
                                 : str_cat(":", compiler::backends::stage_name(stage)),
                             ":segment", index, "#", context.program_id);
    plan.spec.mode = mode_for(context.options);
    plan.spec.static_input_indices = segment.static_input_indices;
    plan.spec.mutated_input_indices = segment.mutated_input_indices;
    plan.spec.body = segment.call;
    plan.spec.devices = segment.devices;
    plan.spec.never_capture = context.options.never_capture;
    plan.spec.skip_warmup = context.options.skip_warmup;
  }
  return plan;
}

InputChecks plan_input_checks(const compiler::lowering::LoweredProgram& lowered,
                              const compiler::backends::CompileOptions& options) {
  // A backward or optimizer step continues the forward's generation, whose
  // outputs stay alive on the path (Note [Pool inputs of piecewise programs]).
  InputChecks checks;
  if (options.stage == compiler::backends::Stage::kBackward ||
      options.stage == compiler::backends::Stage::kOptimizer) {
    return checks;
  }
  const compiler::LoweredFunction& whole = lowered.function();
  auto listed = [](const std::vector<size_t>& list, size_t i) {
    return std::find(list.begin(), list.end(), i) != list.end();
  };
  auto returned = [&whole](size_t i) {
    for (const auto& aliased : whole.output_aliases_input) {
      if (aliased && *aliased == i) return true;
    }
    return false;
  };
  checks.piecewise = lowered.segments().size() > 1;
  size_t input_count = lowered.program().inputs().size();
  for (size_t i = 0; i < input_count; ++i) {
    if (listed(whole.static_input_indices, i)) continue;
    if (listed(whole.mutated_input_indices, i)) {
      checks.mutated_inputs.push_back(i);
      continue;
    }
    if (checks.piecewise || returned(i)) checks.pool_input_candidates.push_back(i);
  }
  return checks;
}

}  // namespace grove::cudagraph_trees::backend
