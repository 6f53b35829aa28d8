#include "compiler/lowering/segment_split.h"

#include <algorithm>
#include <set>

namespace grove::compiler::lowering {

// The slots a step reads (needs defined before it) and defines.
void step_slots(const Step& step, std::vector<int>* reads, std::vector<int>* defines) {
  for (int slot : step.allocate) defines->push_back(slot);
  switch (step.kind) {
    case StepKind::kKernel:
      for (int slot : step.kernel.input_slots) reads->push_back(slot);
      for (int slot : step.kernel.output_slots) {
        if (std::find(step.allocate.begin(), step.allocate.end(), slot) == step.allocate.end()) {
          reads->push_back(slot);  // written in place or allocated earlier (concat)
        }
      }
      break;
    case StepKind::kGemm:
      reads->push_back(step.gemm.a_slot);
      reads->push_back(step.gemm.b_slot);
      if (step.gemm.bias_slot >= 0) reads->push_back(step.gemm.bias_slot);
      if (step.gemm.args.epilogue == runtime::GemmEpilogue::kDGelu) {
        reads->push_back(step.gemm.aux_slot);
      }
      for (int slot : step.gemm.written_slots()) {
        if (std::find(step.allocate.begin(), step.allocate.end(), slot) == step.allocate.end()) {
          reads->push_back(slot);  // written in place (a forwarded result)
        }
      }
      break;
    case StepKind::kDynamicElementwise:
      for (int slot : step.sources) reads->push_back(slot);
      defines->push_back(step.result);
      break;
    case StepKind::kLaunch:
      for (int slot : step.sources) reads->push_back(slot);
      for (int slot : step.results) defines->push_back(slot);
      break;
    default:
      if (step.source >= 0) reads->push_back(step.source);
      if (step.result >= 0) defines->push_back(step.result);
      break;
  }
}

void split_segments(ScheduledProgram& program, ops::ExecMode mode) {
  const bool cpu = program.device.is_cpu();
  auto blocker_of = [&](const Step& step) {
    switch (step.kind) {
      case StepKind::kNonzero:
      case StepKind::kPrint:
      case StepKind::kLaunch: {
        const ops::OpDef& def = ops::OpRegistry::global().get(step.op);
        const ops::GraphSafety safety = def.safety(mode);
        if (step.kind == StepKind::kLaunch && safety == ops::GraphSafety::kCapturable) {
          return CaptureBlocker::kNone;
        }
        return safety == ops::GraphSafety::kHostOnly ? CaptureBlocker::kHostOnly
                                                     : CaptureBlocker::kNeedsHostSync;
      }
      case StepKind::kDynamicElementwise:
        return CaptureBlocker::kNeedsHostSync;
      default:
        return CaptureBlocker::kNone;
    }
  };
  for (size_t i = 0; i < program.steps.size(); ++i) {
    CaptureBlocker blocker = blocker_of(program.steps[i]);
    bool extend = !program.segments.empty() && blocker == CaptureBlocker::kNone &&
                  program.segments.back().blocker == CaptureBlocker::kNone;
    if (!extend) {
      SegmentPlan segment;
      segment.first_step = i;
      segment.blocker = blocker;
      if (blocker != CaptureBlocker::kNone) {
        segment.op = program.steps[i].op;
        segment.node_name = program.steps[i].node_name;
      }
      program.segments.push_back(segment);
    }
    program.segments.back().end_step = i + 1;
  }
  // Which segment defines each slot, and the last segment that reads it.
  std::vector<int> defined_in(program.slots.size(), -1);
  std::vector<int> last_read(program.slots.size(), -1);
  for (size_t s = 0; s < program.segments.size(); ++s) {
    SegmentPlan& segment = program.segments[s];
    std::set<int> inputs;
    for (size_t i = segment.first_step; i < segment.end_step; ++i) {
      const Step& step = program.steps[i];
      std::vector<int> reads, defines;
      step_slots(step, &reads, &defines);
      for (int slot : reads) {
        if (defined_in[static_cast<size_t>(slot)] != static_cast<int>(s)) inputs.insert(slot);
        last_read[static_cast<size_t>(slot)] = static_cast<int>(s);
      }
      for (int slot : defines) defined_in[static_cast<size_t>(slot)] = static_cast<int>(s);
      if (step.kind == StepKind::kKernel || step.kind == StepKind::kDynamicElementwise) {
        ++segment.kernel_count;
      }
      if (step.kind == StepKind::kGemm) segment.gemm_count += step.gemm.calls.size();
    }
    segment.input_slots.assign(inputs.begin(), inputs.end());
    if (cpu && segment.blocker == CaptureBlocker::kNone) {
      segment.blocker = CaptureBlocker::kCpuTensors;
    }
  }
  std::set<int> program_outputs(program.output_slots.begin(), program.output_slots.end());
  for (size_t s = 0; s < program.segments.size(); ++s) {
    SegmentPlan& segment = program.segments[s];
    for (size_t slot = 0; slot < program.slots.size(); ++slot) {
      if (defined_in[slot] != static_cast<int>(s)) continue;
      if (program_outputs.count(static_cast<int>(slot)) || last_read[slot] > static_cast<int>(s)) {
        segment.output_slots.push_back(static_cast<int>(slot));
      }
    }
    for (size_t slot = 0; slot < program.slots.size(); ++slot) {
      if (program_outputs.count(static_cast<int>(slot))) continue;
      int last = std::max(last_read[slot], defined_in[slot]);
      if (last == static_cast<int>(s)) segment.drop_after.push_back(static_cast<int>(slot));
    }
  }
}

void compute_releases(ScheduledProgram& program) {
  std::vector<int> last_use(program.slots.size(), -1);
  for (size_t i = 0; i < program.steps.size(); ++i) {
    std::vector<int> reads, defines;
    step_slots(program.steps[i], &reads, &defines);
    for (int slot : reads) last_use[static_cast<size_t>(slot)] = static_cast<int>(i);
    for (int slot : defines) last_use[static_cast<size_t>(slot)] = static_cast<int>(i);
  }
  std::set<int> keep(program.output_slots.begin(), program.output_slots.end());
  for (const SegmentPlan& segment : program.segments) {
    // A segment's outputs leave through its return value; keep them to the end.
    keep.insert(segment.output_slots.begin(), segment.output_slots.end());
  }
  for (size_t slot = 0; slot < program.slots.size(); ++slot) {
    if (last_use[slot] < 0 || keep.count(static_cast<int>(slot))) continue;
    program.steps[static_cast<size_t>(last_use[slot])].release.push_back(static_cast<int>(slot));
  }
}

}  // namespace grove::compiler::lowering
