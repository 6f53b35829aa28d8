// GraphCopies are the span copy kernels (runtime/span_copy_kernel.h) that a
// recording adds at the head of its graph, one per copied input that is
// neither empty nor zero-copied, so that a replay binds those inputs inside
// the graph launch.
//
// Note [Input copies inside the graph]
// A head copy reads the caller's memory when the graph runs, which is stream
// order after the call, exactly like a copy enqueued before the launch, and
// it runs before every captured node, so the graph's own writes cannot reach
// its source first: any source address is fine (the kernel falls back to
// byte copies when a pointer is not 16-byte aligned), unlike zero-copy rules
// 4-6. A replay whose inputs kept their addresses enqueues nothing but the
// launch; a moved input re-points its kernel's source slot (one kernel-node
// update). The head copies of one graph run concurrently, so a replay whose
// source lies inside another placeholder (Note [Sources inside placeholders])
// disarms every head copy (bytes slot 0) and copies outside the graph; the
// next ordinary replay re-arms them. Tests: TreeGraphCopies.*, in particular
// TreeGraphCopies.StagedReplaysDisarmTheHeadCopiesAndLaterReplaysRearmThem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cudagraph_trees/input_classification.h"
#include "cudagraph_trees/replay_context.h"
#include "runtime/graph_recording.h"
#include "runtime/span_copy_kernel.h"

namespace grove::cudagraph_trees {

class GraphCopies {
 public:
  // Between capture and instantiation: adds a head copy kernel to `graph` for
  // every copied input that is neither empty nor zero-copied, reading
  // `inputs` (the recording's own call), and sets its CopiedInput::graph_copy.
  // Returns how many the graph has.
  size_t add(runtime::GraphRecording& graph, std::vector<CopiedInput>& copied,
             const TensorList& inputs);

  // Nothing when the head kernel already reads `source`, else one kernel-node
  // update (Note [Replay fast path]).
  void copy(const CopiedInput& copied, const char* source, ReplayContext& context) {
    Copy& copy = copies_[static_cast<size_t>(copied.graph_copy)];
    if (!copy.armed || copy.args.slots[runtime::kSpanCopySourceSlot] !=
                           reinterpret_cast<uint64_t>(source)) [[unlikely]] {
      repoint(copy, copied, source, context);
    }
    ++context.counters.input_copies_in_graph;
  }
  // Staged replays copy outside the graph: every head copy then copies nothing.
  void disarm(ReplayContext& context);

 private:
  // A head copy kernel and its arguments as currently set in the graph.
  struct Copy {
    size_t kernel_node = 0;
    runtime::KernelArgs args;
    bool armed = true;  // false: its bytes slot is 0 (staged replays)
  };
  void repoint(Copy& copy, const CopiedInput& copied, const char* source, ReplayContext& context);

  std::vector<Copy> copies_;
};

}  // namespace grove::cudagraph_trees
