// Outputs of one recorded node: how each output relates to memory, resolved
// once at record time, and the tensors re-emitted on every replay.
//
//   undefined     - an undefined tensor, passed through;
//   fixed         - memory the tree does not manage (a zero-byte tensor, or a
//                   storage outside the pool such as a constant): the same
//                   tensor is returned on every replay, not tracked;
//   pool storage  - a new block of the tree's pool: tracked;
//   aliases output j - a view of an earlier output of the same call: shares
//                   that output's storage (one storage, freed once);
//   aliases input i  - a view of an input: built on the caller's input's
//                   storage on every replay (liveness is the input's). For a
//                   copied input the body saw its placeholder, and the view
//                   is moved onto the caller's tensor (Note [Views of copied
//                   inputs]).
//
// Note [Views of copied inputs]
// A copied input reaches the body as its placeholder, so an output that is a
// view of it (the input returned, reshaped or sliced) is a view of the
// placeholder. Eager code returns a view of the caller's tensor instead, and a
// write through one alias must show through the other as it does in eager
// code. So such outputs are re-emitted on the caller's storage, at the same offset
// relative to the tensor (placeholder and input have the same strides), on
// every replay and at the recording itself. The values are the same: the
// graph writes a copied input's placeholder only where the function mutates
// the input, and copy-back then writes the caller's tensor before anyone can
// read the view. Guarded by TreeLifecycle.KernelFreeFunctionReEmitsViewsWithoutAGraph
// and DifferentialFuzz.ReducedProgramsOfFixedFailuresPass (seed 23188).
//
// Note [Kept replay outputs]
// A replay writes its outputs where the previous replay of the same node
// wrote them, and a replay on another branch may write over them too (sibling
// branches share the pool). So when a path of replays ends (a new generation
// begins) every node on it, and before it launches any node, whose previous
// outputs someone still holds (a use count above the tree's own) retires that
// set of storages, as PyTorch invalidates the outputs of the path it leaves:
// each is marked overwritten (Note [Overwritten storage], runtime/storage.h),
// so reading a kept output throws "accessing output ... that a later replay
// overwrote", or, with TreeConfig::clone_kept_outputs, the outputs still held
// are cloned outside the pool and their storages rebound to the clones, so the
// caller's tensors keep their values. The replay then emits the node's other
// set of storages (two sets, reused once nobody holds them, so a loop that
// keeps only the last call's outputs allocates nothing); a set still held or
// cloned is replaced by a new one. Costs per replay: one use-count read per
// pool output, and one loop over the path's outputs when a path ends.
// Outputs passed between functions within a step are untouched. Tests:
// TreeLifecycle.KeptReplayOutputThrowsOnceTheNextReplayOverwritesIt,
// TreeLifecycle.CloneKeptOutputsKeepsEveryReplaysValues,
// TreeLifecycle.KeptOutputOfAnotherBranchThrowsOnceItsPathEnds and the
// differential fuzzer's kept-output checks (tests/fuzz/differential.cc).
//
// Note [Output liveness]: a TrackedStorage holds a weak reference to the
// storage currently standing for an output, plus the number of strong
// references the tree itself holds (the cached replay tensors and storages).
// The output is alive iff someone else also holds it: use_count > internal.
// A view the user keeps is a strong reference to the same Storage, so any
// view keeps the output alive.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cudagraph_trees/function_registry.h"
#include "cudagraph_trees/replay_context.h"
#include "runtime/caching_allocator.h"
#include "runtime/storage.h"
#include "runtime/tensor.h"

namespace grove::cudagraph_trees {

enum class OutputKind : uint8_t { kUndefined, kFixed, kPoolStorage, kAliasesOutput, kAliasesInput };
const char* output_kind_name(OutputKind kind);

struct TrackedStorage {
  const void* address = nullptr;
  size_t nbytes = 0;
  runtime::WeakStoragePtr ref;
  long internal_refs = 0;
  size_t first_output = 0;  // the output index that introduced it (for messages)

