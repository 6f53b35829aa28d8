// The nodes of a tree manager's path. A TreeNode is one recording of one
// function: its graph (none for a kernel-free function), how its inputs are
// bound, its outputs, the pool checkpoint taken right after recording, and the
// liveness facts replays must reproduce. A WarmupNode is one eager run inside
// the pool; it only tracks its outputs and is dropped when its path ends.
//
// Children are kept per function id in ChildSlots (Note [Child slots by
// function]), which also carry the decisions cached per (parent, function):
// eager fallback, mutation classification, re-record counts and demoted
// managed inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "cudagraph_trees/fallback.h"
#include "cudagraph_trees/function_registry.h"
#include "cudagraph_trees/input_binding.h"
#include "cudagraph_trees/output_tracking.h"
#include "runtime/caching_allocator.h"
#include "runtime/graph_recording.h"

namespace grove::cudagraph_trees {

class TreeNode;

struct ChildSlot {
  std::vector<TreeNode*> children;  // in recording order; owned by the parent (or manager)
  bool mutation_checked = false;
  std::optional<EagerDecision> eager;
  int unexpected_rerecords = 0;
  int shape_rerecords = 0;
  std::vector<int> managed_moves;  // per input index
  std::set<size_t> demoted;        // managed inputs now copied
};

class PathNode {
 public:
  PathNode(PathNode* parent, const RegisteredFunction& function, int64_t id, int64_t generation);
  virtual ~PathNode() = default;
  PathNode(const PathNode&) = delete;
  PathNode& operator=(const PathNode&) = delete;

  virtual bool is_warmup() const = 0;
  PathNode* parent() const { return parent_; }
  // Graph nodes count up from 0; warm-up nodes count down from -1.
  int64_t id() const { return id_; }
  const RegisteredFunction& function() const { return *function_; }
  FunctionId function_id() const { return function_->id; }
  int64_t generation() const { return generation_; }
  size_t depth() const { return depth_; }

  std::vector<TrackedStorage>& tracked() { return *tracked_; }
  const std::vector<TrackedStorage>& tracked() const { return *tracked_; }
  bool any_output_live() const;

  // Note [Child slots by function]: a node holds one ChildSlot per function
  // called right after it, found by a scan over their ids. They used to be a
  // vector indexed by the dense FunctionId, so a node followed by function k
  // held k slots: a path of N piecewise segments (one function each) held
  // N^2 / 2 of them, 2 GB at N = 5,000 (issue 35, case 13). A node is followed
  // by few functions (one on a piecewise path), so the scan reads one or two
  // ids. Each slot has its own allocation, so a reference to it stays valid
  // while other slots are added. Guarded by
  // Bookkeeping.PiecewisePathsCostLinearHostMemory (tests/cudagraph_trees).
  ChildSlot* find_slot(FunctionId id) const {
    for (size_t i = 0; i < slot_functions_.size(); ++i) {
      if (slot_functions_[i] == id.value) return slots_[i].get();
    }
    return nullptr;
  }
  ChildSlot& slot(FunctionId id);
  size_t slot_count() const { return slots_.size(); }
  FunctionId slot_function(size_t index) const { return FunctionId{slot_functions_[index]}; }
  const ChildSlot& slot_at(size_t index) const { return *slots_[index]; }

 protected:
  void set_tracked(std::vector<TrackedStorage>* tracked) { tracked_ = tracked; }

 private:
  PathNode* parent_;
  const RegisteredFunction* function_;
  int64_t id_;
  int64_t generation_;
  size_t depth_;
  std::vector<TrackedStorage>* tracked_ = nullptr;
  std::vector<uint32_t> slot_functions_;  // the function id of each slot
  std::vector<std::unique_ptr<ChildSlot>> slots_;
};

class WarmupNode final : public PathNode {
 public:
  WarmupNode(PathNode* parent, const RegisteredFunction& function, int64_t id, int64_t generation,
             std::vector<TrackedStorage> outputs);
  bool is_warmup() const override { return true; }

 private:
  std::vector<TrackedStorage> outputs_;
};

class TreeNode final : public PathNode {
 public:
  struct Parts {
    InputBinding inputs;
    NodeOutputs outputs;
    std::unique_ptr<runtime::GraphRecording> graph;  // null for a kernel-free function
    runtime::PoolCheckpoint checkpoint;
    // Path outputs alive when the parent finished recording but dead when this
    // node started: a replay needs them dead (their memory may be reused).
    std::vector<const TrackedStorage*> expected_dead_before;
    // Path outputs that died during the recording (inputs handed over with
    // run(id, std::move(inputs))): a replay must see them die too.
    std::vector<const TrackedStorage*> expected_dead_after;
    // Path outputs (own included) alive right after recording; set once the
    // node exists (set_live_after), since it points into the node itself.
    std::vector<const TrackedStorage*> live_after;
  };

  TreeNode(TreeNode* parent, const RegisteredFunction& function, int64_t id, int64_t generation,
           Parts parts);
  bool is_warmup() const override { return false; }
  TreeNode* parent_node() const { return static_cast<TreeNode*>(parent()); }

