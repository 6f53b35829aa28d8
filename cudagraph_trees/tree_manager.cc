#include "cudagraph_trees/tree_manager.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

#include "cudagraph_trees/mutation_classifier.h"
#include "cudagraph_trees/tree_node.h"
#include "runtime/device_context.h"
#include "runtime/logging.h"

namespace grove::cudagraph_trees {

// Note [Replay fast path]
// A call that replays an existing node does, in order: one branch on the
// function's whole-function fallback; one generation check (an integer
// compare; a new generation ends a replayed path without touching memory);
// one vector index to find the candidate children of the current node (slots
// are indexed by the dense FunctionId, never hashed); per candidate, one
// address comparison per managed and static input and then one layout
// comparison (Note [Layouts of checked inputs]), a liveness read per output
// that must be dead (usually none) and a layout comparison per copied input;
// one device-to-device copy per copied input into its pool placeholder; the
// cached output tensors (one vector of Tensors built on the first replay,
// then copied); one graph launch. Nothing here calls the allocator, takes a
// lock, hashes the inputs or walks the path: everything that does (input
// classification, output aliasing, liveness bookkeeping, checkpoints) ran
// once at record time and was stored as flat vectors on the node. The only
// map lookup left is the runtime's current-stream lookup (pointer-keyed).
// Keep it so: anything new on this path must be O(1) or per checked input.

// Note [Replay outputs]
// A replayed node's outputs are tensors over Storage objects that do not own
// their memory: they point at the addresses recorded in the pool, and the
// next replay overwrites them (as in PyTorch). The node keeps them cached and
// returns the same tensors every time. When the manager must allocate again
// after a replay (a warm-up or recording of a new branch), it restores the
// pool to the current node's checkpoint and passes the outputs still alive to
// the allocator, which makes their storages owners of their blocks again; the
// caches on the path are dropped first so that only users' references count.

// Note [Stale outputs]
// Warm-up and recording outputs own pool blocks. When their path ends because
// a new generation begins, the blocks are reclaimed for the next recordings;
// any storage still alive is poisoned (Storage::poison), so every view of it
// throws StaleTensorError naming the function, the output and the remedy.
// Replay outputs are not poisoned at generation ends: they are overwritten,
// which is the documented contract of a replay.

const char* path_state_name(PathState state) {
  switch (state) {
    case PathState::kNone:
      return "none";
    case PathState::kWarmup:
      return "warmup";
    case PathState::kRecording:
      return "recording";
    case PathState::kExecution:
      return "execution";
  }
  return "?";
}

void throw_if_any_stale(const TensorList& inputs) {
  // Note [Stale inputs throw first].
  for (const runtime::Tensor& input : inputs) {
    if (input.defined() && (input.storage()->is_poisoned() || input.storage()->is_overwritten()))
        [[unlikely]]
      (void)input.storage()->data();  // throws StaleTensorError with the origin
  }
}

namespace {
uint64_t next_manager_serial() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

// Note [Managers destroyed at process exit]: a manager that a thread-local or
// static owner destroys once exit() has begun finds the CUDA runtime already
// unloading (its own atexit handler ran) and every call failing; the driver
// releases the process's graphs and memory anyway. So from exit on, a manager
// is dropped without its shutdown and without the error it would log. The
// flag's handler is registered when the first manager is made, after the
// runtime started, so it runs before the runtime's teardown (atexit runs in
// reverse order). Test: gpu_torch_backend_test.py's
// test_a_process_using_grove_exits_without_errors (cuda).
std::atomic<bool> process_exiting{false};

void note_process_exit() { process_exiting.store(true); }

void watch_process_exit() {
  static const bool registered = std::atexit(note_process_exit) == 0;
  (void)registered;
}
}  // namespace

TreeManager::TreeManager(runtime::Device device, TreeConfig config)
    : device_(device),
      serial_(next_manager_serial()),
      config_(config),
      context_(runtime::device_context(device)),
      platform_(context_.platform()),
      allocator_(context_.allocator()),
      classifier_(make_mutation_classifier(config.mutation_policy)) {
  GROVE_CHECK_AS(DeviceError, device.supports_graphs(),
                 "cannot create a CUDA graph tree manager "
                 "for ",
                 device.str(), ": that device runs eagerly; use a sim or cuda device");
  config_.validate();
  watch_process_exit();
  pool_ = allocator_.create_pool();
  capture_stream_ = platform_.create_stream();
  // Note [Function controls]: warm-ups and recordings allocate on the
  // capture stream, so the reserved segment serves them.
  if (config_.initial_pool_bytes > 0) {
    allocator_.reserve(pool_, config_.initial_pool_bytes, capture_stream_);
  }
  caller_ready_ = platform_.create_event(false);
  capture_done_ = platform_.create_event(false);
  lease_state_ = std::make_shared<LeaseState>();
  lease_state_->manager = this;
}

TreeManager::~TreeManager() {
  {
    std::lock_guard<std::mutex> lock(lease_state_->mutex);
    lease_state_->manager = nullptr;
  }
  if (process_exiting.load()) return;  // Note [Managers destroyed at process exit]
  try {
    shutdown();
  } catch (const std::exception& error) {
    log(LogLevel::kError,
        str_cat("cudagraph tree manager for ", device_.str(), ": shutdown failed: ", error.what()));
  }
}

FunctionId TreeManager::register_function(FunctionSpec spec) {
  GROVE_CHECK(!shut_down_, "register_function('", spec.name, "') on a tree manager for ",
              device_.str(), " that was shut down; use tree_manager_for() for a new one");
  FunctionId id = registry_.add(std::move(spec));
  RegisteredFunction& function = registry_.at(id);
  for (runtime::Device touched : function.spec.devices) {
    if (touched.is_cpu()) {
      decide_eager(function, function.eager,
                   {FallbackCategory::kCpuTensors, "the function touches cpu tensors"});
      break;
    }
    if (touched != device_) {
      decide_eager(function, function.eager,
                   {FallbackCategory::kSeveralDevices,
                    str_cat("the function touches ", touched.str(), " besides ", device_.str())});
      break;
    }
  }
  // Note [Function controls].
  if (!function.eager && function.spec.never_capture) {
    decide_eager(function, function.eager,
                 {FallbackCategory::kSkipped, "its spec marks it never to be captured"});
  } else if (const std::string* entry = config_.skip_entry_for(function.spec.name);
             !function.eager && entry != nullptr) {
    decide_eager(function, function.eager,
                 {FallbackCategory::kSkipped,
                  str_cat("GROVE_CUDAGRAPHS_SKIP (TreeConfig::skip_functions) entry '", *entry,
                          "' names it")});
  }
  return id;
}

void TreeManager::set_mutation_classifier(std::unique_ptr<MutationClassifier> classifier) {
  GROVE_CHECK(classifier != nullptr, "set_mutation_classifier(nullptr): pass a classifier");
  classifier_ = std::move(classifier);
}

TensorList TreeManager::run(FunctionId id, const TensorList& inputs) {
  GROVE_CHECK(!shut_down_, "run() on the tree manager for ", device_.str(),
              " after shutdown(); use tree_manager_for() for a new one");
  RegisteredFunction& function = registry_.at(id);
  generations_.note_call();
  TensorList result;
  dispatch(function, inputs, nullptr, result);
  generations_.after_call(function.spec.mode);
  return result;
}

TensorList TreeManager::run(FunctionId id, TensorList&& inputs) {
  GROVE_CHECK(!shut_down_, "run() on the tree manager for ", device_.str(),
              " after shutdown(); use tree_manager_for() for a new one");
  RegisteredFunction& function = registry_.at(id);
  generations_.note_call();
  TensorList result;
  dispatch(function, inputs, &inputs, result);
  generations_.after_call(function.spec.mode);
  return result;
}

inline void TreeManager::replay(TreeNode* node, const TensorList& inputs, TensorList* consumable,
                                TensorList& result) {
  // Note [A replay that throws]: a stale input (a fed-back output that a new
  // generation invalidated) throws StaleTensorError while the node binds its
  // inputs, before it launches or emits anything. The path must then stay
  // where it was: a path that claims this node ran would make the next call
  // record under it and restore its checkpoint, whose output blocks belong
  // to no live output.
  PathNode* previous = current_;
  PathState previous_state = state_;
  int64_t previous_generation = generation_;
  current_ = node;
  state_ = PathState::kExecution;
  generation_ = generations_.current();
  try {
    node->replay(inputs, consumable, platform_, context_.current_stream(), counters_, result,
                 config_.clone_kept_outputs ? &allocator_ : nullptr, retire_before_next_replay_);
  } catch (...) {
    current_ = previous;
    state_ = previous_state;
    generation_ = previous_generation;
    throw;
  }
  ++counters_.replays;
}

void TreeManager::dispatch(RegisteredFunction& function, const TensorList& inputs,
                           TensorList* consumable, TensorList& result) {
  if (function.eager) [[unlikely]] {
    throw_if_any_stale(inputs);  // Note [Stale inputs throw first]
    run_eager(function, inputs, *function.eager, result);
    return;
  }
  // Note [Replay fast path].
  if (state_ == PathState::kExecution &&
      generations_.can_start_new_generation(generation_, function.spec.mode)) {
    end_path(false);
  }
  if (state_ == PathState::kExecution || state_ == PathState::kNone) {
    uint32_t index = function.id.value;
    ChildSlot* slot = current_ != nullptr
                          ? current_->find_slot(function.id)
                          : (index < root_slots_.size() ? &root_slots_[index] : nullptr);
    if (slot != nullptr && !slot->eager) {
      for (TreeNode* child : slot->children) {
        if (child->check(inputs) == InvariantStatus::kOk) {
          replay(child, inputs, consumable, result);
          return;
        }
      }
    }
  }
  slow_path(function, inputs, consumable, result);
}

void TreeManager::slow_path(RegisteredFunction& function, const TensorList& inputs,
                            TensorList* consumable, TensorList& result) {
  if (log_enabled(LogLevel::kDebug)) {
    // GROVE_LOG=debug traces the slow path's decisions: which generation a
    // call lands in and the path it finds (a stale or reclaimed input's story).
    log(LogLevel::kDebug,
        str_cat(function.describe(), ": slow path in ", path_state_name(state_),
                " (path generation ", generation_, ", current ", generations_.current(),
                ", outer invocation ", OuterInvocation::current(), ", pending backward ",
                generations_.pending_backward() ? "yes" : "no", ")"));
  }
  if (state_ == PathState::kRecording || state_ == PathState::kWarmup) {
    try_end_recording_or_warmup(function);
  }
  // Note [Stale inputs throw first]: after a generation that ended here
  // poisoned its outputs, which this call may have been handed.
  throw_if_any_stale(inputs);
  check_static_input_indices(function, inputs);
  if (std::optional<EagerDecision> blocker = device_blocker(function, inputs)) {
    decide_eager(function, function.eager, std::move(*blocker));
    run_eager(function, inputs, *function.eager, result);
    return;
  }
  if (function.spec.capture_sizes) [[unlikely]] {
    // Note [Function controls]: another size runs eagerly, per call.
    if (std::optional<std::string> why = function.spec.capture_sizes->rejects(inputs)) {
      log_once(LogLevel::kInfo,
               str_cat("cudagraph_trees:", serial_, ":", function.id.value, ":uncaptured size"),
               str_cat("not captured: ", function.describe(),
                       " runs eagerly for sizes outside "
                       "its capture sizes: ",
                       *why));
      run_eager(function, inputs, EagerDecision{FallbackCategory::kUncapturedSize, std::move(*why)},
                result);
      return;
    }
  }
  ChildSlot& slot = slot_for(current_, function.id);
  if (!slot.mutation_checked) classify_mutation(function, inputs, slot);
  if (slot.eager) {
    run_eager(function, inputs, *slot.eager, result);
    return;
  }
  if (state_ == PathState::kWarmup ||
      (!function.spec.skip_warmup && !function.warmed_up_for(inputs))) {
    retire_ended_paths(inputs);
    if (state_ == PathState::kExecution) restore_checkpoint();
    warmup(function, inputs, consumable, result);
    return;
  }
  if (state_ != PathState::kRecording) {
    if (replay_or_prepare_rerecord(function, inputs, consumable, result, slot)) return;
  } else if (reclassified_as_eager(function, inputs, slot, result)) {
    return;  // mutations are re-checked before every new recording
  }
  retire_ended_paths(inputs);
  if (!record(function, inputs, consumable, result)) {
    run_eager(function, inputs, *slot_for(current_, function.id).eager, result);
  }
}

void TreeManager::retire_ended_paths(const TensorList& inputs) {
  // Note [Kept replay outputs]: a warm-up or recording allocates pool memory
  // that ended paths' replay outputs may occupy (they own no blocks). Inputs
  // among them now throw before the body runs (Note [Stale inputs throw first]).
  if (retire_before_next_replay_.empty()) return;
  for (TreeNode* ended : retire_before_next_replay_) {
    ended->retire_kept_outputs(platform_, context_.current_stream(), counters_,
                               config_.clone_kept_outputs ? &allocator_ : nullptr);
  }
  retire_before_next_replay_.clear();
  throw_if_any_stale(inputs);
}

void TreeManager::check_static_input_indices(const RegisteredFunction& function,
                                             const TensorList& inputs) const {
  for (size_t index : function.spec.static_input_indices) {
    GROVE_CHECK(index < inputs.size(), function.describe(), ": static input index ", index,
                " but the call has ", inputs.size(), " inputs; fix the function's spec");
  }
}

// Why no child of the current node replayed a call: the first failure, the
// first one not explained by a moved static input or a new shape, and the
// last child tried.
struct TreeManager::ChildMisses {
  InvariantStatus first_failure = InvariantStatus::kOk;
  InvariantStatus first_unexpected = InvariantStatus::kOk;
  bool shape_changed = false;
  TreeNode* last = nullptr;
};

bool TreeManager::replay_or_prepare_rerecord(RegisteredFunction& function, const TensorList& inputs,
                                             TensorList* consumable, TensorList& result,
                                             ChildSlot& slot) {
  // The fast path tried these already unless a recording or warm-up path just ended.
  ChildMisses misses;
  if (TreeNode* match = find_replayable_child(slot, inputs, misses)) {
    replay(match, inputs, consumable, result);
    return true;
  }
  // A path whose outputs all died (or whose generation ended) lets this call start at a root.
  if (current_ != nullptr && try_end_execution(function)) {
    slow_path(function, inputs, consumable, result);
    return true;
  }
  // Inputs may now come from outside the pool.
  if (reclassified_as_eager(function, inputs, slot, result)) return true;
  if (misses.last != nullptr && !function.has_mutated_inputs()) {
    demote_moving_managed_inputs(function, inputs, *misses.last, slot);
    if (slot.eager) {  // ManagedInputPolicy::kEager
      run_eager(function, inputs, *slot.eager, result);
      return true;
    }
  }
  if (misses.first_failure != InvariantStatus::kOk) count_rerecord(function, inputs, misses);
  if (misses.first_unexpected != InvariantStatus::kOk &&
      ++slot.unexpected_rerecords > config_.rerecord_limit) {
    decide_eager_after_rerecord_limit(function, slot, misses.first_unexpected);
    run_eager(function, inputs, *slot.eager, result);
    return true;
  }
  if (misses.shape_changed && ++slot.shape_rerecords == config_.shape_warn_limit &&
      !function.shape_warning_given) {
    function.shape_warning_given = true;
    log(LogLevel::kWarn,
        str_cat(function.describe(), ": recorded a graph for ", slot.shape_rerecords + 1,
                " distinct input shapes; each costs a recording and pool memory. Pad inputs "
                "to a few fixed shapes (shape buckets)"));
  }
  if (state_ == PathState::kExecution) restore_checkpoint();
  return false;
}

TreeNode* TreeManager::find_replayable_child(const ChildSlot& slot, const TensorList& inputs,
                                             ChildMisses& misses) const {
  for (TreeNode* child : slot.children) {
    InvariantStatus status = child->check(inputs);
    if (status == InvariantStatus::kOk) return child;
    if (misses.first_failure == InvariantStatus::kOk) misses.first_failure = status;
    if (status == InvariantStatus::kCopiedInputChanged ||
        status == InvariantStatus::kCheckedInputLayoutChanged) {
      misses.shape_changed = true;
    } else if (status != InvariantStatus::kStaticInputMoved &&
               misses.first_unexpected == InvariantStatus::kOk) {
      misses.first_unexpected = status;
    }
    misses.last = child;
  }
  return nullptr;
}

bool TreeManager::reclassified_as_eager(const RegisteredFunction& function,
                                        const TensorList& inputs, ChildSlot& slot,
                                        TensorList& result) {
  if (!function.has_mutated_inputs()) return false;
  classify_mutation(function, inputs, slot);
  if (!slot.eager) return false;
  run_eager(function, inputs, *slot.eager, result);
  return true;
}

void TreeManager::demote_moving_managed_inputs(const RegisteredFunction& function,
                                               const TensorList& inputs, const TreeNode& last,
                                               ChildSlot& slot) {
  // Managed inputs that keep moving are copied in later recordings.
  std::vector<bool> aliased(inputs.size(), false);
  for (const OutputRecord& record : last.outputs().records()) {
    if (record.kind == OutputKind::kAliasesInput) aliased[record.input_index] = true;
  }
  for (size_t index : last.inputs().moved_managed_inputs(inputs)) {
    if (aliased[index]) continue;
    if (slot.managed_moves.size() <= index) slot.managed_moves.resize(index + 1, 0);
    if (++slot.managed_moves[index] < config_.managed_input_move_limit) continue;
    if (config_.managed_input_policy == ManagedInputPolicy::kEager) {
      decide_eager(
          function, slot.eager,
          {FallbackCategory::kMovingManagedInput,
           str_cat("pool-managed input ", index, " changed address ", slot.managed_moves[index],
                   " times under one parent and GROVE_CUDAGRAPHS_MANAGED_INPUT_POLICY "
                   "is eager")});
      return;
    }
    if (slot.demoted.insert(index).second) {
      ++counters_.demoted_inputs;
      log(LogLevel::kInfo,
          str_cat(function.describe(), ": pool-managed input ", index, " changed address ",
                  slot.managed_moves[index], " times; it is copied from now on"));
    }
  }
}

void TreeManager::count_rerecord(const RegisteredFunction& function, const TensorList& inputs,
                                 const ChildMisses& misses) {
  ++counters_.rerecords;
  ++counters_.rerecord_reasons[invariant_status_text(misses.first_failure)];
  if (log_enabled(LogLevel::kDebug)) {
    log(LogLevel::kDebug, str_cat("re-recording ", function.describe(), " under node ",
                                  current_ != nullptr ? str_cat(current_->id()) : "none", ": ",
                                  invariant_status_text(misses.first_failure), "; ",
                                  misses.last->inputs().describe_mismatches(inputs)));
  }
}

void TreeManager::decide_eager_after_rerecord_limit(const RegisteredFunction& function,
                                                    ChildSlot& slot, InvariantStatus reason) {
  decide_eager(
      function, slot.eager,
      {FallbackCategory::kRerecordLimit,
       str_cat("exceeded the re-record limit (", config_.rerecord_limit, ") under graph node ",
               current_ != nullptr ? str_cat(current_->id()) : "none (root)",
               "; last reason: ", invariant_status_text(reason),
               ". Raise GROVE_CUDAGRAPHS_RERECORD_LIMIT or keep input addresses "
               "stable")});
}

void TreeManager::run_eager(const RegisteredFunction& function, const TensorList& inputs,
                            const EagerDecision& decision, TensorList& result) {
  if (config_.strict && !fallback_requested(decision.category)) {
    throw NotCapturedError(str_cat(function.describe(), " was not captured: ", decision.message,
                                   " (strict mode, GROVE_CUDAGRAPHS_STRICT=1)"));
  }
  ++counters_.eager_calls;
  ++counters_.fallback_calls[fallback_category_name(decision.category)];
  result = function.spec.body(inputs);
}

void TreeManager::decide_eager(const RegisteredFunction& function,
                               std::optional<EagerDecision>& slot, EagerDecision decision) {
  ++counters_.fallback_decisions[fallback_category_name(decision.category)];
  log_once(LogLevel::kInfo,
           str_cat("cudagraph_trees:", serial_, ":", function.id.value, ":",
                   fallback_category_name(decision.category)),
           str_cat("not captured: ", function.describe(), " runs eagerly: ", decision.message));
  slot = std::move(decision);
}

std::optional<EagerDecision> TreeManager::device_blocker(const RegisteredFunction& function,
                                                         const TensorList& inputs) const {
  (void)function;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    runtime::Device where = inputs[i].device();
    if (where.is_cpu()) {
      return EagerDecision{FallbackCategory::kCpuTensors, str_cat("input ", i, " is on cpu")};
    }
    if (where != device_) {
      return EagerDecision{FallbackCategory::kSeveralDevices,
                           str_cat("input ", i, " is on ", where.str(),
                                   ", the manager's device is ", device_.str())};
    }
  }
  return std::nullopt;
}

void TreeManager::classify_mutation(const RegisteredFunction& function, const TensorList& inputs,
                                    ChildSlot& slot) {
  slot.mutation_checked = true;
  if (!function.has_mutated_inputs()) return;
  std::unordered_set<const void*> managed = path_output_addresses();
  MutationQuery query{function, inputs,
                      [&](size_t index) {
                        const runtime::Tensor& input = inputs[index];
                        return input.defined() && managed.count(input.storage()->address()) > 0;
                      },
                      [&](size_t index) {
                        const runtime::Tensor& input = inputs[index];
                        return input.defined() && input.storage()->address() != nullptr &&
                               in_pool(input.storage()->address());
                      }};
  MutationVerdict verdict = classifier_->classify(query);
  if (!verdict.capture) {
    decide_eager(function, slot.eager, {FallbackCategory::kMutatedInputs, verdict.reason});
  }
}

ChildSlot& TreeManager::slot_for(PathNode* parent, FunctionId id) {
  if (parent != nullptr) return parent->slot(id);
  if (id.value >= root_slots_.size()) root_slots_.resize(id.value + 1);
  return root_slots_[id.value];
}

}  // namespace grove::cudagraph_trees
