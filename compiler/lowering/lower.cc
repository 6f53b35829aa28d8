#include "compiler/lowering/lower.h"

#include <set>
#include <sstream>

#include "compiler/lowering/executor.h"
#include "compiler/lowering/scheduler.h"
#include "runtime/error.h"
#include "runtime/strided_copy_kernel.h"

namespace grove::compiler::lowering {

namespace {

// What calls need; held by every callable, so functions copied out of a
// LoweredProgram stay valid after it is gone.
struct Core {
  ScheduledProgram scheduled;
  ExecutorOptions executor;
  std::string name;
  // Note [Boundary slots]: run_segments keeps only the values that cross a
  // segment boundary (program inputs and outputs, segment inputs and
  // outputs), at dense indices; the rest of the thousands of slots live and
  // die inside a segment. A full-size environment per call costs tens of
  // microseconds for gpt4x256, more than a graph replay's host cost.
  std::vector<int> boundary_index;  // per slot: dense index, or -1
  size_t boundary_count = 0;
  // One segment reading exactly the program inputs in order and returning
  // exactly the program outputs: run_segments passes the call straight through.
  bool single_segment_passthrough = false;
  // Note [Cheap input checks]: what each program input must be, flattened for
  // the per-call check; check_program_inputs() words the error when it fails.
  struct ExpectedInput {
    runtime::Shape shape;
    runtime::Shape contiguous_strides;
    runtime::DType dtype = runtime::DType::kF32;
    runtime::Device device;
  };
  std::vector<ExpectedInput> expected_inputs;
  // Per program input: the program writes it in place (Note [Strided inputs]).
  std::vector<bool> written_inputs;
};

void index_expected_inputs(Core& core) {
  const ir::Program& program = *core.scheduled.program;
  for (ir::ValueId id : program.inputs()) {
    const ir::TensorType& type = program.value(id).type;
    core.expected_inputs.push_back(
        {type.shape, runtime::contiguous_strides(type.shape), type.dtype, type.device});
  }
}

// Note [Cheap input checks]: every call of a lowered program checks all its
// inputs, params and buffers included (50 for gpt4x256). Through
// check_program_inputs() that cost about 170 instructions per input, more
// than the rest of a graph replay's host path; these are the same checks in a
// few loads and compares each. A tensor that fails any of them goes through
// check_program_inputs(), which throws the worded error.
bool inputs_match(const Core& core, const TensorList& inputs) {
  if (inputs.size() != core.expected_inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const runtime::Tensor& tensor = inputs[i];
    const Core::ExpectedInput& expected = core.expected_inputs[i];
    if (!tensor.defined() || tensor.dtype() != expected.dtype ||
        tensor.storage()->device() != expected.device || tensor.shape() != expected.shape) {
      return false;
    }
    if (tensor.strides() != expected.contiguous_strides && !tensor.is_contiguous()) return false;
  }
  return true;
}

// Note [One input check per call]: the door checked everything but layout.
bool layouts_match(const Core& core, const TensorList& inputs) {
  if (inputs.size() != core.expected_inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const runtime::Tensor& tensor = inputs[i];
    if (tensor.strides() != core.expected_inputs[i].contiguous_strides && !tensor.is_contiguous()) {
      return false;
    }
  }
  return true;
}

void index_boundary_slots(Core& core) {
  const ScheduledProgram& scheduled = core.scheduled;
  core.boundary_index.assign(scheduled.slots.size(), -1);
  auto add = [&](int slot) {
    int& index = core.boundary_index[static_cast<size_t>(slot)];
    if (index < 0) index = static_cast<int>(core.boundary_count++);
  };
  for (int slot : scheduled.input_slots) add(slot);
  for (const SegmentPlan& segment : scheduled.segments) {
    for (int slot : segment.input_slots) add(slot);
    for (int slot : segment.output_slots) add(slot);
  }
  for (int slot : scheduled.output_slots) add(slot);
  core.single_segment_passthrough = scheduled.segments.size() == 1 &&
                                    scheduled.segments[0].input_slots == scheduled.input_slots &&
                                    scheduled.segments[0].output_slots == scheduled.output_slots;
}

}  // namespace

struct LoweredProgram::State {
  std::shared_ptr<const Core> core;
  LoweredFunction whole;
  std::vector<LoweredSegment> segments;
  std::vector<Callable> segment_calls;  // segments[i].function.call
};

namespace {

using runtime::Tensor;

// The program input (position) whose storage holds `slot`, or -1.
int input_root(const ScheduledProgram& scheduled, int slot) {
  int root = scheduled.slots[static_cast<size_t>(slot)].root;
  const auto& graph = *scheduled.graph;
  if (root < static_cast<int>(graph.values().size())) {
    return graph.value(root).input_position;
  }
  return -1;
}

// Roots written in place by steps [first, end).
std::set<int> written_roots(const ScheduledProgram& scheduled, size_t first, size_t end) {
  std::set<int> roots;
  for (size_t i = first; i < end; ++i) {
    const Step& step = scheduled.steps[i];
    if (step.kind == StepKind::kGemm) {
      for (int slot : step.gemm.written_slots()) {
        if (std::find(step.allocate.begin(), step.allocate.end(), slot) == step.allocate.end()) {
          roots.insert(scheduled.slots[static_cast<size_t>(slot)].root);
        }
      }
      continue;
    }
    if (step.kind == StepKind::kLaunch) {
      for (int slot : step.results) {
        if (std::find(step.allocate.begin(), step.allocate.end(), slot) == step.allocate.end()) {
          roots.insert(scheduled.slots[static_cast<size_t>(slot)].root);
        }
      }
      continue;
    }
    if (step.kind != StepKind::kKernel) continue;
    for (int slot : step.kernel.output_slots) {
      if (std::find(step.allocate.begin(), step.allocate.end(), slot) == step.allocate.end()) {
        roots.insert(scheduled.slots[static_cast<size_t>(slot)].root);
      }
    }
  }
  return roots;
}

LoweredFunction segment_function(const std::shared_ptr<const Core>& core, size_t index);

// Note [Reused slot environments]: a segment's steps address their values by
// slot, so a call needs a vector with one Tensor per slot (thousands for
// gpt4x256: a few hundred KiB, above malloc's mmap threshold). A fresh one
// per call would cost an mmap, page faults and an munmap every time, tens of
// microseconds; instead each thread keeps the vectors it used, cleared (every
// tensor released) when a call ends, exceptions included.
class SlotEnvironment {
 public:
  explicit SlotEnvironment(size_t size) {
    std::vector<std::vector<Tensor>>& spare = spares();
    if (!spare.empty()) {
      tensors_ = std::move(spare.back());
      spare.pop_back();
    }
    tensors_.resize(size);
  }
  ~SlotEnvironment() {
    for (Tensor& tensor : tensors_) tensor = Tensor();
    spares().push_back(std::move(tensors_));
  }
  SlotEnvironment(const SlotEnvironment&) = delete;
  SlotEnvironment& operator=(const SlotEnvironment&) = delete;
  std::vector<Tensor>& tensors() { return tensors_; }

