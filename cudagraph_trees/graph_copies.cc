#include "cudagraph_trees/graph_copies.h"

namespace grove::cudagraph_trees {

size_t GraphCopies::add(runtime::GraphRecording& graph, std::vector<CopiedInput>& copied_inputs,
                        const TensorList& inputs) {
  runtime::KernelHandle kernel;
  for (CopiedInput& copied : copied_inputs) {
    if (copied.span_bytes == 0 || copied.zero_copy >= 0) continue;
    if (!kernel) kernel = runtime::span_copy_kernel(graph.device());
    const char* source = copied.source_in(inputs[copied.index]);
    Copy copy;
    copy.args = runtime::span_copy_args(copied.placeholder, source, copied.span_bytes);
    copy.kernel_node =
        graph.add_head_kernel(kernel, runtime::span_copy_dims(copied.span_bytes), copy.args);
    copied.graph_copy = static_cast<int32_t>(copies_.size());
    copies_.push_back(std::move(copy));
  }
  return copies_.size();
}

void GraphCopies::repoint(Copy& copy, const CopiedInput& copied, const char* source,
                          ReplayContext& context) {
  copy.args.slots[runtime::kSpanCopySourceSlot] = reinterpret_cast<uint64_t>(source);
  copy.args.slots[runtime::kSpanCopyBytesSlot] = copied.span_bytes;
  context.graph->set_kernel_node_args(copy.kernel_node, copy.args);
  copy.armed = true;
  ++context.counters.copy_source_patches;
}

void GraphCopies::disarm(ReplayContext& context) {
  for (Copy& copy : copies_) {
    if (!copy.armed) continue;
    copy.args.slots[runtime::kSpanCopyBytesSlot] = 0;
    context.graph->set_kernel_node_args(copy.kernel_node, copy.args);
    copy.armed = false;
  }
}

}  // namespace grove::cudagraph_trees
