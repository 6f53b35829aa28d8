// InputBinding is how one recorded node receives its inputs: the
// classification made at record time (input_classification.h) and, for each
// replay, the binding of its copied inputs, in one of three ways per input:
//   - zero-copy: the graph reads the caller's memory, its pointer slots
//     patched when the input moved (Note [Zero-copy inputs], zero_copy.h);
//   - in-graph copy: a head kernel of the graph copies it into its
//     placeholder (Note [Input copies inside the graph], graph_copies.h);
//   - copy before the launch: one device-to-device copy on the stream.
// A copied input the function writes is copied back after each replay
// (copy_back.h). One allocator and one pool (the tree's) serve every
// decision that asks whether an address lies in the pool, and the scratch
// memory of staged replays.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cudagraph_trees/copy_back.h"
#include "cudagraph_trees/graph_copies.h"
#include "cudagraph_trees/input_classification.h"
#include "cudagraph_trees/replay_context.h"
#include "cudagraph_trees/zero_copy.h"

namespace grove::cudagraph_trees {

// Note [Sources inside placeholders]
// A replay must read every input's values as the caller passed them, even
// when a source lies inside the placeholder of another copied input of the
// same node (a placeholder block returns to the pool after the recording and
// a later output may be allocated there). So before any copy each source is
// tested against the range covering the node's placeholders; when one truly
// overlaps a placeholder, every such source is first copied to scratch memory
// outside the pool, then the placeholders are filled from the scratch copies
// (those inputs are not zero-copied that time). Tests:
// TreeGenerations.ASourceInsideAnotherInputsPlaceholderIsStaged and
// TreeGraphCopies.StagedReplaysDisarmTheHeadCopiesAndLaterReplaysRearmThem.
class InputBinding {
 public:
  struct Request {
    const TensorList& inputs;
    const RegisteredFunction& function;
    // Storage addresses of every output recorded on the current path, dead or alive.
    const std::unordered_set<const void*>& path_output_addresses;
    // Managed inputs demoted to copies under this (parent, function).
    const std::set<size_t>& demoted;
    runtime::CachingAllocator& allocator;  // the caller routes it to the tree's pool
    runtime::StreamHandle stream;          // placeholders are allocated and filled here
    runtime::PoolId pool;                  // the tree's pool (Note [Copy-back into the pool])
  };

  InputBinding() = default;
  // Classifies the inputs, allocates and fills placeholders, and appends to
  // `bound_inputs` what the body must be called with (placeholders in place
  // of copied inputs).
  static InputBinding bind(const Request& request, TensorList& bound_inputs);

  // Replay-path checks; each is a few comparisons per input.
  bool count_matches(const TensorList& inputs) const { return inputs.size() == kinds_.size(); }
  // Managed and static inputs: each input's address, then its layout (Note
  // [Layouts of checked inputs]) while the tensor is in cache, in one pass.
  InvariantStatus check_managed(const TensorList& inputs) const {
    return check_each(managed_, inputs, InvariantStatus::kManagedInputMoved);
  }
  InvariantStatus check_static(const TensorList& inputs) const {
    return check_each(static_, inputs, InvariantStatus::kStaticInputMoved);
  }
  bool copied_layouts_match(const TensorList& inputs) const {
    for (const CopiedInput& copied : copied_) {
      if (!copied.meta.matches(inputs[copied.index])) return false;
    }
    return true;
  }
  // CopyBack::unaliased() for this node's inputs.
  bool copy_back_inputs_unaliased(const TensorList& inputs) const {
    return copy_back_.unaliased(inputs, copied_, allocator_, pool_);
  }
  // Binds the copied inputs for one replay: per input one device-to-device copy
  // into its placeholder, a head copy kernel, or (zero-copy) nothing when its
  // address is unchanged and a patch of the graph's pointer slots when it
  // moved. Remembers where the copy-backs go, so the caller may drop the
  // inputs before finish_replay().
  void prepare_replay(const TensorList& inputs, ReplayContext& context) {
    // Note [Sources inside placeholders]: one range test per copied input.
    for (const CopiedInput& copied : copied_) {
      if (copied.span_bytes == 0) continue;
      auto start = reinterpret_cast<uintptr_t>(copied.source_in(inputs[copied.index]));
      if (start < placeholders_high_ && placeholders_low_ < start + copied.span_bytes)
          [[unlikely]] {
        if (prepare_replay_staged(inputs, context)) return;
        break;
      }
    }
    for (CopiedInput& copied : copied_) {
      if (copied.span_bytes == 0) continue;
      char* source = copied.source_in(inputs[copied.index]);
      if (copied.zero_copy >= 0 && bind_without_copy(copied, source, inputs, context)) {
        copied.copy_back_to = nullptr;
        continue;
      }
      if (copied.graph_copy >= 0) [[likely]] {
        graph_copies_.copy(copied, source, context);
      } else {
        context.platform.copy_async(copied.placeholder, source, copied.span_bytes,
                                    runtime::CopyKind::kDeviceToDevice, context.stream);
      }
      ++context.counters.input_copies;
      copied.copy_back_to = copied.copy_back ? source : nullptr;
    }
  }
  // After the graph launch: copies mutated placeholders back to the caller.
  void finish_replay(ReplayContext& context) { copy_back_.after_replay(copied_, context); }
  // Right after recording: copies the placeholders of mutated inputs back into
  // `inputs` (the caller's tensors) on `stream`.
  void copy_back_after_recording(const TensorList& inputs, runtime::Platform& platform,
                                 runtime::StreamHandle stream, TreeCounters& counters) const {
    copy_back_.after_recording(inputs, copied_, platform, stream, counters);
  }
  // Right after capture: decides which copied inputs can be bound by
  // patching `graph` (Note [Zero-copy inputs], rules 1-3). Returns why the
  // graph is ineligible as a whole, or "".
  std::string plan_zero_copy(const runtime::GraphRecording& graph);
  // Between capture and instantiation, after plan_zero_copy(): adds the head
  // copy kernels (GraphCopies::add); returns how many.
  size_t add_graph_copies(runtime::GraphRecording& graph, const TensorList& inputs) {
    return graph_copies_.add(graph, copied_, inputs);
  }

