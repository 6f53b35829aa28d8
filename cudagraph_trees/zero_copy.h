// ZeroCopyPlan is how one recorded graph can read a copied input straight from
// the caller's memory: for each eligible copied input, the kernel-node argument
// slots that hold pointers into its placeholder, found once after recording.
// When the input arrives at a new address, the replay moves those slots by the
// address difference (GraphRecording::set_kernel_node_args) instead of copying
// the data into the placeholder.
//
// Note [Zero-copy inputs]
// Patching replaces "copy x into the placeholder, graph reads the placeholder"
// by "graph reads x". That is only the same computation when every access the
// graph makes to the placeholder goes through a slot we patch, and when x's
// memory behaves like the placeholder did during recording. The plan therefore
// requires, per graph and per input:
//  1. every node of the graph is a kernel node launched by grove (its argument
//     slots are known): a library kernel (cuBLAS), a copy, a memset or a host
//     function could read or write the placeholder through pointers we cannot
//     see, so such a graph copies all its inputs;
//  2. the input's slots are found by value: a slot whose value lies inside the
//     placeholder's span. grove kernels receive tensors as base pointers inside
//     the tensor's span (views add their offset on the host), so every access
//     is covered; other slots (sizes, strides, float bits) are far below any
//     device address;
//  3. no output needs the placeholder filled: this holds by construction,
//     since an output that views a copied input is emitted on the caller's
//     tensor, never on the placeholder (Note [Views of copied inputs],
//     output_tracking.h; before that note such inputs were always copied);
// and, per replay, when the address changed:
//  4. the new address is outside the tree's pool: the graph's own
//     intermediates live there and could overwrite it before it is read;
//  5. the new span does not overlap an input the function writes (a static,
//     managed or copy-back input), which the copy gave a private snapshot;
//  6. the new address differs from the placeholder by a multiple of
//     kZeroCopyAlignment, so kernels specialised for aligned (vector) access
//     stay valid.
// A mutated (copy-back) input may be zero-copied under the same rules: the
// graph then writes the caller's tensor directly, which is exactly eager
// behaviour, and the replay skips that input's copy-back. When a replay cannot
// patch (4-6), the slots are moved back to the placeholder and the input is
// copied (and copied back when mutated), so every call is correct either way.
// Patching only happens when the address changes; an unchanged address costs
// one pointer comparison. The plan keeps the current arguments of each patched
// kernel node, so a patch allocates nothing (Note [Replay fast path]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/caching_allocator.h"
#include "runtime/graph_recording.h"
#include "runtime/platform.h"

namespace grove::cudagraph_trees {

inline constexpr uintptr_t kZeroCopyAlignment = 16;

struct ZeroCopyCandidate {
  uintptr_t placeholder = 0;  // span start
  size_t span_bytes = 0;
};

class ZeroCopyPlan {
 public:
  struct Site {
    uint32_t node = 0;  // index into the plan's node list
    uint32_t slot = 0;
  };
  struct Input {
    uintptr_t placeholder = 0;
    size_t span_bytes = 0;
    uintptr_t bound = 0;  // the span start the slots point into now
    std::vector<Site> sites;
    std::vector<uint32_t> nodes;  // distinct plan nodes among the sites
  };

  ZeroCopyPlan() = default;
  // Finds the slots of each candidate in `graph` (rule 1-2 above). Returns, per
  // candidate, the plan input index or -1; `why_not` receives the reason when
  // the whole graph is ineligible.
  static ZeroCopyPlan build(const runtime::GraphRecording& graph,
                            const std::vector<ZeroCopyCandidate>& candidates,
                            std::vector<int32_t>& plan_index, std::string& why_not);

  bool empty() const { return inputs_.empty(); }
  size_t input_count() const { return inputs_.size(); }
  uintptr_t bound(int32_t input) const { return inputs_[static_cast<size_t>(input)].bound; }
  const Input& input(int32_t input) const { return inputs_[static_cast<size_t>(input)]; }
  // Moves input `input`'s slots so they point into the span starting at `span_start`.
  void patch(int32_t input, uintptr_t span_start, runtime::GraphRecording& graph);

 private:
  std::vector<uint32_t> kernel_node_index_;  // plan node -> graph kernel-node index
  std::vector<runtime::KernelArgs> args_;    // plan node -> arguments as currently set
  std::vector<Input> inputs_;
};

}  // namespace grove::cudagraph_trees
