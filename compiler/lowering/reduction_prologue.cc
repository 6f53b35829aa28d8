#include "compiler/lowering/reduction_prologue.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "runtime/error.h"

namespace grove::compiler::lowering {

namespace {

// Note [Fused expression depth] bounds a group's depth by 256; the members of
// both groups together bound the merged depth.
constexpr size_t kMaxMergedMembers = 256;

// Thread-per-row needs enough rows to fill warps and short enough rows that
// one thread's sequential loop is not the kernel's latency.
constexpr int64_t kMinThreadRows = 64;
constexpr int64_t kMaxThreadRowLength = 4096;

// Whether root `root_index`'s group (whose reduction is `reduction_index`:
// the root itself, or the group's reduction under a pointwise root) may take
// the group of `value_id`'s producer.
bool mergeable_producer(const LoweringGraph& graph, const FusionPlan& plan, int root_index,
                        int reduction_index, int value_id) {
  const LoweringValue& value = graph.value(value_id);
  if (value.producer < 0 || value.dynamic() || plan.inlined[static_cast<size_t>(value_id)]) {
    return false;
  }
  const int producer_index = value.producer;
  const LoweringNode& producer = graph.node(producer_index);
  if (producer.node_class != NodeClass::kPointwise || producer.pointwise != PointwiseKind::kHook ||
      producer.in_place() || producer.results.size() != 1 ||
      !plan.is_root[static_cast<size_t>(producer_index)] ||
      plan.reduction[static_cast<size_t>(producer_index)] >= 0 ||
      !plan.extra_outputs[static_cast<size_t>(producer_index)].empty()) {
    return false;
  }
  for (const auto& [consumer, position] : graph.uses()[static_cast<size_t>(value_id)]) {
    if (consumer == root_index && position != 0) return false;
  }
  // The merged kernel launches at the producer's place: everything else the
  // reduction's group reads must exist by then.
  for (int member : plan.members[static_cast<size_t>(root_index)]) {
    for (int operand : graph.node(member).operands) {
      if (operand == value_id || plan.inlined[static_cast<size_t>(operand)]) continue;
      if (graph.value(operand).producer >= producer_index) return false;
    }
  }
  for (int n = producer_index + 1; n < root_index; ++n) {
    const LoweringNode& between = graph.node(n);
    if (between.node_class == NodeClass::kHost || between.in_place()) return false;
  }
  // Embedding and dropout need unmerged coordinates (Note [Fusion groups]).
  const ops::ReductionPlan row_plan = reduction_plan(graph.node(reduction_index));
  for (int member : plan.members[static_cast<size_t>(producer_index)]) {
    if (graph.node(member).pointwise != PointwiseKind::kHook && row_plan.reduced_dims.size() != 1) {
      return false;
    }
  }
  return plan.members[static_cast<size_t>(producer_index)].size() +
             plan.members[static_cast<size_t>(root_index)].size() <=
         kMaxMergedMembers;
}

// Note [Reduction prologues] under a pointwise root (Note [Per-row values
// broadcast in their reduction's kernel]: rms_norm written out): the one
// materialized pointwise value the group reads, and reads only per element of
// its rows (every member reading it is pointwise of the row's shape, as is
// the value), or -1. A pre-norm residual add before such a norm.
int element_read_value(const LoweringGraph& graph, const FusionPlan& plan, int root,
                       const runtime::Shape& row) {
  const LoweringNode& root_node = graph.node(root);
  if (root_node.node_class != NodeClass::kPointwise ||
      graph.value(root_node.results[0]).type.shape != row) {
    return -1;
  }
  int found = -1;
  for (int member : plan.members[static_cast<size_t>(root)]) {
    const LoweringNode& reader = graph.node(member);
    for (int operand : reader.operands) {
      const LoweringValue& value = graph.value(operand);
      if (plan.inlined[static_cast<size_t>(operand)] || value.producer < 0 ||
          graph.node(value.producer).node_class != NodeClass::kPointwise) {
        continue;  // computed here, or a leaf (an input, a GEMM's result, a view)
      }
      if (reader.node_class != NodeClass::kPointwise || value.type.shape != row ||
          graph.value(reader.results[0]).type.shape != row || (found >= 0 && found != operand)) {
        return -1;
      }
      found = operand;
    }
  }
  return found;
}

}  // namespace

ReductionPrologues reduction_prologues_mode() {
  const char* value = std::getenv("GROVE_FUSE_REDUCTION_PROLOGUES");
  // Note [Reduction prologues]: row reductions only by default.
  if (value == nullptr || *value == '\0') return ReductionPrologues::kRowReductions;
  const std::string text = value;
  GROVE_CHECK_AS(ConfigError, text == "0" || text == "1", "GROVE_FUSE_REDUCTION_PROLOGUES='", text,
                 "': expected 1 (every reduction computes and writes its elementwise producer, "
                 "and column reductions run a row per thread on cuda) or 0 (none does; unset: "
                 "row reductions only)");
  return text == "1" ? ReductionPrologues::kAll : ReductionPrologues::kNone;
}

void fuse_reduction_prologues(const LoweringGraph& graph, FusionPlan& plan) {
  const size_t node_count = graph.nodes().size();
  plan.extra_outputs.assign(node_count, {});
  plan.written_by.assign(graph.values().size(), -1);
  plan.launches_here.assign(node_count, -1);
  const ReductionPrologues mode = reduction_prologues_mode();
  if (mode == ReductionPrologues::kNone) return;
  for (size_t n = 0; n < node_count; ++n) {
    const LoweringNode& node = graph.node(static_cast<int>(n));
    if (!plan.is_root[n] || plan.reduction[n] < 0 || node.results.size() != 1 ||
        node.operands.empty()) {
      continue;
    }
    const int reduction_index = plan.reduction[n];
    const LoweringNode& reduction = graph.node(reduction_index);
    const ops::ReductionPlan row_plan = reduction_plan(reduction);
    if (row_plan.mean_over_rows || row_plan.operand_layouts.empty() ||
        row_plan.operand_layouts[0] != ops::RowLayout::kFull) {
      continue;
    }
    const runtime::Shape& row = graph.value(reduction.operands[0]).type.shape;
    const int64_t rank = static_cast<int64_t>(row.size());
    // One reduced dim, the last (layer_norm's, softmax's): no merged dims.
    const bool row_reduction =
        row_plan.reduced_dims.size() == 1 && row_plan.reduced_dims[0] == rank - 1;
    if (mode == ReductionPrologues::kRowReductions && !row_reduction) continue;
    const int value_id = reduction_index == static_cast<int>(n)
                             ? node.operands[0]
                             : element_read_value(graph, plan, static_cast<int>(n), row);
    if (value_id < 0 ||
        !mergeable_producer(graph, plan, static_cast<int>(n), reduction_index, value_id)) {
      continue;
    }
    const auto producer = static_cast<size_t>(graph.value(value_id).producer);
    std::vector<int> members = plan.members[producer];
    members.insert(members.end(), plan.members[n].begin(), plan.members[n].end() - 1);
    std::sort(members.begin(), members.end());
    members.push_back(static_cast<int>(n));
    plan.members[n] = std::move(members);
    plan.members[producer].clear();
    plan.is_root[producer] = false;
    plan.extra_outputs[n].push_back(value_id);
    plan.written_by[static_cast<size_t>(value_id)] = static_cast<int>(n);
    plan.launches_here[producer] = static_cast<int>(n);
  }
}

bool use_thread_rows(const LoweringGraph& graph, const LoweringNode& reduction,
                     const codegen::KernelSpec& spec) {
  if (reduction_prologues_mode() != ReductionPrologues::kAll || spec.warp_rows ||
      !spec.part_sizes.empty()) {
    return false;
  }
  const ops::ReductionPlan row_plan = reduction_plan(reduction);
  const int64_t rank = graph.value(reduction.operands[0]).type.rank();
  if (row_plan.mean_over_rows || row_plan.reduced_dims.empty() || rank < 2 ||
      row_plan.reduced_dims.back() == rank - 1) {
    return false;  // a row reduction: one block per row reads the row coalesced already
  }
  return spec.row_count() >= kMinThreadRows && spec.row_length() <= kMaxThreadRowLength;
}

}  // namespace grove::compiler::lowering