 private:
  static std::vector<std::vector<Tensor>>& spares() {
    thread_local std::vector<std::vector<Tensor>> vectors;
    return vectors;
  }
  std::vector<Tensor> tensors_;
};

TensorList run_segments(const Core& core, const std::vector<Callable>& segment_calls,
                        const TensorList& inputs, InputCheck check) {
  const ScheduledProgram& scheduled = core.scheduled;
  GROVE_CHECK(segment_calls.size() == scheduled.segments.size(), "lowered '",
              scheduled.program->name(), "': run_with needs one call per segment (",
              scheduled.segments.size(), "), found ", segment_calls.size());
  const bool matched = check == InputCheck::kCheckedByDoor ? layouts_match(core, inputs)
                                                           : inputs_match(core, inputs);
  if (!matched) [[unlikely]] {
    check_program_inputs(*scheduled.program, inputs, core.name, &core.written_inputs);
    // Note [Strided inputs]: the checks passed, so what failed the cheap
    // match is a layout; the kernels read contiguous copies.
    TensorList contiguous = inputs;
    for (Tensor& input : contiguous) {
      if (!input.is_contiguous()) input = runtime::contiguous_copy(input);
    }
    GROVE_CHECK(inputs_match(core, contiguous), core.name,
                ": inputs still disagree with the program after their contiguous copies");
    return run_segments(core, segment_calls, contiguous, InputCheck::kHere);
  }
  if (core.single_segment_passthrough) {
    TensorList outputs = segment_calls[0](inputs);
    GROVE_CHECK(outputs.size() == scheduled.output_slots.size(), "the segment of '",
                scheduled.program->name(), "' returned ", outputs.size(), " tensors, expected ",
                scheduled.output_slots.size());
    return outputs;
  }
  // Note [Boundary slots].
  auto at = [&core](int slot) {
    return static_cast<size_t>(core.boundary_index[static_cast<size_t>(slot)]);
  };
  // Both vectors come from the thread's spares (Note [Reused slot environments]).
  SlotEnvironment environment(core.boundary_count);
  std::vector<Tensor>& env = environment.tensors();
  for (size_t i = 0; i < inputs.size(); ++i) env[at(scheduled.input_slots[i])] = inputs[i];
  for (size_t s = 0; s < scheduled.segments.size(); ++s) {
    const SegmentPlan& segment = scheduled.segments[s];
    TensorList segment_outputs;
    {
      SlotEnvironment arguments(segment.input_slots.size());
      TensorList& segment_inputs = arguments.tensors();
      for (size_t i = 0; i < segment.input_slots.size(); ++i) {
        segment_inputs[i] = env[at(segment.input_slots[i])];
      }
      segment_outputs = segment_calls[s](segment_inputs);
    }
    GROVE_CHECK(segment_outputs.size() == segment.output_slots.size(), "segment ", s, " of '",
                scheduled.program->name(), "' returned ", segment_outputs.size(),
                " tensors, expected ", segment.output_slots.size());
    for (size_t o = 0; o < segment.output_slots.size(); ++o) {
      env[at(segment.output_slots[o])] = std::move(segment_outputs[o]);
    }
    for (int slot : segment.drop_after) {
      if (core.boundary_index[static_cast<size_t>(slot)] >= 0) env[at(slot)] = Tensor();
    }
  }
  TensorList outputs;
  outputs.reserve(scheduled.output_slots.size());
  for (int slot : scheduled.output_slots) outputs.push_back(env[at(slot)]);
  return outputs;
}

}  // namespace

void check_program_inputs(const ir::Program& program, const TensorList& inputs,
                          const std::string& what, const std::vector<bool>* written_inputs) {
  const auto& ids = program.inputs();
  GROVE_CHECK(inputs.size() == ids.size(), what, ": expected ", ids.size(),
              " inputs (inputs, params and buffers in declaration order), found ", inputs.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const ir::Value& value = program.value(ids[i]);
    const Tensor& tensor = inputs[i];
    // Built only when a check fails (Note in compile.cc's CompiledModel::operator()).
    auto name = [&] {
      return str_cat(what, ": ", ir::value_kind_name(value.kind), " '", value.name, "' (input ", i,
                     ")");
    };
    GROVE_CHECK(tensor.defined(), name(), " is an undefined tensor; pass a tensor of ",
                value.type.str());
    GROVE_CHECK_AS(ShapeError, tensor.shape() == value.type.shape, name(), " expects shape ",
                   ir::shape_text(value.type.shape), ", found ",
                   runtime::shape_str(tensor.shape()));
    GROVE_CHECK_AS(DTypeError, tensor.dtype() == value.type.dtype, name(), " expects dtype ",
                   runtime::dtype_name(value.type.dtype), ", found ",
                   runtime::dtype_name(tensor.dtype()));
    GROVE_CHECK_AS(DeviceError, tensor.device() == value.type.device, name(),
                   " expects a tensor on ", value.type.device.str(), ", found one on ",
                   tensor.device().str(), "; move it to ", value.type.device.str(), " first");
    const bool copy_allowed = written_inputs != nullptr && i < written_inputs->size() &&
                              !(*written_inputs)[i] && !value.is_persistent();
    GROVE_CHECK_AS(ShapeError, tensor.is_contiguous() || copy_allowed, name(),
                   " must be contiguous (the model writes it in place or owns it), found "
                   "strides ",
                   runtime::shape_str(tensor.strides()), "; pass a contiguous tensor");
    GROVE_CHECK_AS(
        ShapeError, tensor.is_contiguous() || tensor.dim() <= runtime::kMaxStridedCopyRank, name(),
        " has ", tensor.dim(), " dimensions and strides ", runtime::shape_str(tensor.strides()),
        "; a non-contiguous input may have at most ", runtime::kMaxStridedCopyRank,
        "; pass a contiguous tensor");
  }
}

std::string KernelReport::str() const {
  std::ostringstream text;
  text << kernels.size() << " kernels + " << library_gemms << " GEMMs";
  if (host_ops > 0) text << " + " << host_ops << " host ops";
  text << ":";
  for (size_t i = 0; i < kernels.size(); ++i) text << (i ? ", " : " ") << kernels[i];
  return text.str();
}

LoweredProgram::LoweredProgram(std::shared_ptr<const State> state) : state_(std::move(state)) {}

const LoweredFunction& LoweredProgram::function() const { return state_->whole; }
const std::vector<LoweredSegment>& LoweredProgram::segments() const { return state_->segments; }
double LoweredProgram::compile_ms() const { return state_->core->scheduled.compile_ms; }
const ir::Program& LoweredProgram::program() const { return *state_->core->scheduled.program; }

TensorList LoweredProgram::run_with(const std::vector<Callable>& segment_calls,
                                    const TensorList& inputs, InputCheck check) const {
  return run_segments(*state_->core, segment_calls, inputs, check);
}

TensorList LoweredProgram::run(const TensorList& inputs, InputCheck check) const {
  return run_segments(*state_->core, state_->segment_calls, inputs, check);
}

KernelReport LoweredProgram::kernel_report() const {
  KernelReport report;
  for (const Step& step : state_->core->scheduled.steps) {
    switch (step.kind) {
      case StepKind::kKernel:
        report.kernels.push_back(step.kernel.spec.name);
        break;
      case StepKind::kDynamicElementwise:
        report.kernels.push_back(step.op);
        break;
      case StepKind::kGemm:
        report.library_gemms += step.gemm.calls.size();
        break;
      case StepKind::kNonzero:
      case StepKind::kPrint:
        ++report.host_ops;
        break;
      default:
        break;
    }
  }
  return report;
}

std::string LoweredProgram::describe() const {
  const ScheduledProgram& scheduled = state_->core->scheduled;
  std::ostringstream text;
  for (size_t s = 0; s < scheduled.segments.size(); ++s) {
    const SegmentPlan& segment = scheduled.segments[s];
    text << "segment " << s << " (" << capture_blocker_name(segment.blocker);
    if (!segment.op.empty()) text << " at " << segment.op << " '" << segment.node_name << "'";
    text << "): " << segment.kernel_count << " kernels, " << segment.gemm_count << " GEMMs\n";
    for (size_t i = segment.first_step; i < segment.end_step; ++i) {
      const Step& step = scheduled.steps[i];
      switch (step.kind) {
        case StepKind::kKernel:
          text << "  kernel " << step.kernel.spec.name << " "
               << runtime::shape_str(step.kernel.spec.iteration_shape);
          break;
        case StepKind::kGemm:
          text << "  gemm x" << step.gemm.calls.size() << " m=" << step.gemm.args.m
               << " n=" << step.gemm.args.n << " k=" << step.gemm.args.k
               << " batch=" << step.gemm.args.batch_count;
          if (step.gemm.args.epilogue != runtime::GemmEpilogue::kNone) {
            text << " +" << runtime::gemm_epilogue_name(step.gemm.args.epilogue);
            if (step.gemm.exact_gelu) text << "+exact_gelu";
          }
          if (step.gemm.args.search) text << " searched";
          if (step.gemm.args.tile_rows > 0) {
            text << " tiled " << step.gemm.args.tile_rows << "x" << step.gemm.args.tile_columns
                 << "x" << step.gemm.args.tile_warps
                 << (step.gemm.args.tile_transposed ? " transposed" : "");
          }
          break;
        case StepKind::kView:
          text << "  view " << step.op;
          break;
        case StepKind::kAlias:
          text << "  alias " << step.op;
          break;
        default:
          text << "  host " << step.op;
          break;
      }
      text << "  <- " << step.node_name << "\n";
    }
  }
  return text.str();
}

namespace {

LoweredFunction segment_function(const std::shared_ptr<const Core>& core, size_t index) {
  const ScheduledProgram& scheduled = core->scheduled;
  const SegmentPlan& plan = scheduled.segments[index];
  LoweredFunction function;
  function.name = str_cat(scheduled.program->name(), ":segment", index);
  function.devices = {scheduled.device};
  Segment segment;
  segment.blocker = plan.blocker;
  segment.op = plan.op;
  segment.node_name = plan.node_name;
  segment.kernel_count = plan.kernel_count;
  segment.gemm_count = plan.gemm_count;
  function.segments = {segment};
  std::set<int> written = written_roots(scheduled, plan.first_step, plan.end_step);
  for (size_t i = 0; i < plan.input_slots.size(); ++i) {
    int slot = plan.input_slots[i];
    int position = input_root(scheduled, slot);
    if (position >= 0 &&
        scheduled.program->value(scheduled.program->inputs()[static_cast<size_t>(position)])
            .is_persistent()) {
      function.static_input_indices.push_back(i);
    }
    if (written.count(scheduled.slots[static_cast<size_t>(slot)].root)) {
      function.mutated_input_indices.push_back(i);
    }
  }
  for (int slot : plan.output_slots) {
    std::optional<size_t> alias;
    int root = scheduled.slots[static_cast<size_t>(slot)].root;
    for (size_t i = 0; i < plan.input_slots.size() && !alias; ++i) {
      if (scheduled.slots[static_cast<size_t>(plan.input_slots[i])].root == root) alias = i;
    }
    function.output_aliases_input.push_back(alias);
  }
  function.call = [core, index](const TensorList& inputs) {
    const ScheduledProgram& program = core->scheduled;
    const SegmentPlan& plan = program.segments[index];
    GROVE_CHECK(inputs.size() == plan.input_slots.size(), "segment ", index, " of '",
                program.program->name(), "' takes ", plan.input_slots.size(), " inputs, found ",
                inputs.size());
    SlotEnvironment environment(program.slots.size());  // Note [Reused slot environments]
    std::vector<Tensor>& env = environment.tensors();
    for (size_t i = 0; i < inputs.size(); ++i) {
      env[static_cast<size_t>(plan.input_slots[i])] = inputs[i];
    }
    run_steps(program, plan.first_step, plan.end_step, env, core->executor);
    TensorList outputs;
    outputs.reserve(plan.output_slots.size());
    for (int slot : plan.output_slots) outputs.push_back(std::move(env[static_cast<size_t>(slot)]));
    return outputs;
  };
  return function;
}

}  // namespace

LoweredProgram lower(const ir::Program& program, const LowerOptions& options) {
  auto core = std::make_shared<Core>();
  ScheduleOptions schedule_options{options.mode};
  schedule_options.small_m_gemm = options.small_m_gemm;
  schedule_options.sequence_attention = options.sequence_attention;
  schedule_options.gemm_search = options.gemm_search;
  schedule_options.sibling_gemms = options.sibling_gemms;
  core->scheduled = schedule_program(program, schedule_options);
  core->executor.print_sink = options.print_sink;
  core->name = str_cat(program.name(), ":forward");
  index_boundary_slots(*core);
  index_expected_inputs(*core);
  auto state = std::make_shared<LoweredProgram::State>();
  state->core = core;
  const ScheduledProgram& scheduled = core->scheduled;

  for (size_t s = 0; s < scheduled.segments.size(); ++s) {
    LoweredSegment segment;
    segment.function = segment_function(core, s);
    segment.inputs = scheduled.segments[s].input_slots;
    segment.outputs = scheduled.segments[s].output_slots;
    for (int slot : segment.inputs) {
      segment.input_names.push_back(scheduled.slots[static_cast<size_t>(slot)].name);
    }
    for (int slot : segment.outputs) {
      segment.output_names.push_back(scheduled.slots[static_cast<size_t>(slot)].name);
    }
    state->segments.push_back(std::move(segment));
  }

  LoweredFunction& whole = state->whole;
  whole.name = core->name;
  whole.devices = {program.device()};
  std::set<int> written = written_roots(scheduled, 0, scheduled.steps.size());
  for (size_t i = 0; i < program.inputs().size(); ++i) {
    if (program.value(program.inputs()[i]).is_persistent()) {
      whole.static_input_indices.push_back(i);
    }
    const bool is_written = written.count(scheduled.input_slots[i]) > 0;
    if (is_written) whole.mutated_input_indices.push_back(i);
    core->written_inputs.push_back(is_written);
  }
  for (int slot : scheduled.output_slots) {
    int position = input_root(scheduled, slot);
    whole.output_aliases_input.push_back(position >= 0 ? std::optional<size_t>(position)
                                                       : std::nullopt);
  }
  for (const LoweredSegment& segment : state->segments) {
    whole.segments.push_back(segment.function.segments[0]);
  }
  for (const LoweredSegment& segment : state->segments) {
    state->segment_calls.push_back(segment.function.call);
  }
  std::shared_ptr<const Core> shared_core = core;
  whole.call = [shared_core, calls = state->segment_calls](const TensorList& inputs) {
    return run_segments(*shared_core, calls, inputs, InputCheck::kHere);
  };
  return LoweredProgram(state);
}

}  // namespace grove::compiler::lowering
