#include "cudagraph_trees/backend/cudagraphs_backend.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "compiler/backends/compile.h"
#include "cudagraph_trees/config.h"
#include "cudagraph_trees/mutation_classifier.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace grove::cudagraph_trees::backend {
namespace {

using compiler::Callable;
using compiler::CaptureBlocker;
using compiler::backends::CompileOptions;
using compiler::backends::ExecutionBackend;
using compiler::lowering::LoweredProgram;

std::atomic<int64_t> next_program_id{0};

CompilationMode mode_for(const CompileOptions& options) {
  if (options.mode == compiler::ops::ExecMode::kInference) return CompilationMode::kInference;
  if (options.stage == "backward") return CompilationMode::kBackward;
  // The optimizer step's in-place param updates are static-input mutations
  // (category (b)); as an inference function it does not hold the generation
  // open waiting for a backward.
  if (options.stage == "optimizer") return CompilationMode::kInference;
  return CompilationMode::kForward;
}

// What the backend decided for one segment at prepare time.
struct SegmentPlan {
  bool captured = false;
  std::string reason;    // why not, when not captured
  std::string category;  // stable key: a capture blocker name or "too few kernels"
  bool fallback = false; // a real fallback (not "too few kernels")
  FunctionSpec spec;     // for captured segments (body set)
};

// One prepared program; shared by the callable and the backend instance.
struct PreparedProgram {
  PreparedProgram(LoweredProgram lowered_program, runtime::Device program_device)
      : lowered(std::move(lowered_program)), device(program_device) {}

  LoweredProgram lowered;
  runtime::Device device;
  std::string model_name;
  std::vector<SegmentPlan> plans;
  std::vector<Callable> eager_calls;  // each segment's own function
  bool any_captured = false;
  bool starts_step = false;  // a Trainer's forward (Note [Training steps])
  // Note [Pool inputs of piecewise programs]: positions to check; empty for a
  // one-segment program that returns no input, or one that continues a step.
  std::vector<size_t> pool_input_candidates;
  // Every mutated input that is not static, for Note [Private copies of
  // mutated storage] and, in piecewise programs, for Notes [Mutated pool inputs
  // of piecewise programs] and [Aliased mutated inputs of piecewise programs].
  std::vector<size_t> mutated_inputs;
  bool piecewise = false;  // more than one segment
  std::atomic<int64_t> pool_mutation_fallbacks{0};
  int64_t fallbacks = 0;              // segments left eager for a real reason
  std::atomic<int64_t> calls{0};

  int64_t id = 0;  // unique per process (next_program_id)

  // Function ids per tree manager (one manager per device and thread).
  std::mutex mutex;
  struct Registration {
    std::vector<std::optional<FunctionId>> ids;
    // One callable per segment: the manager's run() for captured segments,
    // the eager call otherwise. Built once, so a call copies no std::function.
    std::vector<Callable> calls;
  };
  // Note [Registrations by pool]: keyed by the manager's private pool id.
  // Pool ids are never reused on a device, so a manager created at the
  // address of a dead one (reset_tree_managers) is never mistaken for it,
  // and a call needs no check that the ids still name these functions.
  std::map<uint64_t, Registration> registrations;

  // The captured segments' callables in `manager`, registering them when the
  // manager has not seen this program. The calling thread's last answer is
  // kept in a thread_local, so a steady-state call takes no lock.
  const Registration& registration_in(TreeManager& manager) {
    struct LastLookup {
      int64_t program = -1;
      uint64_t pool = 0;
      const Registration* registration = nullptr;
    };
    thread_local LastLookup last;
    const uint64_t pool = manager.pool().value;
    if (last.program == id && last.pool == pool) [[likely]]
      return *last.registration;
    std::lock_guard<std::mutex> lock(mutex);
    auto found = registrations.find(pool);
    if (found == registrations.end()) {
      Registration registration;
      registration.ids.resize(plans.size());
      registration.calls = eager_calls;
      for (size_t s = 0; s < plans.size(); ++s) {
        if (!plans[s].captured) continue;
        FunctionId function_id = manager.register_function(plans[s].spec);
        registration.ids[s] = function_id;
        registration.calls[s] = [&manager, function_id](const TensorList& segment_inputs) {
          return manager.run(function_id, segment_inputs);
        };
      }
      found = registrations.emplace(pool, std::move(registration)).first;
    }
    last = LastLookup{id, pool, &found->second};  // map nodes never move
    return found->second;
  }

