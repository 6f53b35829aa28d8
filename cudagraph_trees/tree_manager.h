// TreeManager records a JIT's functions into a tree of CUDA graphs sharing
// one private memory pool, and replays them (docs/ARCHITECTURE.md, section 4). One manager per
// (device, thread): tree_manager_for(device). Each function's first call on a
// path warms up (eager, inside the pool), the next records a graph, later
// calls replay it. A node's parent is the node that ran before it while that
// node's outputs were still alive; sibling branches reuse the same pool memory.
//
//   TreeManager& trees = tree_manager_for(device);
//   FunctionId f = trees.register_function({"mlp", CompilationMode::kInference,
//                                           /*static*/ {1, 2}, /*mutated*/ {}, body});
//   TensorList outputs = trees.run(f, {x, w1, w2});
//
// Replay outputs live in the pool and are overwritten by later replays; warm-up
// and recording outputs are invalidated (StaleTensorError on access) when a new
// generation starts (generations.h).
//
// This header declares the manager with its path nodes, graphs and JSON types
// incomplete; include tree_introspection.h to use what stats(), dot(),
// current_node(), all_roots(), roots() and current_path_graphs() return.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "cudagraph_trees/config.h"
#include "cudagraph_trees/fallback.h"
#include "cudagraph_trees/function_registry.h"
#include "cudagraph_trees/generations.h"
#include "cudagraph_trees/stats.h"
#include "runtime/caching_allocator.h"
#include "runtime/device.h"

namespace grove::runtime {
class DeviceContext;
class GraphRecording;
}  // namespace grove::runtime

namespace grove::cudagraph_trees {

class InputBinding;
class MutationClassifier;
class TreeLease;
class TreeManager;

// The leases' view of their manager (Note [Trees follow their functions]).
struct LeaseState {
  std::mutex mutex;
  TreeManager* manager = nullptr;  // null once the manager died
  size_t leases = 0;
  size_t leased_functions = 0;  // ever leased
};
class PathNode;
class TreeNode;
class WarmupNode;
struct ChildSlot;
struct TrackedStorage;
enum class InvariantStatus : uint8_t;

// Note [Stale inputs throw first]
// A call with a stale input (a warm-up or recording output whose generation
// ended, Note [Stale outputs]) throws StaleTensorError before it writes
// anything, so that repeating it with fresh tensors applies its writes once.
// Every body run (eager fallback, warm-up, recording) checks its inputs after
// the generation bookkeeping of the call; a replay checks its copied inputs
// before it copies or launches; a program of several segments checks all its
// inputs before the first segment runs (backend/prepared_program.cc). One flag
// load per input, off the replay path. Test:
// TreeGenerations.StaleInputThrowsBeforeAnEagerFallbackWritesAnything.
void throw_if_any_stale(const TensorList& inputs);

// Note [Function controls]
// What a user can tell the tree about a function, as in PyTorch: never
// capture it (FunctionSpec::never_capture, or a TreeConfig::skip_functions /
// GROVE_CUDAGRAPHS_SKIP entry naming it: decided when it registers); record
// only some sizes of one dynamic dimension (FunctionSpec::capture_sizes: a
// call of another size runs eagerly, decided per call on the slow path;
// BucketedFunction pads instead); record on the first call without a warm-up
// (FunctionSpec::skip_warmup; under a warm-up path it still warms up, since a
// recording cannot hang under a warm-up node); reserve the pool up front
// (TreeConfig::initial_pool_bytes: one free segment on the capture stream,
// where warm-ups and recordings allocate); and run eagerly instead of copying
// a pool-managed input that keeps moving (ManagedInputPolicy::kEager). The
// eager runs a user asked for are not errors in strict mode. None of these
// adds work to the replay fast path. Tests: TreeControls.* in
// tests/cudagraph_trees/controls_test.cc.

// What the node the manager ran last was doing.
enum class PathState : uint8_t { kNone, kWarmup, kRecording, kExecution };
const char* path_state_name(PathState state);

class TreeManager {
 public:
  explicit TreeManager(runtime::Device device, TreeConfig config = TreeConfig::from_environment());
  ~TreeManager();
  TreeManager(const TreeManager&) = delete;
  TreeManager& operator=(const TreeManager&) = delete;