  bool live() const { return ref.use_count() > internal_refs; }
  // The storage when alive, else null.
  runtime::StoragePtr lock_if_live() const { return live() ? ref.lock() : nullptr; }
};

struct OutputRecord {
  OutputKind kind = OutputKind::kUndefined;
  size_t storage_index = 0;  // pool storage / aliases output
  size_t input_index = 0;    // aliases input
  int64_t offset_from_input = 0;
  runtime::Shape shape;
  runtime::Shape strides;
  int64_t offset = 0;
  runtime::DType dtype = runtime::DType::kF32;
  runtime::Tensor fixed;  // kFixed
};

using PoolMembership = std::function<bool(const void* address)>;

class NodeOutputs {
 public:
  NodeOutputs() = default;
  // `inputs` are the caller's inputs, `bound` what the body was called with
  // (placeholders in place of copied inputs).
  static NodeOutputs classify(const TensorList& outputs, const TensorList& inputs,
                              const TensorList& bound, const PoolMembership& in_pool,
                              runtime::Device device);
  // The recording's own outputs as a replay emits them: views of copied
  // inputs moved onto the caller's tensors (Note [Views of copied inputs]).
  void rebase_input_views(TensorList& outputs, const TensorList& inputs) const;

  // Appends this node's outputs for one replay to `result`; allocates no
  // device memory (host Storage objects only the first time after a cache drop).
  void emit(const TensorList& inputs, TensorList& result) {
    if (!cache_valid_) [[unlikely]]
      build_cache();
    const std::vector<runtime::Tensor>& cached = sets_[active_].outputs;
    for (size_t j = 0; j < records_.size(); ++j) {
      const OutputRecord& record = records_[j];
      if (record.kind == OutputKind::kAliasesInput) {
        result.push_back(view_of_input(record, inputs));
      } else {
        result.push_back(cached[j]);
      }
    }
  }
  // Note [Kept replay outputs]: before a replay, retires the outputs of the
  // previous one that someone still holds. `function_name` and `node_id` are
  // for the message.
  void retire_kept_outputs(ReplayContext& context, runtime::CachingAllocator* clone_into,
                           const std::string& function_name, int64_t node_id) {
    if (!cache_valid_) return;
    for (const TrackedStorage& storage : storages_) {
      if (storage.live()) [[unlikely]] {
        retire(context, clone_into, function_name, node_id);
        return;
      }
    }
  }
  static runtime::Tensor view_of_input(const OutputRecord& record, const TensorList& inputs) {
    const runtime::Tensor& input = inputs[record.input_index];
    return runtime::Tensor(input.storage(), record.shape, record.strides,
                           input.offset() + record.offset_from_input, record.dtype);
  }
  // Forgets the cached replay tensors (before a checkpoint restore, where the
  // storages users still hold become the owners of their blocks).
  void drop_cache();

  std::vector<TrackedStorage>& storages() { return storages_; }
  const std::vector<TrackedStorage>& storages() const { return storages_; }
  const std::vector<OutputRecord>& records() const { return records_; }

 private:
  // One set of replay tensors over non-owning storages (Note [Replay outputs]).
  struct OutputSet {
    std::vector<runtime::StoragePtr> storages;
    std::vector<runtime::Tensor> outputs;
    bool retired = false;  // cloned (its storages moved away): never emitted again
  };
  void build_cache();
  void build_set(OutputSet& set);
  void retire(ReplayContext& context, runtime::CachingAllocator* clone_into,
              const std::string& function_name, int64_t node_id);

  runtime::Device device_;
  std::vector<OutputRecord> records_;
  std::vector<TrackedStorage> storages_;
  OutputSet sets_[2];
  int active_ = 0;
  bool cache_valid_ = false;
  std::shared_ptr<const std::string> overwritten_message_;  // built on first need
};

// The pool storages among a warm-up's outputs, one entry per storage: outputs
// that alias an input, have no memory or live outside the pool are not tracked.
std::vector<TrackedStorage> track_warmup_outputs(const TensorList& outputs,
                                                 const TensorList& inputs,
                                                 const PoolMembership& in_pool);

}  // namespace grove::cudagraph_trees