  TensorList call(const TensorList& inputs) {
    ++calls;
    // Note [Stale inputs throw first] (tree_manager.h): before any segment writes.
    if (plans.size() != 1 || !any_captured) throw_if_any_stale(inputs);
    if (!any_captured) return lowered.run_with(eager_calls, inputs);
    TreeManager& manager = tree_manager_for(device);
    const Registration& registration = registration_in(manager);
    // Note [Training steps]: a Trainer's forward, backward and optimizer step
    // hand tensors to each other across separate calls, so one training step
    // is one generation: the forward marks the step's beginning, and the
    // backward and optimizer step continue it.
    if (piecewise && !mutated_inputs.empty() && mutated_input_needs_eager(manager, inputs)) {
      ++pool_mutation_fallbacks;
      return lowered.run_with(eager_calls, inputs);
    }
    if (starts_step) manager.mark_step_begin();
    InvocationScope scope(manager);
    if (pool_input_candidates.empty()) return lowered.run_with(registration.calls, inputs);
    std::optional<TensorList> private_inputs = private_pool_inputs(manager, inputs);
    if (!private_inputs) {
      ++pool_mutation_fallbacks;
      return lowered.run_with(eager_calls, inputs);
    }
    return lowered.run_with(registration.calls, *private_inputs);
  }

  // Note [Pool inputs of piecewise programs]: an input may be a replay output
  // of an earlier call still living in the tree's pool (a fed-back output).
  // When this call starts a new generation, the path restarts at the root and
  // the first captured segment's replay writes into the pool blocks that hold
  // such an input. The manager protects the inputs of the function it replays
  // (they are copied into its placeholders first), but a *later* segment of
  // the same program reads the input only after that replay, and would read
  // the overwritten values: a silent wrong answer. So before the segments run,
  // each read-only input found in the tree's pool gets a private copy outside
  // the pool. Mutated inputs keep their storage (the write must land in the
  // caller's tensor). Only piecewise programs that may start a generation
  // (inference, forward) check; a single-segment program has no later segment,
  // and a backward or optimizer step continues the forward's generation, whose
  // outputs stay alive on the path. An input that the program returns as an
  // output (or a view of it) is checked in any program: the replay would
  // rewrite the block under that output, and the caller would see it change.
  // The check is one pool lookup per candidate input, and only an input found
  // in the pool is copied; params and buffers (static inputs) are never
  // candidates, so programs without such inputs pay nothing.
  // Note [Mutated pool inputs of piecewise programs]: a mutated input that
  // lives in the tree's pool (an earlier replay's output fed back) cannot get
  // a private copy (the write must land in it), and an earlier segment's
  // replay may overwrite its block before the segment that writes it runs
  // (fuzz seed 1248). Such a call runs all segments eagerly, which touches no
  // pool memory but the input's; one pool lookup per mutated input.
  // Note [Aliased mutated inputs of piecewise programs]: a mutated input that
  // shares memory with another input makes the other input's values depend
  // on when the write happens. Within one captured segment the tree manager
  // sees the aliasing and runs that segment eagerly, but an earlier segment's
  // replay had already handed a later one a view of its placeholder (a
  // snapshot of the input taken before the write) where eager code passes a
  // view of the caller's tensor, which the write then changes (fuzz seed
  // 5814). Such a call runs all segments eagerly; a few comparisons per
  // mutated input. (Note [Views of copied inputs] now hands on views of the
  // caller's tensor, which covers this case too; the check stays as the
  // cheaper, segment-independent guarantee.)
  bool mutated_input_needs_eager(const TreeManager& manager, const TensorList& inputs) const {
    runtime::CachingAllocator& allocator = runtime::device_context(device).allocator();
    for (size_t i : mutated_inputs) {
      if (i >= inputs.size() || !inputs[i].defined() || inputs[i].nbytes() == 0) continue;
      for (size_t other = 0; other < inputs.size(); ++other) {
        if (other == i || !inputs_overlap(inputs[i], inputs[other])) continue;
        log_once(LogLevel::kInfo, str_cat("cudagraphs:mutated_alias:", id),
                 str_cat("not captured this call: ", model_name, ": mutated input ", i,
                         " shares memory with input ", other, "; the program runs eagerly "
                         "when called so. Pass tensors that do not alias, or clone one"));
        return true;
      }
      std::optional<runtime::PoolId> pool = allocator.pool_containing(inputs[i].address());
      if (pool && *pool == manager.pool()) {
        log_once(LogLevel::kInfo, str_cat("cudagraphs:pool_mutation:", id),
                 str_cat("not captured this call: ", model_name, ": mutated input ", i,
                         " lives in the CUDA graph tree's pool (an earlier replay's output); "
                         "the program runs eagerly when called so. Clone it first"));
        return true;
      }
    }
    return false;
  }