  // Managed inputs whose address differs from the recorded one (slow path).
  std::vector<size_t> moved_managed_inputs(const TensorList& inputs) const;
  // "input 2 (static): address changed from 0x.. to 0x.." for each mismatch (slow path).
  std::string describe_mismatches(const TensorList& inputs) const;

  const std::vector<InputKind>& kinds() const { return kinds_; }
  size_t copied_count() const { return copied_.size(); }
  size_t copy_back_count() const { return copy_back_.count(); }
  // How many inputs of `kind` the function writes (static: mutation type
  // (b), managed: (c), copied: (d)).
  size_t written_count(InputKind kind) const {
    size_t count = 0;
    for (uint32_t index : written_) count += kinds_[index] == kind ? 1 : 0;
    return count;
  }
  size_t zero_copy_count() const { return zero_copy_.input_count(); }
  // Whether copied input `index` (an input index) is copied by a head kernel.
  bool copied_in_graph(size_t index) const;
  // The placeholder span of copied input `index` (an input index): [start, start + bytes).
  std::pair<const void*, size_t> placeholder_span(size_t index) const;
  // Whether copied input `index` (an input index) is bound by patching.
  bool zero_copied(size_t index) const;
  size_t checked_count() const { return managed_.size() + static_.size(); }

 private:
  static InvariantStatus check_each(const std::vector<CheckedInput>& checked_inputs,
                                    const TensorList& inputs, InvariantStatus moved) {
    for (const CheckedInput& checked : checked_inputs) {
      const runtime::Tensor& tensor = inputs[checked.index];
      if (!checked.matches(tensor)) return moved;
      if (!checked.layout_matches(tensor)) return InvariantStatus::kCheckedInputLayoutChanged;
    }
    return InvariantStatus::kOk;
  }
  std::vector<InputKind> kinds_;
  std::vector<CheckedInput> managed_;
  std::vector<CheckedInput> static_;
  std::vector<CopiedInput> copied_;
  std::vector<uint32_t> written_;  // indices of inputs the function writes
  CopyBack copy_back_;
  ZeroCopyPlan zero_copy_;
  GraphCopies graph_copies_;
  // The tree's allocator and pool: pool tests (copy-back, zero-copy rule 4)
  // and the scratch memory of staged replays.
  runtime::CachingAllocator* allocator_ = nullptr;
  runtime::PoolId pool_;
  // The address range [low, high) that covers every placeholder's span.
  uintptr_t placeholders_low_ = 0;
  uintptr_t placeholders_high_ = 0;

  // The copied input for input `index`, or null.
  const CopiedInput* find_copied(size_t index) const;
  // Note [Sources inside placeholders]: false when no source overlaps a
  // placeholder after all (the common path then binds the inputs).
  bool prepare_replay_staged(const TensorList& inputs, ReplayContext& context);
  // Note [Zero-copy inputs], rules 4-6; true when the graph now reads `source`.
  bool bind_without_copy(CopiedInput& copied, char* source, const TensorList& inputs,
                         ReplayContext& context) {
    auto start = reinterpret_cast<uintptr_t>(source);
    if (start == zero_copy_.bound(copied.zero_copy)) [[likely]]
      return true;
    return rebind_slow(copied, start, inputs, context);
  }
  bool rebind_slow(CopiedInput& copied, uintptr_t start, const TensorList& inputs,
                   ReplayContext& context);
};

}  // namespace grove::cudagraph_trees
