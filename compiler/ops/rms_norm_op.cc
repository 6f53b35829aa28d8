// rms_norm: LLaMA's RMSNorm, weight * (x * rsqrt(mean(x^2) + eps)) over the
// last dim with the statistics in f32, as one row kernel (a reduction op
// whose result has x's shape, like layer_norm). Built from primitives it was
// two kernels (the mean of squares, then the normalization); the decoder
// programs of serving/llm (decoder_layers.cc) run one per norm. The
// arithmetic is theirs: the row's sum of squares over the row length, plus
// eps, rsqrt, times x, times the weight, in f32 and stored once (Note
// [Kernel spec types]: a cast inside a kernel rounds only when stored).
// Registered by a static initializer when a binary links
// //compiler/ops:decoder_ops.
#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"

namespace grove::compiler::ops {
namespace {

using codegen::ExprOp;
using codegen::ReduceOp;

void register_rms_norm(OpRegistry& registry) {
  OpDef op;
  op.name = "rms_norm";
  op.summary = "weight * x * rsqrt(mean(x^2) + eps) over the last dim, statistics in f32";
  op.min_operands = op.max_operands = 2;
  op.attrs = {{"eps", AttrKind::kFloat, 1e-6}};
  op.kind = OpKind::kReduction;
  op.infer = [](const OpContext& context) {
    require_floating(context, 0);
    require_rank_at_least(context, 0, 1);
    require_same_dtype(context, 0, 1);
    const int64_t features = context.operand(0).shape.back();
    GROVE_CHECK_AS(ShapeError, context.operand(1).shape == Shape{features}, context.where(), ": ",
                   context.describe_operand(1), " must have shape [", features,
                   "] (the last dimension of ", context.describe_operand(0), ")");
    GROVE_CHECK_AS(ShapeError, features > 0, context.where(), ": cannot normalize an empty row");
    GROVE_CHECK(context.attrs.get_float("eps") > 0, context.where(),
                ": attribute 'eps' must be > 0");
    return std::vector<TensorType>{context.operand(0)};
  };
  op.reduction_plan = [](const OpContext& context) {
    ReductionPlan plan;
    plan.reduced_dims = {context.operand(0).rank() - 1};
    plan.per_row_result = false;
    plan.operand_layouts = {RowLayout::kFull, RowLayout::kPerColumn};
    return plan;
  };
  op.reduction_expr = [](codegen::KernelBuilder& emitter, const std::vector<int>& operands,
                         const OpContext& context) {
    const int x = operands[0];
    const int count = emitter.constant(static_cast<double>(context.operand(0).shape.back()));
    const int mean = emitter.binary(
        ExprOp::kDiv, emitter.reduce_value(ReduceOp::kSum, emitter.binary(ExprOp::kMul, x, x)),
        count);
    const int rstd = emitter.unary(
        ExprOp::kRsqrt,
        emitter.binary(ExprOp::kAdd, mean, emitter.constant(context.attrs.get_float("eps"))));
    return emitter.binary(ExprOp::kMul, operands[1], emitter.binary(ExprOp::kMul, x, rstd));
  };
  registry.add(std::move(op));
}

const bool kRegistered = [] {
  register_rms_norm(OpRegistry::global());
  return true;
}();

}  // namespace
}  // namespace grove::compiler::ops