  // Note [Private copies of mutated storage]: a private copy breaks the
  // sharing between the input and everything else over the same storage. When
  // a mutated input shares it (one fed-back output passed as both a returned
  // input and a mutated one: fuzz seed 80421), eager's write shows through the
  // returned view and the copy's would not; such a call runs eagerly, whose
  // kernels touch no pool memory but the inputs'. Returns nullopt then.
  std::optional<TensorList> private_pool_inputs(const TreeManager& manager,
                                                const TensorList& inputs) const {
    runtime::DeviceContext& context = runtime::device_context(device);
    runtime::CachingAllocator& allocator = context.allocator();
    TensorList result;
    for (size_t i : pool_input_candidates) {
      const runtime::Tensor& input = inputs[i];
      if (!input.defined() || input.nbytes() == 0) continue;
      std::optional<runtime::PoolId> pool = allocator.pool_containing(input.address());
      if (!pool || *pool != manager.pool()) continue;
      for (size_t m : mutated_inputs) {
        if (m < inputs.size() && inputs_overlap(input, inputs[m])) {
          log_once(LogLevel::kInfo, str_cat("cudagraphs:private_copy_alias:", id),
                   str_cat("not captured this call: ", model_name, ": input ", i,
                           " lives in the CUDA graph tree's pool and shares memory with mutated "
                           "input ", m, "; the program runs eagerly when called so. Clone one"));
          return std::nullopt;
        }
      }
      if (result.empty()) result = inputs;
      runtime::Tensor copy = runtime::Tensor::empty(input.shape(), input.dtype(), input.device());
      context.backend().copy_async(copy.data_ptr(), input.data_ptr(), input.nbytes(),
                                   runtime::CopyKind::kDeviceToDevice, context.current_stream());
      result[i] = std::move(copy);
    }
    return result.empty() ? inputs : result;
  }

  nlohmann::json json() const {
    nlohmann::json segments = nlohmann::json::array();
    for (size_t s = 0; s < plans.size(); ++s) {
      nlohmann::json entry{{"index", s}, {"captured", plans[s].captured}};
      if (!plans[s].captured) {
        entry["reason"] = plans[s].reason;
        entry["category"] = plans[s].category;
      }
      segments.push_back(std::move(entry));
    }
    return nlohmann::json{{"model", model_name},
                          {"device", device.str()},
                          {"calls", calls.load()},
                          {"fallback_segments", fallbacks},
                          {"pool_mutation_fallbacks", pool_mutation_fallbacks.load()},
                          {"segments", std::move(segments)}};
  }
};

std::string fallback_reason(const compiler::Segment& segment, const std::string& model,
                            size_t index) {
  std::string where = segment.node_name.empty() ? str_cat("segment", index) : segment.node_name;
  std::string op = segment.op.empty() ? "?" : segment.op;
  return str_cat("not captured: ", compiler::capture_blocker_name(segment.blocker), " at ", op,
                 " in ", model, ":", where);
}

class CudagraphsBackend : public ExecutionBackend {
 public:
  std::string name() const override { return "cudagraphs"; }

