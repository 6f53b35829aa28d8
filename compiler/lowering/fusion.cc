#include "compiler/lowering/fusion.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "compiler/lowering/reduction_prologue.h"

namespace grove::compiler::lowering {

ops::ReductionPlan reduction_plan(const LoweringNode& node) {
  return node.def->reduction_plan(node.context);
}

namespace {

// The deepest chain of nodes one fused expression may hold (Note [Fused
// expression depth]).
constexpr int kMaxFusedDepth = 256;

const runtime::Shape& iteration_shape_of_consumer(const LoweringGraph& graph,
                                                  const LoweringNode& consumer) {
  if (consumer.node_class == NodeClass::kReduction) {
    return graph.value(consumer.operands[0]).type.shape;
  }
  return graph.value(consumer.results[0]).type.shape;
}

// Note [Per-row values broadcast in their reduction's kernel]: a per-row value
// of a reduction over the last dim with keepdim (rms_norm written out:
// rsqrt(mean(x * x, -1, keepdim) + eps)), read by one pointwise consumer with
// the reduction's row shape (x * that), is computed in the reduction's kernel
// and the consumer with it: the kernel's element pass after the row's
// reduction (Note [Kernel spec reductions]) evaluates the consumer per element
// with the per-row value at hand, where two kernels wrote the per-row value
// and read it back. `value` reaches the reduction through pointwise nodes of
// its own shape, each read only by the next. Returns that reduction node, or -1.
// Test: Fusion.RmsNormWrittenOutIsOneKernel (tests/compiler/lowering/
// ops_lowering_test.cc).
int row_broadcast_reduction(const LoweringGraph& graph, int value_id,
                            const LoweringNode& consumer) {
  const LoweringValue& value = graph.value(value_id);
  if (consumer.node_class != NodeClass::kPointwise || consumer.pointwise != PointwiseKind::kHook ||
      consumer.in_place()) {
    return -1;
  }
  int at = value_id;
  for (int hops = 0; hops < 8; ++hops) {
    const LoweringValue& here = graph.value(at);
    if (here.producer < 0 || here.type.shape != value.type.shape) return -1;
    const LoweringNode& producer = graph.node(here.producer);
    if (producer.node_class == NodeClass::kReduction) {
      if (producer.results.size() != 1) return -1;
      const ops::ReductionPlan plan = reduction_plan(producer);
      const runtime::Shape& row = graph.value(producer.operands[0]).type.shape;
      const int64_t last = static_cast<int64_t>(row.size()) - 1;
      const bool last_dim_only =
          plan.reduced_dims.size() == 1 && plan.reduced_dims[0] == last && row.back() > 1;
      if (!last_dim_only || !plan.keepdim || !plan.per_row_result || plan.mean_over_rows ||
          plan.operand_layouts.empty() || plan.operand_layouts[0] != ops::RowLayout::kFull ||
          graph.value(consumer.results[0]).type.shape != row) {
        return -1;
      }
      return here.producer;
    }
    if (producer.node_class != NodeClass::kPointwise ||
        producer.pointwise != PointwiseKind::kHook || producer.in_place() ||
        producer.results.size() != 1) {
      return -1;
    }
    // The next value towards the reduction: the producer's one operand of this shape.
    int next = -1;
    for (int operand : producer.operands) {
      if (graph.value(operand).type.shape != value.type.shape) continue;
      if (next >= 0) return -1;
      next = operand;
    }
    if (next < 0 || graph.uses()[static_cast<size_t>(next)].size() != 1) return -1;
    at = next;
  }
  return -1;
}

// Note [Small values computed per element]: a pointwise value of at most
// kMaxRecomputedElements elements (per-channel arithmetic on parameters: an
// inference batch norm's rsqrt(var + eps) * weight) read by one pointwise
// consumer that broadcasts it is computed in the consumer's kernel, per
// element, instead of by a kernel of its own: a few flops per element where
// a launch and a write and read of the small value were. Test:
// Fusion.BatchNormInferenceIsOneKernel (tests/compiler/lowering/ops_lowering_test.cc).
constexpr int64_t kMaxRecomputedElements = 4096;

// Whether pointwise value `value_id` is computed from no reduction's result
// through pointwise nodes (a reduction's row would then be redone per element).
bool computed_without_reductions(const LoweringGraph& graph, int value_id) {
  std::vector<int> pending = {value_id};
  for (int visited = 0; !pending.empty(); ++visited) {
    if (visited > 64) return false;
    const LoweringValue& value = graph.value(pending.back());
    pending.pop_back();
    if (value.producer < 0) continue;
    const LoweringNode& producer = graph.node(value.producer);
    if (producer.node_class == NodeClass::kReduction) return false;
    if (producer.node_class != NodeClass::kPointwise) continue;  // views, GEMMs: materialized
    for (int operand : producer.operands) pending.push_back(operand);
  }
  return true;
}

bool small_value_broadcast(const LoweringGraph& graph, int value_id, const LoweringNode& consumer) {
  const LoweringValue& value = graph.value(value_id);
  const LoweringNode& producer = graph.node(value.producer);
  return producer.node_class == NodeClass::kPointwise &&
         producer.pointwise == PointwiseKind::kHook && !producer.in_place() &&
         consumer.node_class == NodeClass::kPointwise &&
         consumer.pointwise == PointwiseKind::kHook && !consumer.in_place() &&
         runtime::shape_numel(value.type.shape) <= kMaxRecomputedElements &&
         computed_without_reductions(graph, value_id);
}

// Note [Gathers and ids computed where they are read]: two more values cost
// less to recompute per element than a kernel of their own (a launch, a
// write and a read back), so their consumer computes them:
//   - the rows an embedding gathers, read by one pointwise consumer that
//     broadcasts them (a learned position embedding [1, T, D] added to the
//     token embeddings [B, T, D]: GPT-2, BERT, BART): per element, the id and
//     the table element, the two loads the consumer's read of the gathered
//     value stood for;
//   - an embedding's ids (position 1), at most kMaxRecomputedElements of them,
//     computed from no reduction by pointwise nodes (a token-type buffer
//     expanded over the batch, the flat ids of advanced indexing: Python's
//     negative-index wrap, times the stride, plus the next dim's): the integer
//     arithmetic is redone per gathered element.
// Both only move where exact values are computed (a gather and integer
// arithmetic), so the bits are those of the separate kernels. Tests:
// Fusion.BroadcastEmbeddingIsComputedByItsConsumer,
// Fusion.EmbeddingIdsAreComputedByTheGather.
bool gather_or_ids_recomputed(const LoweringGraph& graph, int value_id,
                              const LoweringNode& consumer, int position) {
  const LoweringValue& value = graph.value(value_id);
  const LoweringNode& producer = graph.node(value.producer);
  if (producer.node_class != NodeClass::kPointwise || producer.in_place() ||
      producer.results.size() != 1 || consumer.node_class != NodeClass::kPointwise ||
      consumer.in_place()) {
    return false;
  }
  if (producer.pointwise == PointwiseKind::kEmbedding) {
    return consumer.pointwise == PointwiseKind::kHook;
  }
  return producer.pointwise == PointwiseKind::kHook &&
         consumer.pointwise == PointwiseKind::kEmbedding && position == 1 &&
         runtime::shape_numel(value.type.shape) <= kMaxRecomputedElements &&
         computed_without_reductions(graph, value_id);
}

// GROVE_FUSE_GATHERS=0 keeps Note [Gathers and ids computed where they are
// read] off (each gather and its ids a kernel of its own), for A/Bs.
bool gather_recompute_enabled() {
  const char* value = std::getenv("GROVE_FUSE_GATHERS");
  return value == nullptr || std::string(value) != "0";
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
    } else if (consumer.node_class == NodeClass::kConcat) {
      // Note [Concat parts compute their operand]: a pointwise operand read
      // by nothing else is computed by the concat's copy kernel of that part.
      if (producer.node_class != NodeClass::kPointwise ||
          producer.pointwise != PointwiseKind::kHook || is_constant) {
        return false;
      }
      continue;  // a part's iteration space is the operand's own shape
    } else {
      return false;
    }
    if (!is_constant && value.type.shape != iteration_shape_of_consumer(graph, consumer) &&
        row_broadcast_reduction(graph, value_id, consumer) < 0 &&
        !small_value_broadcast(graph, value_id, consumer) &&
        !(gather_recompute_enabled() &&
          gather_or_ids_recomputed(graph, value_id, consumer, position))) {
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

// The node whose kernel computes `node_index` under `inlined`: follow inlined
// results to their consumer until a node materializes a result.
int group_root(const LoweringGraph& graph, const std::vector<bool>& inlined, int node_index) {
  for (;;) {
    const LoweringNode& node = graph.node(node_index);
    if (node.results.size() != 1 || !inlined[static_cast<size_t>(node.results[0])]) {
      return node_index;
    }
    node_index = graph.uses()[static_cast<size_t>(node.results[0])].front().first;
  }
}

// Note [Shared values inside one group]: a pointwise value read by several
// pointwise consumers that all end up in one group is inlined too (computed
// once per element of that kernel: the assembler memoizes values per access
// map, and every consumer has the value's shape, so every map is the same).
// Gradients of gelu, tanh and layer_norm read one intermediate many times;
// this keeps each of them one kernel.
bool can_share(const LoweringGraph& graph, const std::vector<bool>& inlined, int value_id) {
  const LoweringValue& value = graph.value(value_id);
  if (value.producer < 0 || value.is_output || value.dynamic()) return false;
  const LoweringNode& producer = graph.node(value.producer);
  if (producer.node_class != NodeClass::kPointwise || producer.pointwise != PointwiseKind::kHook ||
      producer.in_place() || producer.results.size() != 1 || producer.operands.empty()) {
    return false;
  }
  const auto& uses = graph.uses()[static_cast<size_t>(value_id)];
  if (uses.size() < 2) return false;
  int root = -1;
  for (const auto& [consumer_index, position] : uses) {
    const LoweringNode& consumer = graph.node(consumer_index);
    if (consumer.node_class != NodeClass::kPointwise ||
        consumer.pointwise != PointwiseKind::kHook || consumer.in_place() ||
        graph.value(consumer.results[0]).type.shape != value.type.shape) {
      return false;
    }
    int consumer_root = group_root(graph, inlined, consumer_index);
    if (root >= 0 && consumer_root != root) return false;
    root = consumer_root;
  }
  return true;
}

// Note [Fused expression depth]: the kernel assembler walks a group's
// expression tree recursively from its root, and the code generator emits one
// kernel per group, so a group's depth must not grow with the model: a chain of
// 15,000 gelus overflowed the stack while assembling. Walking nodes in program
// order, a node's depth is one more than the deepest producer inlined into it;
// an operand whose producer is already kMaxFusedDepth deep is materialized
// instead (its producer roots a group of its own). Materializing is always
// valid, but it may split the consumers of a shared value (Note [Shared values
// inside one group]) across two groups, so such values are materialized too,
// later values first. Test:
// LongChains.FiftyThousandNodeChainsCompileAndRunOnBothBackends.
void bound_fused_depth(const LoweringGraph& graph, std::vector<bool>& inlined) {
  const size_t node_count = graph.nodes().size();
  std::vector<int> depth(node_count, 1);
  for (size_t n = 0; n < node_count; ++n) {
    const LoweringNode& node = graph.node(static_cast<int>(n));
    for (int operand : node.operands) {
      if (!inlined[static_cast<size_t>(operand)]) continue;
      int producer_depth = depth[static_cast<size_t>(graph.value(operand).producer)];
      if (producer_depth >= kMaxFusedDepth) {
        inlined[static_cast<size_t>(operand)] = false;
      } else {
        depth[n] = std::max(depth[n], producer_depth + 1);
      }
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t v = graph.values().size(); v-- > 0;) {
      if (!inlined[v]) continue;
      const LoweringValue& value = graph.value(static_cast<int>(v));
      const auto& uses = graph.uses()[v];
      if (graph.node(value.producer).operands.empty()) continue;  // constants: any consumers
      int root = -1;
      for (const auto& use : uses) {
        int consumer_root = group_root(graph, inlined, use.first);
        if (root >= 0 && consumer_root != root) {
          inlined[v] = false;
          changed = true;
          break;
        }
        root = consumer_root;
      }
    }
  }
}

// Note [Reductions read what they can index]: a reduction over several
// non-unit dims merges them into one iteration dim (Note [Merged reduction
// dims]), whose index kernels cannot split (no integer division). So its
// inlined row expression may read a value only if it spans all the merged
// dims or none of them, may hold a dropout only if they are adjacent, and no
// embedding (Note [Row-major index through merged dims], kernel_assembly.cc).
// Otherwise the row operand is materialized by its own kernel and the
// reduction reads it whole. Found by the gradient fuzzer (seeds 20869, 21179:
// a broadcast value read out of bounds, wrong gradients; 23279; 60251: a
// keepdim sum inside the row, the softmax backward's, read broadcast). Tests:
// the gradient cases broadcast_operand_of_a_merged_reduction,
// dropout_over_non_adjacent_dims and log_softmax_summed_over_every_dim
// (tests/compiler/autodiff/gradient_cases.cc).
void keep_reductions_indexable(const LoweringGraph& graph, std::vector<bool>& inlined) {
  for (const LoweringNode& node : graph.nodes()) {
    if (node.node_class != NodeClass::kReduction) continue;
    const int row = node.operands[0];
    if (!inlined[static_cast<size_t>(row)]) continue;
    const runtime::Shape& x = graph.value(row).type.shape;
    std::vector<int64_t> merged;
    for (int64_t d : reduction_plan(node).reduced_dims) {
      if (x[static_cast<size_t>(d)] != 1) merged.push_back(d);
    }
    if (merged.size() < 2) continue;
    bool adjacent = true;
    for (size_t k = 1; k < merged.size(); ++k) {
      for (int64_t d = merged[k - 1] + 1; d < merged[k]; ++d) {
        adjacent = adjacent && x[static_cast<size_t>(d)] == 1;
      }
    }
    bool indexable = true;
    std::vector<int> pending = {row};
    while (!pending.empty() && indexable) {
      const LoweringNode& producer = graph.node(graph.value(pending.back()).producer);
      pending.pop_back();
      if (producer.node_class != NodeClass::kPointwise) continue;
      if (producer.pointwise == PointwiseKind::kEmbedding ||
          (producer.pointwise == PointwiseKind::kDropout && !adjacent)) {
        indexable = false;
      }
      for (int operand : producer.operands) {
        // An inlined pointwise operand is part of the expression; any other
        // (a value of its own, or a reduction the row reads whole, which is
        // marked inlined too) is read by index, so its dims must tile.
        const int operand_producer = graph.value(operand).producer;
        if (inlined[static_cast<size_t>(operand)] && operand_producer >= 0 &&
            graph.node(operand_producer).node_class == NodeClass::kPointwise) {
          pending.push_back(operand);
          continue;
        }
        const runtime::Shape& shape = graph.value(operand).type.shape;
        size_t spanned = 0;
        for (int64_t d : merged) {
          auto j = static_cast<int64_t>(shape.size()) - static_cast<int64_t>(x.size()) + d;
          if (j >= 0 && shape[static_cast<size_t>(j)] == x[static_cast<size_t>(d)]) ++spanned;
        }
        indexable = indexable && (spanned == 0 || spanned == merged.size());
      }
    }
    if (!indexable) inlined[static_cast<size_t>(row)] = false;
  }
}

// Note [Concat parts compute their operand]: a concat part's kernel is a
// plain copy over the operand's shape, with no row to reduce, so an operand
// inlined into it must not hold a reduction (a max inlined into a comparison
// that the concat reads); such an operand is materialized instead. Test:
// importer_ops_test's topk (its rounds concat comparisons with a max).
void keep_concat_parts_elementwise(const LoweringGraph& graph, std::vector<bool>& inlined) {
  for (const LoweringNode& node : graph.nodes()) {
    if (node.node_class != NodeClass::kConcat) continue;
    for (int part : node.operands) {
      if (!inlined[static_cast<size_t>(part)]) continue;
      bool elementwise = true;
      std::vector<int> pending = {part};
      while (!pending.empty() && elementwise) {
        const LoweringNode& producer = graph.node(graph.value(pending.back()).producer);
        pending.pop_back();
        elementwise = producer.node_class == NodeClass::kPointwise;
        for (int operand : producer.operands) {
          if (inlined[static_cast<size_t>(operand)]) pending.push_back(operand);
        }
      }
      if (!elementwise) inlined[static_cast<size_t>(part)] = false;
    }
  }
}

}  // namespace

FusionPlan plan_fusion(const LoweringGraph& graph) {
  FusionPlan plan;
  const size_t node_count = graph.nodes().size();
  plan.inlined.assign(graph.values().size(), false);
  for (size_t v = 0; v < graph.values().size(); ++v) {
    plan.inlined[v] = can_inline(graph, static_cast<int>(v));
  }
  // Later values first, until nothing changes: sharing a value pulls its
  // producer into the group, whose own operands may then be shared.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t v = graph.values().size(); v-- > 0;) {
      if (plan.inlined[v] || !can_share(graph, plan.inlined, static_cast<int>(v))) continue;
      plan.inlined[v] = true;
      changed = true;
    }
  }
  bound_fused_depth(graph, plan.inlined);
  keep_reductions_indexable(graph, plan.inlined);
  keep_concat_parts_elementwise(graph, plan.inlined);
  plan.is_root.assign(node_count, false);
  plan.members.assign(node_count, {});
  plan.reduction.assign(node_count, -1);
  auto fusible = [&](const LoweringNode& node) {
    return node.node_class == NodeClass::kPointwise || node.node_class == NodeClass::kReduction;
  };
  // Reverse order: un-inlining a second reduction turns it into a root that is
  // visited later (Note [Fusion groups]). The walk over a group keeps its own
  // stack: a group may hold many nodes.
  std::vector<char> is_member(node_count, 0);
  for (size_t n = node_count; n-- > 0;) {
    const LoweringNode& node = graph.node(static_cast<int>(n));
    if (!fusible(node)) continue;
    bool any_materialized = false;
    for (int result : node.results) any_materialized |= !plan.inlined[static_cast<size_t>(result)];
    if (!any_materialized) continue;
    plan.is_root[n] = true;
    std::vector<int> members;
    int reduction = node.node_class == NodeClass::kReduction ? static_cast<int>(n) : -1;
    std::vector<int> pending = {static_cast<int>(n)};
    while (!pending.empty()) {
      int node_index = pending.back();
      pending.pop_back();
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
        if (!is_member[static_cast<size_t>(producer)]) {
          is_member[static_cast<size_t>(producer)] = 1;
          members.push_back(producer);
          pending.push_back(producer);
        }
      }
    }
    for (int member : members) is_member[static_cast<size_t>(member)] = 0;
    std::sort(members.begin(), members.end());
    members.push_back(static_cast<int>(n));
    plan.members[n] = std::move(members);
    plan.reduction[n] = reduction;
  }
  fuse_reduction_prologues(graph, plan);
  return plan;
}

}  // namespace grove::compiler::lowering
