// TreeManager's allocating paths: warm-up (eager inside the pool), recording
// (capture, instantiate, first replay) and the checkpoint restore that comes
// before either after a replay (Note [Replay outputs] in tree_manager.cc).
#include <mutex>
#include <unordered_set>

#include "cudagraph_trees/capture_lock.h"
#include "cudagraph_trees/tree_manager.h"
#include "cudagraph_trees/tree_node.h"
#include "runtime/collectives/held_locks.h"
#include "runtime/device_context.h"
#include "runtime/logging.h"

namespace grove::cudagraph_trees {
namespace {

// Routes the calling thread's allocations to a pool for a scope.
class PoolRouting {
 public:
  PoolRouting(runtime::CachingAllocator& allocator, runtime::PoolId pool)
      : allocator_(allocator), pool_(pool) {
    allocator_.begin_allocate_to_pool(pool_);
  }
  ~PoolRouting() { allocator_.end_allocate_to_pool(pool_); }
  PoolRouting(const PoolRouting&) = delete;
  PoolRouting& operator=(const PoolRouting&) = delete;

 private:
  runtime::CachingAllocator& allocator_;
  runtime::PoolId pool_;
};

}  // namespace

// Note [Restores keep every segment]
// A node's checkpoint lists the pool's segments as they were when it was
// recorded; segments created later (by its descendants' warm-ups and
// recordings, or by a capture that failed) are unknown to it, and the
// allocator's restore hands unknown segments back to the platform. But graphs
// of other branches still write into them, and their checkpoints name them.
// So a restore first adds every current segment the checkpoint lacks, as one
// free block: the pool then only grows while the tree lives, as in PyTorch,
// and sibling branches reuse these segments instead of reserving new ones.
runtime::PoolCheckpoint TreeManager::checkpoint_keeping_segments(
    const runtime::PoolCheckpoint& checkpoint) const {
  runtime::PoolCheckpoint target = checkpoint;
  std::unordered_set<const void*> known;
  for (const runtime::SegmentState& segment : checkpoint.segments) known.insert(segment.base);
  for (const runtime::SegmentState& segment : allocator_.checkpoint(pool_).segments) {
    if (known.count(segment.base) > 0) continue;
    runtime::SegmentState free_segment;
    free_segment.base = segment.base;
    free_segment.size = segment.size;
    free_segment.stream = segment.stream;
    free_segment.blocks.push_back(runtime::BlockState{0, segment.size, false, segment.stream});
    target.segments.push_back(std::move(free_segment));
  }
  return target;
}

void TreeManager::restore_checkpoint() {
  GROVE_CHECK(state_ == PathState::kExecution && current_ != nullptr && !current_->is_warmup(),
              "internal: checkpoint restore outside a replayed path (state ",
              path_state_name(state_), ")");
  ++counters_.checkpoint_restores;
  std::vector<PathNode*> nodes = path();
  for (PathNode* node : nodes) static_cast<TreeNode*>(node)->outputs().drop_cache();
  std::vector<runtime::StoragePtr> live;
  std::unordered_set<const void*> seen;
  for (PathNode* node : nodes) {
    for (const TrackedStorage& storage : node->tracked()) {
      runtime::StoragePtr alive = storage.lock_if_live();
      // A poisoned storage gave its block back when it was invalidated; it
      // must not own one again (Note [A replay that throws], tree_manager.cc).
      if (alive == nullptr || alive->is_poisoned()) continue;
      if (seen.insert(storage.address).second) live.push_back(alive);
    }
  }
  allocator_.restore(
      pool_, checkpoint_keeping_segments(static_cast<TreeNode*>(current_)->checkpoint()), live);
  if (log_enabled(LogLevel::kDebug)) {
    log(LogLevel::kDebug,
        str_cat("restored the pool to graph node ", current_->id(), "'s checkpoint with ",
                live.size(), " live outputs (restore ", counters_.checkpoint_restores, ")"));
  }
}

void TreeManager::warmup(RegisteredFunction& function, const TensorList& inputs,
                         TensorList* consumable, TensorList& result) {
  std::lock_guard<std::mutex> lock(capture_lock(device_));
  // Note [Waiting under the capture lock] (runtime/collectives/held_locks.h).
  runtime::collectives::HeldLock held(capture_lock(device_));
  check_pool_inputs_are_owned(function, inputs);  // Note [Inputs in reclaimed pool memory]
  runtime::StreamHandle caller = context_.current_stream();
  order_capture_after(caller);
  {
    runtime::StreamGuard stream(device_, capture_stream_);
    PoolRouting routing(allocator_, pool_);
    result = function.spec.body(inputs);
  }
  order_caller_after(caller);
  if (!function.warmed_up_for(inputs)) function.warmed_signatures.push_back(signature_of(inputs));
  std::vector<TrackedStorage> tracked =
      track_warmup_outputs(result, inputs, [this](const void* a) { return in_pool(a); });
  if (consumable != nullptr) consumable->clear();
  int64_t generation = generations_.current();
  auto node = std::make_unique<WarmupNode>(current_, function, next_warmup_id_--, generation,
                                           std::move(tracked));
  current_ = node.get();
  warmup_path_.push_back(std::move(node));
  state_ = PathState::kWarmup;
  generation_ = generation;
  ++counters_.warmups;
  move_kept_state_out_of_pool(function);
}

bool TreeManager::record(RegisteredFunction& function, const TensorList& inputs,
                         TensorList* consumable, TensorList& result) {
  std::unique_lock<std::mutex> lock(capture_lock(device_));
  // Note [Waiting under the capture lock] (runtime/collectives/held_locks.h).
  runtime::collectives::HeldLock held(capture_lock(device_));
  GROVE_CHECK(current_ == nullptr || !current_->is_warmup(),
              "internal: recording after a warm-up on the same path");
  check_pool_inputs_are_owned(function, inputs);  // Note [Inputs in reclaimed pool memory]
  auto* parent = static_cast<TreeNode*>(current_);
  ChildSlot& slot = slot_for(current_, function.id);
  std::vector<PathNode*> ancestors = path();
  std::vector<const TrackedStorage*> live_before = live_outputs(ancestors);
  TreeNode::Parts parts;
  if (parent != nullptr) {
    for (const TrackedStorage* storage : parent->live_after()) {
      if (!storage->live()) parts.expected_dead_before.push_back(storage);
    }
  }

  runtime::StreamHandle caller = context_.current_stream();
  order_capture_after(caller);
  TensorList bound;
  parts.inputs = bind_inputs(function, inputs, slot, bound);
  auto graph = std::make_unique<runtime::GraphRecording>(device_);
  TensorList outputs;
  try {
    capture(function, bound, *graph, outputs);
  } catch (const CaptureViolation& violation) {
    outputs.clear();
    bound.clear();
    order_caller_after(caller);
    decide_eager_after_capture_failure(function, slot, violation);
    return false;
  }
  if (graph->node_count() == 0) {
    graph.reset();  // kernel-free: replays only re-emit outputs
  } else {
    complete_graph(function, inputs, parts.inputs, *graph);
  }
  // Note [Copy-back of mutated inputs]: the caller sees the first replay's writes.
  parts.inputs.copy_back_after_recording(inputs, platform_, capture_stream_, counters_);
  counters_.copy_back_inputs += parts.inputs.copy_back_count();
  counters_.static_input_writes += parts.inputs.written_count(InputKind::kStatic);
  counters_.managed_input_writes += parts.inputs.written_count(InputKind::kManaged);
  order_caller_after(caller);
  parts.outputs = NodeOutputs::classify(
      outputs, inputs, bound, [this](const void* a) { return in_pool(a); }, device_);
  // Note [Views of copied inputs]: no output keeps a placeholder after this.
  parts.outputs.rebase_input_views(outputs, inputs);
  bound.clear();  // the placeholders return to the pool
  if (consumable != nullptr) consumable->clear();
  for (const TrackedStorage* storage : live_before) {
    if (!storage->live()) parts.expected_dead_after.push_back(storage);
  }
  parts.checkpoint = allocator_.checkpoint(pool_);
  parts.graph = std::move(graph);
  add_recorded_node(std::make_unique<TreeNode>(parent, function, next_graph_id_++,
                                               generations_.current(), std::move(parts)),
                    slot, ancestors);
  ++counters_.recordings;
  result = std::move(outputs);
  check_no_foreign_blocks(function);
  return true;
}

std::vector<const TrackedStorage*> TreeManager::live_outputs(
    const std::vector<PathNode*>& nodes) const {
  std::vector<const TrackedStorage*> live;
  for (PathNode* node : nodes) {
    for (const TrackedStorage& storage : node->tracked()) {
      if (storage.live()) live.push_back(&storage);
    }
  }
  return live;
}

InputBinding TreeManager::bind_inputs(const RegisteredFunction& function, const TensorList& inputs,
                                      const ChildSlot& slot, TensorList& bound) {
  PoolRouting routing(allocator_, pool_);
  std::unordered_set<const void*> managed = path_output_addresses();
  return InputBinding::bind(
      {inputs, function, managed, slot.demoted, allocator_, capture_stream_, pool_}, bound);
}

void TreeManager::capture(const RegisteredFunction& function, const TensorList& bound,
                          runtime::GraphRecording& graph, TensorList& outputs) {
  runtime::StreamGuard stream(device_, capture_stream_);
  graph.capture_begin(capture_stream_, pool_);
  try {
    outputs = function.spec.body(bound);
  } catch (...) {
    graph.abort_capture();
    throw;
  }
  graph.capture_end();
}

void TreeManager::decide_eager_after_capture_failure(const RegisteredFunction& function,
                                                     ChildSlot& slot,
                                                     const CaptureViolation& violation) {
  ++counters_.capture_failures;
  decide_eager(function, slot.eager,
               {FallbackCategory::kCaptureFailure,
                str_cat("capture failed: ", violation.what(),
                        ". Move host syncs and host reads out of the function (or into their "
                        "own eager segment)")});
}

void TreeManager::complete_graph(const RegisteredFunction& function, const TensorList& inputs,
                                 InputBinding& binding, runtime::GraphRecording& graph) {
  // Both plans read the captured graph before it is instantiated: the head
  // copies join the graph (Note [Input copies inside the graph]).
  if (config_.zero_copy_inputs) {
    std::string why_not = binding.plan_zero_copy(graph);
    counters_.zero_copy_inputs += binding.zero_copy_count();
    if (!why_not.empty() && binding.copied_count() > 0 && log_enabled(LogLevel::kDebug)) {
      log(LogLevel::kDebug, str_cat(function.describe(),
                                    ": copied inputs are copied on "
                                    "every replay, not patched: ",
                                    why_not));
    }
  }
  if (config_.graph_input_copies) {
    counters_.graph_copy_inputs += binding.add_graph_copies(graph, inputs);
  }
  graph.instantiate();
  graph.replay(capture_stream_);  // computes the first outputs
}

void TreeManager::add_recorded_node(std::unique_ptr<TreeNode> node, ChildSlot& slot,
                                    const std::vector<PathNode*>& ancestors) {
  auto* parent = static_cast<TreeNode*>(current_);
  int64_t generation = node->generation();
  std::vector<const TrackedStorage*> live_after = live_outputs(ancestors);
  for (const TrackedStorage& storage : node->tracked()) live_after.push_back(&storage);
  node->set_live_after(std::move(live_after));
  TreeNode* raw = nullptr;
  if (parent != nullptr) {
    raw = parent->add_child(std::move(node));
  } else {
    raw = node.get();
    slot.children.push_back(raw);
    roots_.push_back(std::move(node));
  }
  current_ = raw;
  state_ = PathState::kRecording;
  generation_ = generation;
}

}  // namespace grove::cudagraph_trees