  // Note [Replay fast path]: see tree_manager.cc.
  InvariantStatus check(const TensorList& inputs) const {
    if (!parts_.inputs.count_matches(inputs)) return InvariantStatus::kInputCountChanged;
    if (InvariantStatus managed = parts_.inputs.check_managed(inputs);
        managed != InvariantStatus::kOk) {
      return managed;
    }
    for (const TrackedStorage* storage : parts_.expected_dead_before) {
      if (storage->live()) return InvariantStatus::kExpectedDeadOutputAlive;
    }
    if (InvariantStatus statics = parts_.inputs.check_static(inputs);
        statics != InvariantStatus::kOk) {
      return statics;  // a static input moved, or a checked layout changed
    }
    if (!parts_.inputs.copied_layouts_match(inputs)) return InvariantStatus::kCopiedInputChanged;
    if (!parts_.inputs.copy_back_inputs_unaliased(inputs)) {
      return InvariantStatus::kMutatedInputAliased;
    }
    return InvariantStatus::kOk;
  }
  // Binds the copied inputs (copies or zero-copy patches), appends the outputs
  // to `result`, releases `consumable` (the caller's handed-over inputs),
  // launches the graph and copies mutated inputs back.
  // `clone_into` is the allocator for clones of kept outputs (Note [Kept
  // replay outputs], output_tracking.h), or null to mark them overwritten.
  // Note [Kept replay outputs]: when the path this node replayed on ends, the
  // outputs someone still holds are marked overwritten (or cloned).
  void retire_kept_outputs(runtime::Platform& platform, runtime::StreamHandle stream,
                           TreeCounters& counters, runtime::CachingAllocator* clone_into) {
    ReplayContext context{platform, stream, parts_.graph.get(), counters};
    parts_.outputs.retire_kept_outputs(context, clone_into, function().spec.name, id());
  }
  // `retire_first` lists the nodes of an ended path whose kept outputs this
  // launch may overwrite (Note [Kept replay outputs]); they are retired after
  // this node's inputs are bound (an input among them is still read) and the
  // list is emptied.
  void replay(const TensorList& inputs, TensorList* consumable, runtime::Platform& platform,
              runtime::StreamHandle stream, TreeCounters& counters, TensorList& result,
              runtime::CachingAllocator* clone_into, std::vector<TreeNode*>& retire_first) {
    ReplayContext context{platform, stream, parts_.graph.get(), counters};
    parts_.inputs.prepare_replay(inputs, context);
    if (!retire_first.empty()) [[unlikely]] {
      for (TreeNode* ended : retire_first)
        ended->retire_kept_outputs(platform, stream, counters, clone_into);
      retire_first.clear();
    }
    parts_.outputs.retire_kept_outputs(context, clone_into, function().spec.name, id());
    parts_.outputs.emit(inputs, result);
    if (consumable != nullptr) consumable->clear();
    if (!parts_.expected_dead_after.empty()) [[unlikely]]
      check_deaths_after_replay();
    if (parts_.graph != nullptr) parts_.graph->replay(stream);
    parts_.inputs.finish_replay(context);
  }

  TreeNode* add_child(std::unique_ptr<TreeNode> child);
  const std::vector<std::unique_ptr<TreeNode>>& owned_children() const { return children_; }
  const std::vector<TreeNode*>& children(FunctionId id) const;
  size_t num_descendants() const;

  const InputBinding& inputs() const { return parts_.inputs; }
  InputBinding& mutable_inputs() { return parts_.inputs; }
  NodeOutputs& outputs() { return parts_.outputs; }
  const NodeOutputs& outputs() const { return parts_.outputs; }
  const runtime::GraphRecording* graph() const { return parts_.graph.get(); }
  // For benchmarks that time the bare replay of this node's graph.
  runtime::GraphRecording* mutable_graph() { return parts_.graph.get(); }
  bool kernel_free() const { return parts_.graph == nullptr; }
  const runtime::PoolCheckpoint& checkpoint() const { return parts_.checkpoint; }
  const std::vector<const TrackedStorage*>& expected_dead_before() const {
    return parts_.expected_dead_before;
  }
  const std::vector<const TrackedStorage*>& expected_dead_after() const {
    return parts_.expected_dead_after;
  }
  const std::vector<const TrackedStorage*>& live_after() const { return parts_.live_after; }
  void set_live_after(std::vector<const TrackedStorage*> live) {
    parts_.live_after = std::move(live);
  }
  // Drops the graph (shutdown); the node can no longer replay.
  void release_graph() { parts_.graph.reset(); }

 private:
  void check_deaths_after_replay() const;

  Parts parts_;
  std::vector<std::unique_ptr<TreeNode>> children_;
};

// Visits every node of the trees under `roots`, parents before children.
void for_each_node(const std::vector<std::unique_ptr<TreeNode>>& roots,
                   const std::function<void(TreeNode&)>& visit);

}  // namespace grove::cudagraph_trees
