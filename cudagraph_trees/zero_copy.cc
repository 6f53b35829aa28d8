#include "cudagraph_trees/zero_copy.h"

#include <algorithm>
#include <map>

#include "runtime/error.h"

namespace grove::cudagraph_trees {

ZeroCopyPlan ZeroCopyPlan::build(const runtime::GraphRecording& graph,
                                 const std::vector<ZeroCopyCandidate>& candidates,
                                 std::vector<int32_t>& plan_index, std::string& why_not) {
  // Note [Zero-copy inputs], rules 1 and 2.
  ZeroCopyPlan plan;
  plan_index.assign(candidates.size(), -1);
  std::vector<runtime::KernelNodeInfo> nodes = graph.kernel_nodes();
  if (nodes.size() != graph.node_count()) {
    why_not = str_cat("the graph has ", graph.node_count() - nodes.size(),
                      " non-kernel nodes (copies, memsets or host functions)");
    return plan;
  }
  for (const runtime::KernelNodeInfo& node : nodes) {
    if (!node.launched_by_grove) {
      why_not = str_cat("kernel '", node.kernel_name, "' was launched by a library");
      return plan;
    }
  }
  std::map<size_t, uint32_t> plan_node_of;  // graph kernel-node index -> plan node
  for (size_t c = 0; c < candidates.size(); ++c) {
    const ZeroCopyCandidate& candidate = candidates[c];
    if (candidate.span_bytes == 0) continue;
    Input input;
    input.placeholder = candidate.placeholder;
    input.span_bytes = candidate.span_bytes;
    input.bound = candidate.placeholder;
    for (const runtime::KernelNodeInfo& node : nodes) {
      for (size_t s = 0; s < node.args.slots.size(); ++s) {
        uint64_t value = node.args.slots[s];
        if (value < candidate.placeholder ||
            value >= candidate.placeholder + candidate.span_bytes) {
          continue;
        }
        auto [at, added] =
            plan_node_of.emplace(node.kernel_node_index, static_cast<uint32_t>(plan.args_.size()));
        if (added) {
          plan.kernel_node_index_.push_back(node.kernel_node_index);
          plan.args_.push_back(node.args);
        }
        input.sites.push_back(Site{at->second, static_cast<uint32_t>(s)});
        if (std::find(input.nodes.begin(), input.nodes.end(), at->second) == input.nodes.end()) {
          input.nodes.push_back(at->second);
        }
      }
    }
    // An input no kernel reads needs neither a copy nor a patch; keeping it in
    // the plan (with no sites) makes its replays free.
    plan_index[c] = static_cast<int32_t>(plan.inputs_.size());
    plan.inputs_.push_back(std::move(input));
  }
  return plan;
}

void ZeroCopyPlan::patch(int32_t index, uintptr_t span_start, runtime::GraphRecording& graph) {
  Input& input = inputs_[static_cast<size_t>(index)];
  uint64_t delta = static_cast<uint64_t>(span_start) - static_cast<uint64_t>(input.bound);
  for (const Site& site : input.sites)
    args_[site.node].slots[site.slot] += delta;  // wraps mod 2^64
  for (uint32_t node : input.nodes)
    graph.set_kernel_node_args(kernel_node_index_[node], args_[node]);
  input.bound = span_start;
}

}  // namespace grove::cudagraph_trees
