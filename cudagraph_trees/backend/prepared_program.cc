#include "cudagraph_trees/backend/prepared_program.h"

#include "cudagraph_trees/mutation_classifier.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/strided_copy_kernel.h"

namespace grove::cudagraph_trees::backend {
namespace {

using compiler::TensorList;

// Note [One input check per call]: a program's calls come only through the
// backend's callable, whose arguments the door checked.
constexpr compiler::lowering::InputCheck kChecked = compiler::lowering::InputCheck::kCheckedByDoor;

std::atomic<int64_t> next_program_id{0};

// Note [Private copies keep each element]: a pool input reaches a program in
// any layout (a transposed or broadcast view a PyTorch step made of a replay
// output), so its private copy (Note [Pool inputs of piecewise programs])
// takes each element from where the view has it, into a contiguous tensor of
// its shape; one flat copy only where the view is contiguous. nullopt for a
// strided view of more dimensions than the strided copy takes (the call then
// runs eagerly). Test: CudagraphsBackend.
// FedBackReplayOutputViewedWithOtherStridesKeepsItsValues.
std::optional<runtime::Tensor> private_copy(runtime::DeviceContext& context,
                                            const runtime::Tensor& input) {
  runtime::Tensor copy = runtime::Tensor::empty(input.shape(), input.dtype(), input.device());
  if (input.is_contiguous()) {
    context.platform().copy_async(copy.data_ptr(), input.data_ptr(), input.nbytes(),
                                  runtime::CopyKind::kDeviceToDevice, context.current_stream());
  } else if (input.dim() <= runtime::kMaxStridedCopyRank) {
    runtime::copy_to_contiguous(input, copy);
  } else {
    return std::nullopt;
  }
  return copy;
}

}  // namespace

std::shared_ptr<PreparedProgram> PreparedProgram::prepare(
    const compiler::lowering::LoweredProgram& lowered,
    const compiler::backends::CompileOptions& options) {
  runtime::Device device = options.device ? *options.device : lowered.program().device();
  bool graphs = !device.is_cpu();
  TreeConfig config = graphs ? tree_manager_for(device).config() : TreeConfig::from_environment();
  auto program = std::make_shared<PreparedProgram>(lowered, device);
  program->model_name_ = lowered.program().name();
  program->id_ = next_program_id++;
  program->starts_step_ = options.stage == compiler::backends::Stage::kForward;
  program->updates_step_ = options.stage == compiler::backends::Stage::kOptimizer;
  SegmentContext context{options, config, program->model_name_, device, graphs, program->id_};
  const auto& segments = lowered.segments();
  for (size_t s = 0; s < segments.size(); ++s) {
    const compiler::LoweredFunction& function = segments[s].function;
    program->eager_calls_.push_back(function.call);
    SegmentPlan plan = plan_segment(function, s, context);
    if (plan.fallback) ++program->fallbacks_;
    if (plan.captured) program->any_captured_ = true;
    program->plans_.push_back(std::move(plan));
  }
  if (graphs && program->any_captured_) program->checks_ = plan_input_checks(lowered, options);
  return program;
}

const PreparedProgram::Registration& PreparedProgram::registration_in(TreeManager& manager) {
  struct LastLookup {
    int64_t program = -1;
    uint64_t pool = 0;
    const Registration* registration = nullptr;
  };
  thread_local LastLookup last;
  const uint64_t pool = manager.pool().value;
  if (last.program == id_ && last.pool == pool) [[likely]]
    return *last.registration;
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = registrations_.find(pool);
  if (found == registrations_.end()) {
    Registration registration;
    registration.ids.resize(plans_.size());
    registration.calls = eager_calls_;
    size_t leased = 0;
    for (size_t s = 0; s < plans_.size(); ++s) {
      if (!plans_[s].captured) continue;
      FunctionId function_id = manager.register_function(plans_[s].spec);
      registration.ids[s] = function_id;
      registration.calls[s] = [&manager, function_id](const TensorList& segment_inputs) {
        return manager.run(function_id, segment_inputs);
      };
      ++leased;
    }
    registration.lease = manager.lease_functions(leased);
    found = registrations_.emplace(pool, std::move(registration)).first;
  }
  last = LastLookup{id_, pool, &found->second};  // map nodes never move
  return found->second;
}

TensorList PreparedProgram::call(const TensorList& inputs) {
  ++calls_;
  // Note [Stale inputs throw first] (tree_manager.h): before any segment writes.
  if (plans_.size() != 1 || !any_captured_) throw_if_any_stale(inputs);
  if (!any_captured_) return lowered_.run_with(eager_calls_, inputs, kChecked);
  TreeManager& manager = tree_manager_for(device_);
  const Registration& registration = registration_in(manager);
  // Note [Training steps]: a Trainer's forward, backward and optimizer step
  // hand tensors to each other across separate calls, so one training step
  // is one generation: the forward marks the step's beginning, and the
  // backward and optimizer step continue it. A forward that follows a forward
  // still waiting for its backward continues the step too (micro-batches:
  // several forwards, then their backwards, read each other's activations).
  // Tests: CudagraphsTraining.SmallMlpAdamWMatchesEagerBitwiseOverFiveSteps,
  // CudagraphsTraining.MicroBatchForwardsThenBackwardsMatchEagerBitwise.
  if (checks_.piecewise && !checks_.mutated_inputs.empty() &&
      mutated_input_needs_eager(manager, inputs)) {
    ++pool_mutation_fallbacks_;
    return lowered_.run_with(eager_calls_, inputs, kChecked);
  }
  // Note [A training step begins with its named invocation] (generations.h).
  if (starts_step_ && !manager.forward_waits_for_backward()) manager.begin_training_step();
  // Note [An optimizer step continues its training step] (generations.h).
  if (updates_step_) manager.continue_training_step();
  InvocationScope scope(manager);
  if (checks_.pool_input_candidates.empty())
    return lowered_.run_with(registration.calls, inputs, kChecked);
  std::optional<TensorList> private_inputs = private_pool_inputs(manager, inputs);
  if (!private_inputs) {
    ++pool_mutation_fallbacks_;
    return lowered_.run_with(eager_calls_, inputs, kChecked);
  }
  return lowered_.run_with(registration.calls, *private_inputs, kChecked);
}

bool PreparedProgram::mutated_input_needs_eager(const TreeManager& manager,
                                                const TensorList& inputs) const {
  runtime::CachingAllocator& allocator = runtime::device_context(device_).allocator();
  for (size_t i : checks_.mutated_inputs) {
    if (i >= inputs.size() || !inputs[i].defined() || inputs[i].nbytes() == 0) continue;
    for (size_t other = 0; other < inputs.size(); ++other) {
      if (other == i || !inputs_overlap(inputs[i], inputs[other])) continue;
      log_once(LogLevel::kInfo, str_cat("cudagraphs:mutated_alias:", id_),
               str_cat("not captured this call: ", model_name_, ": mutated input ", i,
                       " shares memory with input ", other,
                       "; the program runs eagerly "
                       "when called so. Pass tensors that do not alias, or clone one"));
      return true;
    }
    std::optional<runtime::PoolId> pool = allocator.pool_containing(inputs[i].address());
    if (pool && *pool == manager.pool()) {
      log_once(LogLevel::kInfo, str_cat("cudagraphs:pool_mutation:", id_),
               str_cat("not captured this call: ", model_name_, ": mutated input ", i,
                       " lives in the CUDA graph tree's pool (an earlier replay's output); "
                       "the program runs eagerly when called so. Clone it first"));
      return true;
    }
  }
  return false;
}

std::optional<TensorList> PreparedProgram::private_pool_inputs(const TreeManager& manager,
                                                               const TensorList& inputs) const {
  runtime::DeviceContext& context = runtime::device_context(device_);
  runtime::CachingAllocator& allocator = context.allocator();
  TensorList result;
  for (size_t i : checks_.pool_input_candidates) {
    const runtime::Tensor& input = inputs[i];
    if (!input.defined() || input.nbytes() == 0) continue;
    std::optional<runtime::PoolId> pool = allocator.pool_containing(input.address());
    if (!pool || *pool != manager.pool()) continue;
    for (size_t m : checks_.mutated_inputs) {
      if (m < inputs.size() && inputs_overlap(input, inputs[m])) {
        log_once(LogLevel::kInfo, str_cat("cudagraphs:private_copy_alias:", id_),
                 str_cat("not captured this call: ", model_name_, ": input ", i,
                         " lives in the CUDA graph tree's pool and shares memory with mutated "
                         "input ",
                         m, "; the program runs eagerly when called so. Clone one"));
        return std::nullopt;
      }
    }
    std::optional<runtime::Tensor> copy = private_copy(context, input);
    if (!copy) {
      log_once(LogLevel::kInfo, str_cat("cudagraphs:private_copy_rank:", id_),
               str_cat("not captured this call: ", model_name_, ": input ", i,
                       " lives in the CUDA graph tree's pool as a strided view of ", input.dim(),
                       " dimensions; the program runs eagerly when called so"));
      return std::nullopt;
    }
    if (result.empty()) result = inputs;
    result[i] = std::move(*copy);
  }
  return result.empty() ? inputs : result;
}

compiler::backends::ProgramStats PreparedProgram::stats() const {
  compiler::backends::ProgramStats stats{.model = model_name_,
                                         .device = device_.str(),
                                         .calls = calls_.load(),
                                         .fallback_segments = fallbacks_,
                                         .pool_mutation_fallbacks = pool_mutation_fallbacks_.load(),
                                         .lowered = lowered_.describe()};
  for (size_t s = 0; s < plans_.size(); ++s) {
    stats.segments.push_back({.index = s, .captured = plans_[s].captured});
    if (!plans_[s].captured) {
      stats.segments.back().reason = plans_[s].reason;
      stats.segments.back().category = plans_[s].category;
    }
  }
  return stats;
}

}  // namespace grove::cudagraph_trees::backend
