// Row-wise ops: sum / mean / max over dims, softmax, log_softmax, layer_norm
// and the losses. Each describes its row (ReductionPlan) and its KernelSpec
// pattern (reduction_expr); see Note [Kernel spec reductions].
#include <algorithm>

#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"

namespace grove::compiler::ops {

namespace {

using codegen::ExprOp;
using codegen::ReduceOp;

// The number of elements in one row of `context`'s operand 0 under `plan`.
double row_length(const OpContext& context, const ReductionPlan& plan) {
  double length = 1;
  for (int64_t dim : plan.reduced_dims) {
    length *= static_cast<double>(context.operand(0).shape[static_cast<size_t>(dim)]);
  }
  return length;
}

int innermost_index(codegen::KernelBuilder& emitter) {
  return emitter.index(static_cast<int>(emitter.spec().iteration_shape.size()) - 1);
}

OpDef reduce_op(const std::string& name, const std::string& summary, bool floating_only,
                std::function<int(codegen::KernelBuilder&, int, double)> build) {
  OpDef def;
  def.name = name;
  def.summary = summary;
  def.min_operands = def.max_operands = 1;
  def.attrs = {{"dims", AttrKind::kInts, std::vector<int64_t>{}},
               {"keepdim", AttrKind::kInt, int64_t{0}}};
  def.kind = OpKind::kReduction;
  def.infer = [floating_only](const OpContext& context) {
    if (floating_only) require_floating(context, 0);
    GROVE_CHECK_AS(DTypeError, context.operand(0).dtype != DType::kBool, context.where(), ": ",
                   context.describe_operand(0), " is bool; cast it to a numeric dtype first");
    const TensorType& x = context.operand(0);
    std::vector<int64_t> dims =
        normalize_reduce_dims(context, context.attrs.get_ints("dims"), x.rank());
    bool keepdim = context.attrs.get_int("keepdim") != 0;
    Shape shape;
    for (int64_t d = 0; d < x.rank(); ++d) {
      bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
      GROVE_CHECK_AS(ShapeError, !reduced || x.shape[static_cast<size_t>(d)] > 0, context.where(),
                     ": cannot reduce over the empty dimension ", d, " of ",
                     context.describe_operand(0));
      if (!reduced) {
        shape.push_back(x.shape[static_cast<size_t>(d)]);
      } else if (keepdim) {
        shape.push_back(1);
      }
    }
    return std::vector<TensorType>{with_shape(x, shape)};
  };
  def.reduction_plan = [](const OpContext& context) {
    ReductionPlan plan;
    plan.reduced_dims =
        normalize_reduce_dims(context, context.attrs.get_ints("dims"), context.operand(0).rank());
    plan.keepdim = context.attrs.get_int("keepdim") != 0;
    plan.operand_layouts = {RowLayout::kFull};
    return plan;
  };
  def.reduction_expr = [build](codegen::KernelBuilder& emitter, const std::vector<int>& operands,
                               const OpContext& context) {
    ReductionPlan plan;
    plan.reduced_dims =
        normalize_reduce_dims(context, context.attrs.get_ints("dims"), context.operand(0).rank());
    int reduced = build(emitter, operands[0], row_length(context, plan));
    // A reduction accumulates in f32 (Note [Kernel spec reductions]); an
    // integer one hands its consumers in the same kernel a value of its own
    // dtype, as its output would be (an integer sum added to another failed
    // to build: "expected numeric operands of the result's dtype").
    // Test: OpsLowering.IntegerReductionsFeedIntegerOpsInOneKernel.
    const DType dtype = context.operand(0).dtype;
    return is_integer(dtype) ? emitter.cast(reduced, dtype) : reduced;
  };
  return def;
}

// softmax and log_softmax over one dimension; the result has x's shape.
OpDef softmax_op(const std::string& name, bool log) {
  OpDef def;
  def.name = name;
  def.summary = log ? "log(softmax(x)) along `dim`, computed stably" : "softmax along `dim`";
  def.min_operands = def.max_operands = 1;
  def.attrs = {{"dim", AttrKind::kInt, int64_t{-1}}};
  def.kind = OpKind::kReduction;
  def.infer = [](const OpContext& context) {
    require_floating(context, 0);
    require_rank_at_least(context, 0, 1);
    normalize_dim(context, context.attrs.get_int("dim"), context.operand(0).rank(), "dim");
    return std::vector<TensorType>{context.operand(0)};
  };
  def.reduction_plan = [](const OpContext& context) {
    ReductionPlan plan;
    plan.reduced_dims = {
        normalize_dim(context, context.attrs.get_int("dim"), context.operand(0).rank(), "dim")};
    plan.per_row_result = false;
    plan.operand_layouts = {RowLayout::kFull};
    return plan;
  };
  def.reduction_expr = [log](codegen::KernelBuilder& emitter, const std::vector<int>& operands,
                             const OpContext&) {
    int x = operands[0];
    int row_max = emitter.reduce_value(ReduceOp::kMax, x);
    int shifted = emitter.binary(ExprOp::kSub, x, row_max);
    int exps = emitter.unary(ExprOp::kExp, shifted);
    int total = emitter.reduce_value(ReduceOp::kSum, exps);
    if (log) return emitter.binary(ExprOp::kSub, shifted, emitter.unary(ExprOp::kLog, total));
    return emitter.binary(ExprOp::kDiv, exps, total);
  };
  return def;
}

// layer_norm's row statistics over the last dim of `x` (of type `type`), in
// the order both layer_norm and layer_norm_backward emit them.
struct RowNormalization {
  int count = 0;       // the row length, as a constant
  int rstd = 0;        // 1 / sqrt(var + eps)
  int normalized = 0;  // (x - mean) * rstd
};

RowNormalization emit_row_normalization(codegen::KernelBuilder& emitter, int x,
                                        const TensorType& type, double eps) {
  RowNormalization row;
  row.count = emitter.constant(static_cast<double>(type.shape.back()));
  int mean = emitter.binary(ExprOp::kDiv, emitter.reduce_value(ReduceOp::kSum, x), row.count);
  int centered = emitter.binary(ExprOp::kSub, x, mean);
  int variance = emitter.binary(
      ExprOp::kDiv,
      emitter.reduce_value(ReduceOp::kSum, emitter.binary(ExprOp::kMul, centered, centered)),
      row.count);
  row.rstd =
      emitter.unary(ExprOp::kRsqrt, emitter.binary(ExprOp::kAdd, variance, emitter.constant(eps)));
  row.normalized = emitter.binary(ExprOp::kMul, centered, row.rstd);
  return row;
}

}  // namespace

void register_reduction_ops(OpRegistry& registry) {
  registry.add(reduce_op("sum", "sum over `dims` (empty: all)", false,
                         [](codegen::KernelBuilder& emitter, int x, double) {
                           return emitter.reduce_value(ReduceOp::kSum, x);
                         }));
  registry.add(reduce_op("mean", "mean over `dims` (empty: all)", true,
                         [](codegen::KernelBuilder& emitter, int x, double length) {
                           return emitter.binary(ExprOp::kDiv,
                                                 emitter.reduce_value(ReduceOp::kSum, x),
                                                 emitter.constant(length));
                         }));
  registry.add(reduce_op("max", "max over `dims` (empty: all)", false,
                         [](codegen::KernelBuilder& emitter, int x, double) {
                           return emitter.reduce_value(ReduceOp::kMax, x);
                         }));
  registry.add(softmax_op("softmax", false));
  registry.add(softmax_op("log_softmax", true));

  OpDef layer_norm;
  layer_norm.name = "layer_norm";
  layer_norm.summary = "(x - mean) / sqrt(var + eps) * weight + bias over the last dim";
  layer_norm.min_operands = layer_norm.max_operands = 3;
  layer_norm.attrs = {{"eps", AttrKind::kFloat, 1e-5}};
  layer_norm.kind = OpKind::kReduction;
  layer_norm.infer = [](const OpContext& context) {
    require_floating(context, 0);
    require_rank_at_least(context, 0, 1);
    int64_t features = context.operand(0).shape.back();
    for (size_t i : {size_t{1}, size_t{2}}) {
      require_same_dtype(context, 0, i);
      GROVE_CHECK_AS(ShapeError, context.operand(i).shape == Shape{features}, context.where(), ": ",
                     context.describe_operand(i), " must have shape [", features,
                     "] (the last dimension of ", context.describe_operand(0), ")");
    }
    GROVE_CHECK_AS(ShapeError, features > 0, context.where(), ": cannot normalize an empty row");
    GROVE_CHECK(context.attrs.get_float("eps") > 0, context.where(),
                ": attribute 'eps' must be > 0");
    return std::vector<TensorType>{context.operand(0)};
  };
  layer_norm.reduction_plan = [](const OpContext& context) {
    ReductionPlan plan;
    plan.reduced_dims = {context.operand(0).rank() - 1};
    plan.per_row_result = false;
    plan.operand_layouts = {RowLayout::kFull, RowLayout::kPerColumn, RowLayout::kPerColumn};
    return plan;
  };
  layer_norm.reduction_expr = [](codegen::KernelBuilder& emitter, const std::vector<int>& operands,
                                 const OpContext& context) {
    RowNormalization row = emit_row_normalization(emitter, operands[0], context.operand(0),
                                                  context.attrs.get_float("eps"));
    return emitter.binary(ExprOp::kAdd, emitter.binary(ExprOp::kMul, row.normalized, operands[1]),
                          operands[2]);
  };
  registry.add(std::move(layer_norm));

  // Note [Layer-norm input gradient]: layer_norm's dx as one row kernel. The
  // gradient built from primitives (mean, sub, rsqrt, two means of products)
  // lowers to about seven kernels per layer norm; this op recomputes the row
  // statistics from x and does the two gradient reductions in one pass:
  //   xhat = (x - mean) rstd,  gw = g weight,
  //   dx = rstd (gw - mean(gw) - xhat mean(gw xhat)).
  OpDef layer_norm_backward;
  layer_norm_backward.name = "layer_norm_backward";
  layer_norm_backward.summary =
      "layer_norm's input gradient from (grad, x, weight) over the last dim";
  layer_norm_backward.min_operands = layer_norm_backward.max_operands = 3;
  layer_norm_backward.attrs = {{"eps", AttrKind::kFloat, 1e-5}};
  layer_norm_backward.kind = OpKind::kReduction;
  layer_norm_backward.infer = [](const OpContext& context) {
    require_floating(context, 0);
    require_rank_at_least(context, 1, 1);
    require_same_dtype(context, 0, 1);
    require_same_dtype(context, 0, 2);
    GROVE_CHECK_AS(ShapeError, context.operand(0).shape == context.operand(1).shape,
                   context.where(), ": ", context.describe_operand(0), " must have the shape of ",
                   context.describe_operand(1));
    int64_t features = context.operand(1).shape.back();
    GROVE_CHECK_AS(ShapeError, context.operand(2).shape == Shape{features}, context.where(), ": ",
                   context.describe_operand(2), " must have shape [", features, "]");
    GROVE_CHECK_AS(ShapeError, features > 0, context.where(), ": cannot normalize an empty row");
    GROVE_CHECK(context.attrs.get_float("eps") > 0, context.where(),
                ": attribute 'eps' must be > 0");
    return std::vector<TensorType>{context.operand(1)};
  };
  layer_norm_backward.reduction_plan = [](const OpContext& context) {
    ReductionPlan plan;
    plan.reduced_dims = {context.operand(1).rank() - 1};
    plan.per_row_result = false;
    plan.operand_layouts = {RowLayout::kFull, RowLayout::kFull, RowLayout::kPerColumn};
    return plan;
  };
  layer_norm_backward.reduction_expr = [](codegen::KernelBuilder& emitter,
                                          const std::vector<int>& operands,
                                          const OpContext& context) {
    int g = operands[0];
    RowNormalization row = emit_row_normalization(emitter, operands[1], context.operand(1),
                                                  context.attrs.get_float("eps"));
    const int count = row.count, rstd = row.rstd, normalized = row.normalized;
    int gw = emitter.binary(ExprOp::kMul, g, operands[2]);
    int mean_gw = emitter.binary(ExprOp::kDiv, emitter.reduce_value(ReduceOp::kSum, gw), count);
    int mean_gw_xhat = emitter.binary(
        ExprOp::kDiv,
        emitter.reduce_value(ReduceOp::kSum, emitter.binary(ExprOp::kMul, gw, normalized)), count);
    int inner = emitter.binary(ExprOp::kSub, emitter.binary(ExprOp::kSub, gw, mean_gw),
                               emitter.binary(ExprOp::kMul, normalized, mean_gw_xhat));
    return emitter.binary(ExprOp::kMul, rstd, inner);
  };
  registry.add(std::move(layer_norm_backward));

  OpDef cross_entropy;
  cross_entropy.name = "cross_entropy";
  cross_entropy.summary =
      "mean over rows of logsumexp(logits) - logits[label]; logits [..., C], labels [...]";
  cross_entropy.min_operands = cross_entropy.max_operands = 2;
  cross_entropy.kind = OpKind::kReduction;
  cross_entropy.infer = [](const OpContext& context) {
    require_floating(context, 0);
    require_integer(context, 1);
    require_rank_at_least(context, 0, 1);
    Shape rows = context.operand(0).shape;
    rows.pop_back();
    GROVE_CHECK_AS(ShapeError, context.operand(1).shape == rows, context.where(), ": ",
                   context.describe_operand(1), " must have shape ", ir::shape_text(rows),
                   " (one label per row of ", context.describe_operand(0), ")");
    GROVE_CHECK_AS(ShapeError, context.operand(0).numel() > 0, context.where(),
                   ": cross_entropy of an empty batch is undefined");
    return std::vector<TensorType>{with_shape(context.operand(0), {})};
  };
  cross_entropy.reduction_plan = [](const OpContext& context) {
    ReductionPlan plan;
    plan.reduced_dims = {context.operand(0).rank() - 1};
    plan.mean_over_rows = true;
    plan.operand_layouts = {RowLayout::kFull, RowLayout::kPerRow};
    return plan;
  };
  cross_entropy.reduction_expr = [](codegen::KernelBuilder& emitter,
                                    const std::vector<int>& operands, const OpContext&) {
    int logits = operands[0];
    int row_max = emitter.reduce_value(ReduceOp::kMax, logits);
    int total = emitter.reduce_value(
        ReduceOp::kSum, emitter.unary(ExprOp::kExp, emitter.binary(ExprOp::kSub, logits, row_max)));
    int is_label = emitter.binary(ExprOp::kEq, innermost_index(emitter),
                                  emitter.cast(operands[1], DType::kI64));
    int picked =
        emitter.reduce_value(ReduceOp::kSum, emitter.where(is_label, logits, emitter.constant(0)));
    int log_sum_exp = emitter.binary(ExprOp::kAdd, emitter.unary(ExprOp::kLog, total), row_max);
    return emitter.binary(ExprOp::kSub, log_sum_exp, picked);  // per row; then the mean
  };
  registry.add(std::move(cross_entropy));

  OpDef mse;
  mse.name = "mse_loss";
  mse.summary = "mean((prediction - target)^2) over every element";
  mse.min_operands = mse.max_operands = 2;
  mse.kind = OpKind::kReduction;
  mse.infer = [](const OpContext& context) {
    require_floating(context, 0);
    require_same_dtype(context, 0, 1);
    require_same_shape(context, 0, 1);
    GROVE_CHECK_AS(ShapeError, context.operand(0).numel() > 0, context.where(),
                   ": mse_loss of an empty tensor is undefined");
    return std::vector<TensorType>{with_shape(context.operand(0), {})};
  };
  mse.reduction_plan = [](const OpContext& context) {
    ReductionPlan plan;
    for (int64_t d = 0; d < context.operand(0).rank(); ++d) plan.reduced_dims.push_back(d);
    plan.operand_layouts = {RowLayout::kFull, RowLayout::kFull};
    return plan;
  };
  mse.reduction_expr = [](codegen::KernelBuilder& emitter, const std::vector<int>& operands,
                          const OpContext& context) {
    int diff = emitter.binary(ExprOp::kSub, operands[0], operands[1]);
    int total = emitter.reduce_value(ReduceOp::kSum, emitter.binary(ExprOp::kMul, diff, diff));
    return emitter.binary(ExprOp::kDiv, total,
                          emitter.constant(static_cast<double>(context.operand(0).numel())));
  };
  registry.add(std::move(mse));
}

}  // namespace grove::compiler::ops
