// Fusion: which values are computed inside the kernel of their consumer
// instead of being written to memory, and so which nodes share one kernel.
//
// Note [Fusion groups]: a group is a tree of pointwise and reduction nodes
// whose inner values are "inlined": each is read by exactly one consumer in
// the group and is not a program output. Its root is the one node whose
// results are materialized. Rules, checked per value v produced by node P and
// read by consumer C:
//   - P is pointwise (not an in-place update), C is pointwise or a reduction;
//     v has C's iteration shape (C's result shape, or for a reduction the shape
//     of its row operand), so inlining never recomputes an element. A producer
//     without operands (`full`) inlines into any number of consumers.
//   - into a reduction, only the row operands (RowLayout::kFull) take an
//     inlined prologue, and only from expression hooks (not embedding or
//     dropout, which need unmerged coordinates);
//   - a reduction's result inlines into one pointwise consumer of the same
//     shape (its epilogue), unless the reduction averages its rows
//     (cross_entropy: two kernels);
//   - a group holds at most one reduction; extra ones become roots;
//   - a reduction over merged dims takes no prologue it could not index
//     (Note [Reductions read what they can index] in fusion.cc);
//   - a pointwise value read by several pointwise consumers of its shape that
//     all belong to one group is inlined too (Note [Shared values inside one
//     group] in fusion.cc).
// Views, GEMMs, concat and host ops are never inside a group: their operands
// are materialized.
#pragma once

#include <vector>

#include "compiler/lowering/lowering_graph.h"

namespace grove::compiler::lowering {

struct FusionPlan {
  std::vector<bool> inlined;  // per value
  std::vector<bool> is_root;  // per node: pointwise/reduction nodes that launch a kernel
  // Per root node: the nodes of its group (root last, others in program order).
  std::vector<std::vector<int>> members;
  // Per root node: the group's reduction node, or -1.
  std::vector<int> reduction;
  // Per root node: values its kernel also writes, per element of its
  // reduction's rows (Note [Reduction prologues] in reduction_prologue.h).
  std::vector<std::vector<int>> extra_outputs;
  // Per value: the root whose kernel writes it as an extra output, or -1.
  std::vector<int> written_by;
  // Per node: the root whose kernel launches at this node's place in program
  // order instead of its own (a reduction that took this node's group), or -1.
  std::vector<int> launches_here;
};

FusionPlan plan_fusion(const LoweringGraph& graph);

// The row plan of a reduction node (OpDef::reduction_plan on its context).
ops::ReductionPlan reduction_plan(const LoweringNode& node);

}  // namespace grove::compiler::lowering