  FunctionId register_function(FunctionSpec spec);
  // Note [Trees follow their functions]
  // A holder of registered functions (a prepared program of the cudagraphs
  // backend) leases the `count` functions it registered last. When the last
  // lease goes and every function of this manager was leased, nothing can
  // call the tree any more: the manager shuts down (graphs dropped, pool
  // released, outputs still held poisoned), as PyTorch drops its manager
  // with the last function, and tree_manager_for() makes a new one on the
  // next use. Functions registered without a lease keep the tree forever.
  // The lease may die on any thread. Tests:
  // TreeLifecycle.LastLeaseShutsTheTreeDownUnlessAFunctionIsUnleased and
  // CudagraphsBackend.DestroyedModelReturnsTheDeviceMemoryItsTreeHeld.
  std::shared_ptr<TreeLease> lease_functions(size_t count);

  // Runs a registered function: warm-up, recording, replay or eager fallback.
  TensorList run(FunctionId id, const TensorList& inputs);
  // The same, taking the inputs over: the list is emptied during the call so
  // that inputs nobody else holds (a backward's saved activations) die inside
  // it and their memory is reused by the recording.
  TensorList run(FunctionId id, TensorList&& inputs);

  // Calls between begin and end share one generation (one compiled call).
  void begin_invocation() { generations_.begin_scope(); }
  void end_invocation() { generations_.end_scope(); }
  // Starts a new generation; from the first use on, only this does.
  void mark_step_begin() { generations_.mark_step_begin(); }
  // A training forward's step: Note [A training step begins with its named
  // invocation] (generations.h).
  void begin_training_step() { generations_.begin_training_step(); }
  // An optimizer update's call: Note [An optimizer step continues its
  // training step] (generations.h).
  void continue_training_step() { generations_.continue_training_step(); }
  // A forward ran and its backward has not yet (Note [Training steps]).
  bool forward_waits_for_backward() const { return generations_.pending_backward(); }
  // A backward ran outside the tree (not captured): forwards no longer wait.
  void set_running_backward() { generations_.after_call(CompilationMode::kBackward); }

  void set_mutation_classifier(std::unique_ptr<MutationClassifier> classifier);

  // Functions, nodes, counters (recordings, replays, warm-ups, re-records and
  // fallbacks by reason, checkpoint restores, ...), the pool's bytes and the
  // bookkeeping: what the nodes hold on the host (child slots, checkpoint
  // blocks, path lists, an estimate in bytes).
  runtime::GraphTreeStats stats() const;
  const TreeCounters& counters() const { return counters_; }
  std::string dot() const;

  // Invalidates every output the tree still tracks, drops every graph and
  // releases the pool. Later runs throw.
  void shutdown();
  bool is_shut_down() const { return shut_down_; }

  // Throws Error describing the first disagreement between the tree, the path
  // state, the pool's allocated blocks and the live storages the tree tracks.
  void verify() const;

  runtime::Device device() const { return device_; }
  const TreeConfig& config() const { return config_; }
  runtime::PoolId pool() const { return pool_; }
  PathState state() const { return state_; }
  const PathNode* current_node() const { return current_; }
  // The graphs of the path that ran last, root first (warm-ups and kernel-free
  // nodes have none): what a bare replay of the same work launches. For
  // benchmarks that compare a replay through the manager with the bare one.
  std::vector<runtime::GraphRecording*> current_path_graphs() const;
  const std::vector<std::unique_ptr<TreeNode>>& all_roots() const { return roots_; }
  const std::vector<TreeNode*>& roots(FunctionId id) const;
  size_t node_count() const;
  const RegisteredFunction& function(FunctionId id) const { return registry_.at(id); }
  int64_t generation() const { return generations_.current(); }

 private:
  void dispatch(RegisteredFunction& function, const TensorList& inputs, TensorList* consumable,
                TensorList& result);
  void slow_path(RegisteredFunction& function, const TensorList& inputs, TensorList* consumable,
                 TensorList& result);
  // Note [A replay that throws] (tree_manager.cc); defined there, inline.
  void replay(TreeNode* node, const TensorList& inputs, TensorList* consumable, TensorList& result);
  void warmup(RegisteredFunction& function, const TensorList& inputs, TensorList* consumable,
              TensorList& result);

