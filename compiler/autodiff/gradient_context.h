// GradientContext is what an op's gradient rule (OpDef::gradient) sees: the
// forward node, the types of its operands and results, the gradients flowing
// into its results, and the ProgramBuilder to emit the gradient computation
// into. The forward node's operands and results are values of that same
// builder (the autodiff builds one joint program and splits it afterwards,
// see compiler/autodiff/training_programs.h), so a rule reads forward values
// directly and never decides what is saved.
//
// A rule returns one ValueId per operand: the gradient of the loss with respect
// to that operand, with exactly the operand's shape and dtype, or ir::kNoValue
// where the operand is not differentiable (integer labels, ids, bool masks) or
// not wanted (wants(i) is false). The helpers below do the shape bookkeeping
// every rule needs: summing a broadcast gradient back to an operand's shape,
// broadcasting a reduced gradient back out, constants of the right dtype.
#pragma once

#include <vector>

#include "compiler/ir/builder.h"
#include "compiler/ops/op_registry.h"

namespace grove::compiler::ops {

struct GradientContext {
  ir::ProgramBuilder& builder;
  ir::Node node;                          // a copy: emitting nodes may move the original
  OpContext op;                           // operand types and normalized attrs
  std::vector<TensorType> result_types;   // one per node result
  std::vector<ir::ValueId> result_grads;  // one per result; kNoValue where none flows
  std::vector<bool> wants_grad;           // one per operand

  ir::ValueId operand(size_t index) const { return node.operands.at(index); }
  ir::ValueId result(size_t index = 0) const { return node.results.at(index); }
  // The gradient flowing into result `index`; a rule is only called when at
  // least one result has one, and a single-result rule may rely on grad(0).
  ir::ValueId grad(size_t index = 0) const { return result_grads.at(index); }
  const TensorType& operand_type(size_t index) const { return op.operand(index); }
  const TensorType& result_type(size_t index = 0) const { return result_types.at(index); }
  bool wants(size_t index) const { return wants_grad.at(index); }
  const Attributes& attrs() const { return op.attrs; }
  ir::ProgramBuilder& b() { return builder; }
};

}  // namespace grove::compiler::ops

namespace grove::compiler::autodiff {

using ir::ProgramBuilder;
using ir::ValueId;
using runtime::DType;
using runtime::Shape;

// A scalar constant of `dtype` (broadcasts against anything).
ValueId scalar(ProgramBuilder& b, double value, DType dtype);
// Sums `grad` (whose shape `value` broadcast to) back down to `shape`: over the
// leading dims `shape` lacks, and (keeping them) over dims where `shape` is 1.
ValueId sum_to_shape(ProgramBuilder& b, ValueId grad, const Shape& shape);
// Broadcasts `value` to exactly `shape` (numpy rules); no node when it already has it.
ValueId broadcast_to(ProgramBuilder& b, ValueId value, const Shape& shape);
// The inverse of a reduction's shape change: reinserts the reduced `dims` of
// `input_shape` (sorted, normalized) as size-1 dims of `reduced`.
ValueId unsqueeze_reduced(ProgramBuilder& b, ValueId reduced, const Shape& input_shape,
                          const std::vector<int64_t>& dims);
// A [..., classes] tensor of `dtype` with 1 where the last index equals the
// integer id at [...], 0 elsewhere. Built from existing ops only.
ValueId one_hot(ProgramBuilder& b, ValueId ids, int64_t classes, DType dtype);
// Swaps the last two dims (a view).
ValueId transpose_last(ProgramBuilder& b, ValueId value);

}  // namespace grove::compiler::autodiff
