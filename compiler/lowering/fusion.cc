#include "compiler/lowering/fusion.h"

#include <algorithm>
#include <functional>

namespace grove::compiler::lowering {

ops::ReductionPlan reduction_plan(const LoweringNode& node) {
  return node.def->reduction_plan(node.context);
}

namespace {

const runtime::Shape& iteration_shape_of_consumer(const LoweringGraph& graph,
                                                  const LoweringNode& consumer) {
  if (consumer.node_class == NodeClass::kReduction) {
    return graph.value(consumer.operands[0]).type.shape;
  }
  return graph.value(consumer.results[0]).type.shape;
}

bool can_inline(const LoweringGraph& graph, int value_id) {
  const LoweringValue& value = graph.value(value_id);
  if (value.producer < 0 || value.is_output || value.dynamic()) return false;
  const LoweringNode& producer = graph.node(value.producer);
  const auto& uses = graph.uses()[static_cast<size_t>(value_id)];
  if (uses.empty()) return false;
  const bool is_constant = producer.operands.empty() &&
                           producer.node_class == NodeClass::kPointwise &&
                           producer.pointwise == PointwiseKind::kHook;
  if (!is_constant) {
    for (const auto& use : uses) {
      if (use.first != uses.front().first) return false;  // one consumer node
    }
  }
  for (const auto& [consumer_index, position] : uses) {
    const LoweringNode& consumer = graph.node(consumer_index);
    if (consumer.node_class == NodeClass::kPointwise) {
      if (consumer.pointwise == PointwiseKind::kEmbedding && position == 0) return false;
      if (consumer.pointwise == PointwiseKind::kDropout && position != 0) return false;
    } else if (consumer.node_class == NodeClass::kReduction) {
      ops::ReductionPlan plan = reduction_plan(consumer);
      if (plan.operand_layouts.at(static_cast<size_t>(position)) != ops::RowLayout::kFull) {
        return false;
      }
      if (producer.node_class != NodeClass::kPointwise ||
          producer.pointwise != PointwiseKind::kHook) {
        return false;
      }
    } else {
      return false;
    }
    if (!is_constant && value.type.shape != iteration_shape_of_consumer(graph, consumer)) {
      return false;
    }
    if (producer.node_class == NodeClass::kReduction) {
      if (consumer.node_class != NodeClass::kPointwise ||
          consumer.pointwise != PointwiseKind::kHook || consumer.in_place()) {
        return false;
      }
      if (reduction_plan(producer).mean_over_rows) return false;
    }
  }
  if (producer.node_class == NodeClass::kPointwise) {
    return !producer.in_place() && producer.results.size() == 1;
  }
  return producer.node_class == NodeClass::kReduction && producer.results.size() == 1;
}

}  // namespace

FusionPlan plan_fusion(const LoweringGraph& graph) {
  FusionPlan plan;
  const size_t node_count = graph.nodes().size();
  plan.inlined.assign(graph.values().size(), false);
  for (size_t v = 0; v < graph.values().size(); ++v) {
    plan.inlined[v] = can_inline(graph, static_cast<int>(v));
  }
  plan.is_root.assign(node_count, false);
  plan.members.assign(node_count, {});
  plan.reduction.assign(node_count, -1);
  auto fusible = [&](const LoweringNode& node) {
    return node.node_class == NodeClass::kPointwise || node.node_class == NodeClass::kReduction;
  };
  // Reverse order: un-inlining a second reduction turns it into a root that is
  // visited later (Note [Fusion groups]).
  for (size_t n = node_count; n-- > 0;) {
    const LoweringNode& node = graph.node(static_cast<int>(n));
    if (!fusible(node)) continue;
    bool any_materialized = false;
    for (int result : node.results) any_materialized |= !plan.inlined[static_cast<size_t>(result)];
    if (!any_materialized) continue;
    plan.is_root[n] = true;
    std::vector<int> members;
    int reduction = node.node_class == NodeClass::kReduction ? static_cast<int>(n) : -1;
    std::function<void(int)> visit = [&](int node_index) {
      for (int operand : graph.node(node_index).operands) {
        if (!plan.inlined[static_cast<size_t>(operand)]) continue;
        int producer = graph.value(operand).producer;
        if (graph.node(producer).node_class == NodeClass::kReduction) {
          if (reduction >= 0 && reduction != producer) {
            plan.inlined[static_cast<size_t>(operand)] = false;
            continue;
          }
          reduction = producer;
        }
        if (std::find(members.begin(), members.end(), producer) == members.end()) {
          members.push_back(producer);
          visit(producer);
        }
      }
    };
    visit(static_cast<int>(n));
    std::sort(members.begin(), members.end());
    members.push_back(static_cast<int>(n));
    plan.members[n] = std::move(members);
    plan.reduction[n] = reduction;
  }
  return plan;
}

}  // namespace grove::compiler::lowering