  // The steps of slow_path() (tree_manager.cc).
  struct ChildMisses;
  // Before a warm-up or recording: retires the kept outputs of ended paths
  // (Note [Kept replay outputs]), then throws if an input was among them.
  void retire_ended_paths(const TensorList& inputs);
  void check_static_input_indices(const RegisteredFunction& function,
                                  const TensorList& inputs) const;
  // Under a replayed path (or none): replays a child that matches now, or
  // prepares a recording under the current node (demotions, re-record
  // accounting, checkpoint restore). True when the call was answered without
  // a recording (a replay, a restart at a root, an eager fallback).
  bool replay_or_prepare_rerecord(RegisteredFunction& function, const TensorList& inputs,
                                  TensorList* consumable, TensorList& result, ChildSlot& slot);
  TreeNode* find_replayable_child(const ChildSlot& slot, const TensorList& inputs,
                                  ChildMisses& misses) const;
  // Re-classifies a mutating function's inputs; true when that sent the call
  // to eager (and ran it).
  bool reclassified_as_eager(const RegisteredFunction& function, const TensorList& inputs,
                             ChildSlot& slot, TensorList& result);
  void demote_moving_managed_inputs(const RegisteredFunction& function, const TensorList& inputs,
                                    const TreeNode& last, ChildSlot& slot);
  void count_rerecord(const RegisteredFunction& function, const TensorList& inputs,
                      const ChildMisses& misses);
  void decide_eager_after_rerecord_limit(const RegisteredFunction& function, ChildSlot& slot,
                                         InvariantStatus reason);

  // False when the capture failed (the slot is then decided eager).
  bool record(RegisteredFunction& function, const TensorList& inputs, TensorList* consumable,
              TensorList& result);
  // The steps of record() (tree_manager_recording.cc).
  std::vector<const TrackedStorage*> live_outputs(const std::vector<PathNode*>& nodes) const;
  // Classifies the inputs and fills the placeholders, inside the pool.
  InputBinding bind_inputs(const RegisteredFunction& function, const TensorList& inputs,
                           const ChildSlot& slot, TensorList& bound);
  // Runs the body on the capture stream into `graph`; throws CaptureViolation.
  void capture(const RegisteredFunction& function, const TensorList& bound,
               runtime::GraphRecording& graph, TensorList& outputs);
  void decide_eager_after_capture_failure(const RegisteredFunction& function, ChildSlot& slot,
                                          const CaptureViolation& violation);
  // Plans zero-copy inputs, adds the head copies, instantiates and replays
  // once (the first outputs).
  void complete_graph(const RegisteredFunction& function, const TensorList& inputs,
                      InputBinding& binding, runtime::GraphRecording& graph);
  // Hangs `node` under the current node (or as a root) and makes it current.
  void add_recorded_node(std::unique_ptr<TreeNode> node, ChildSlot& slot,
                         const std::vector<PathNode*>& ancestors);
  // Note [Foreign blocks in the pool]
  // When a recording ends, every allocated block of the pool must belong to
  // an output the tree tracks; a body that keeps a pool tensor of its own
  // allocated during capture would have that block reused under it by later
  // recordings and sibling branches. So the end of each recording (never a
  // replay) walks the pool's blocks and throws Error naming the function and
  // the block's size (after a warm-up such blocks move out instead: Note
  // [State created inside a function]). Test:
  // TreeLifecycle.ABlockKeptAfterARecordingFailsNamingTheFunctionAndSize.
  void check_no_foreign_blocks(const RegisteredFunction& function) const;
  // Note [State created inside a function]
  // A warm-up may create tensors the function keeps and does not return (a
  // KV cache or a buffer a module builds on its first call, as Hugging Face's
  // static cache does inside the compiled forward). They were allocated in
  // the tree's pool, where later recordings would reuse their memory; when
  // the warm-up ends they move into memory of their own (a copy, the
  // storage re-pointed: CachingAllocator::move_blocks_out_of_pool), a log
  // line names the function and the bytes, and they are ordinary tensors
  // from then on. A recording cannot move memory its graph writes, so a
  // block kept after a recording is still Note [Foreign blocks in the pool]'s
  // error. Test: TreeLifecycle.StateAWarmupCreatesMovesOutOfThePoolAndKeepsItsValues.
  void move_kept_state_out_of_pool(const RegisteredFunction& function);
  // Addresses of pool blocks owned by live outputs the tree tracks.
  std::unordered_set<const void*> owned_pool_addresses() const;
  runtime::TreeBookkeeping bookkeeping() const;
  // Note [Inputs in reclaimed pool memory].
  void check_pool_inputs_are_owned(const RegisteredFunction& function,
                                   const TensorList& inputs) const;
  void run_eager(const RegisteredFunction& function, const TensorList& inputs,
                 const EagerDecision& decision, TensorList& result);
  void decide_eager(const RegisteredFunction& function, std::optional<EagerDecision>& slot,
                    EagerDecision decision);
  void classify_mutation(const RegisteredFunction& function, const TensorList& inputs,
                         ChildSlot& slot);
  std::optional<EagerDecision> device_blocker(const RegisteredFunction& function,
                                              const TensorList& inputs) const;