  Callable prepare(const LoweredProgram& lowered, const CompileOptions& options) override {
    runtime::Device device = options.device ? *options.device : lowered.program().device();
    bool graphs = !device.is_cpu();
    TreeConfig config = graphs ? tree_manager_for(device).config() : TreeConfig::from_environment();
    auto program = std::make_shared<PreparedProgram>(lowered, device);
    program->model_name = lowered.program().name();
    std::string stage = options.stage.empty() ? "" : str_cat(":", options.stage);
    int64_t program_id = next_program_id++;
    program->id = program_id;
    program->starts_step = options.stage == "forward";
    const auto& segments = lowered.segments();
    for (size_t s = 0; s < segments.size(); ++s) {
      const compiler::LoweredFunction& function = segments[s].function;
      program->eager_calls.push_back(function.call);
      SegmentPlan plan;
      compiler::Segment meta = function.segments.empty() ? compiler::Segment{} : function.segments[0];
      if (!graphs) {
        meta.blocker = CaptureBlocker::kCpuTensors;
        if (meta.op.empty()) meta.op = "program device";
        if (meta.node_name.empty()) meta.node_name = device.str();
      }
      size_t launches = meta.kernel_count + meta.gemm_count;
      if (!meta.capturable()) {
        plan.reason = fallback_reason(meta, program->model_name, s);
        plan.category = compiler::capture_blocker_name(meta.blocker);
        plan.fallback = true;
        ++program->fallbacks;
        if (config.strict) {
          throw NotCapturedError(str_cat(plan.reason, " (strict mode: GROVE_CUDAGRAPHS_STRICT / "
                                         "TreeConfig::strict forbids the eager fallback; remove "
                                         "the op or move the model to a graph device)"));
        }
        log_once(LogLevel::kInfo, str_cat("cudagraphs:", program_id, ":", s), plan.reason);
      } else if (launches < static_cast<size_t>(config.min_segment_kernels)) {
        plan.reason = str_cat("not captured: ", launches, " kernels < min_segment_kernels ",
                              config.min_segment_kernels, " in ", program->model_name,
                              ":segment", s);
        plan.category = "too few kernels";
        log_once(LogLevel::kDebug, str_cat("cudagraphs:", program_id, ":", s), plan.reason);
      } else {
        plan.captured = true;
        plan.spec.name = str_cat(program->model_name, stage, ":segment", s, "#", program_id);
        plan.spec.mode = mode_for(options);
        plan.spec.static_input_indices = function.static_input_indices;
        plan.spec.mutated_input_indices = function.mutated_input_indices;
        plan.spec.body = function.call;
        plan.spec.devices = function.devices;
        program->any_captured = true;
      }
      program->plans.push_back(std::move(plan));
    }
    // Note [Pool inputs of piecewise programs].
    if (graphs && program->any_captured && options.stage != "backward" &&
        options.stage != "optimizer") {
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
      program->piecewise = segments.size() > 1;
      size_t input_count = lowered.program().inputs().size();
      for (size_t i = 0; i < input_count; ++i) {
        if (listed(whole.static_input_indices, i)) continue;
        if (listed(whole.mutated_input_indices, i)) {
          program->mutated_inputs.push_back(i);
          continue;
        }
        if (program->piecewise || returned(i)) program->pool_input_candidates.push_back(i);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      programs_.push_back(program);
    }
    return [program](const TensorList& inputs) { return program->call(inputs); };
  }

  std::string stats_json() const override {
    nlohmann::json json{{"backend", "cudagraphs"}};
    nlohmann::json programs = nlohmann::json::array();
    std::optional<runtime::Device> device;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& program : programs_) {
        programs.push_back(program->json());
        if (program->any_captured) device = program->device;
      }
    }
    json["programs"] = std::move(programs);
    // The calling thread's tree for the device (created on first use).
    if (device) json["tree"] = tree_manager_for(*device).stats();
    return json.dump();
  }

  std::string dot() const override {
    std::optional<runtime::Device> device;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& program : programs_) {
        if (program->any_captured) device = program->device;
      }
    }
    return device ? tree_manager_for(*device).dot() : "";
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<PreparedProgram>> programs_;
};

// Registers at load time; the library is alwayslink so the linker keeps it.
const bool registered_at_load = [] {
  register_cudagraphs_backend();
  return true;
}();

}  // namespace

std::unique_ptr<ExecutionBackend> make_cudagraphs_backend() {
  return std::make_unique<CudagraphsBackend>();
}

void register_cudagraphs_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names = compiler::backends::backend_names();
    for (const std::string& name : names) {
      if (name == "cudagraphs") return;
    }
    compiler::backends::register_backend("cudagraphs", make_cudagraphs_backend);
  });
}

}  // namespace grove::cudagraph_trees::backend