  ChildSlot& slot_for(PathNode* parent, FunctionId id);
  std::vector<PathNode*> path() const;
  bool all_path_outputs_dead() const;
  std::unordered_set<const void*> path_output_addresses() const;
  void restore_checkpoint();
  runtime::PoolCheckpoint checkpoint_keeping_segments(
      const runtime::PoolCheckpoint& checkpoint) const;
  void try_end_recording_or_warmup(const RegisteredFunction& function);
  bool try_end_execution(const RegisteredFunction& function);
  void end_path(bool invalidate_outputs);
  void invalidate_path_outputs();
  bool in_pool(const void* address) const;
  void order_capture_after(runtime::StreamHandle caller);
  void order_caller_after(runtime::StreamHandle caller);

  runtime::Device device_;
  // Unique for the process lifetime (addresses are reused), keys log_once messages.
  uint64_t serial_;
  TreeConfig config_;
  runtime::DeviceContext& context_;
  runtime::Platform& platform_;
  runtime::CachingAllocator& allocator_;
  runtime::PoolId pool_;
  runtime::StreamHandle capture_stream_;
  runtime::EventHandle caller_ready_;
  runtime::EventHandle capture_done_;

  FunctionRegistry registry_;
  std::unique_ptr<MutationClassifier> classifier_;
  GenerationTracker generations_;
  std::vector<std::unique_ptr<TreeNode>> roots_;
  std::vector<ChildSlot> root_slots_;
  std::vector<std::unique_ptr<WarmupNode>> warmup_path_;  // the warm-up tail of the path
  // Replayed nodes of paths that ended (Note [Kept replay outputs]).
  std::vector<TreeNode*> retire_before_next_replay_;
  PathNode* current_ = nullptr;
  PathState state_ = PathState::kNone;
  int64_t generation_ = 0;  // of the last warm-up, recording or replay
  int64_t next_graph_id_ = 0;
  int64_t next_warmup_id_ = -1;
  TreeCounters counters_;
  bool shut_down_ = false;
  size_t live_blocks_at_shutdown_ = 0;
  // Note [Trees follow their functions]; shared with the leases, which
  // outlive the manager safely (it clears its pointer there when it dies).
  std::shared_ptr<LeaseState> lease_state_;
  friend class TreeLease;
};

// Groups the calls made while it lives into one generation.
class InvocationScope {
 public:
  explicit InvocationScope(TreeManager& manager) : manager_(manager) {
    manager_.begin_invocation();
  }
  ~InvocationScope() { manager_.end_invocation(); }
  InvocationScope(const InvocationScope&) = delete;
  InvocationScope& operator=(const InvocationScope&) = delete;

 private:
  TreeManager& manager_;
};

// The calling thread's manager for `device`, created on first use with
// TreeConfig::from_environment(). Throws DeviceError for devices without graphs.
TreeManager& tree_manager_for(runtime::Device device);
// The calling thread's manager for `device`, or null when it has none (or
// only one that was shut down); creates nothing.
TreeManager* find_tree_manager(runtime::Device device);
// Shuts down and forgets the calling thread's manager for `device`, if any.
void reset_tree_manager(runtime::Device device);
// mark_step_begin() on every manager of the calling thread.
void mark_step_begin();
// Shuts down and forgets the calling thread's managers.
void reset_tree_managers();

// Note [Trees of another thread]
// Managers belong to a (device, thread). A thread may use another thread's
// managers for a while, as PyTorch's autograd worker threads use the trees of
// the thread that ran the forward: the backward of a training step runs on
// autograd's device thread, and only in the forward's tree does it read the
// saved activations in place, end the forward's pending backward and let the
// next forward start a new generation (in a tree of its own the forward never
// left warm-up). The thread that owns the trees must not call into them at the
// same time (autograd blocks it while the backward runs). Tests:
// TreeThreads.BackwardOnAnotherThreadJoinsTheForwardsTreeAndReplays,
// TrainingTest.test_backward_on_another_thread_replays_in_the_forwards_tree.
struct ThreadTrees;
// The calling thread's managers (those it uses now, inside a ThreadTreesScope
// the scope's), shared: they live as long as the thread or any holder.
std::shared_ptr<ThreadTrees> current_thread_trees();

// While it lives, the calling thread's calls use `trees` instead of its own.
class ThreadTreesScope {
 public:
  explicit ThreadTreesScope(std::shared_ptr<ThreadTrees> trees);
  ~ThreadTreesScope();
  ThreadTreesScope(const ThreadTreesScope&) = delete;
  ThreadTreesScope& operator=(const ThreadTreesScope&) = delete;

 private:
  std::shared_ptr<ThreadTrees> previous_;
};

}  // namespace grove::cudagraph_trees
