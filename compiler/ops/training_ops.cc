// Dropout and the in-place update ops (copy_into and the optimizer steps).
// Update ops mutate operands and return results aliasing them
// (Note [Mutation in SSA]); their hyper-parameters are f32 scalar operands so
// that a schedule changes no kernel.
#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"

namespace grove::compiler::ops {

namespace {

using codegen::ExprOp;

void require_f32_scalar(const OpContext& context, size_t operand) {
  require_scalar(context, operand);
  require_floating(context, operand);
}

void require_like(const OpContext& context, size_t reference, size_t operand) {
  require_same_dtype(context, reference, operand);
  require_same_shape(context, reference, operand);
}

}  // namespace

void register_training_ops(OpRegistry& registry) {
  OpDef dropout;
  dropout.name = "dropout";
  dropout.summary = "x * keep / (1 - p), keep drawn by Philox from i64 scalars seed, offset";
  dropout.min_operands = dropout.max_operands = 3;
  dropout.attrs = {{"p", AttrKind::kFloat, 0.1}};
  dropout.kind = OpKind::kRandom;
  dropout.infer = [](const OpContext& context) {
    require_floating(context, 0);
    for (size_t i : {size_t{1}, size_t{2}}) {
      require_scalar(context, i);
      GROVE_CHECK_AS(DTypeError, context.operand(i).dtype == DType::kI64, context.where(), ": ",
                     context.describe_operand(i), " must be an i64 scalar (",
                     i == 1 ? "seed" : "offset", ")");
    }
    double p = context.attrs.get_float("p");
    GROVE_CHECK(p >= 0 && p < 1, context.where(), ": attribute 'p' = ", p, " must be in [0, 1)");
    return std::vector<TensorType>{context.operand(0)};
  };
  registry.add(std::move(dropout));

  OpDef copy_into;
  copy_into.name = "copy_into";
  copy_into.summary = "destination <- source (broadcast to destination's shape), in place";
  copy_into.min_operands = copy_into.max_operands = 2;
  copy_into.kind = OpKind::kCopyUpdate;
  copy_into.effects.mutated_operands = {0};
  copy_into.effects.result_aliases = {0};
  copy_into.infer = [](const OpContext& context) {
    require_same_dtype(context, 0, 1);
    GROVE_CHECK_AS(ShapeError, broadcasts_to(context.operand(1).shape, context.operand(0).shape),
                   context.where(), ": ", context.describe_operand(1),
                   " does not broadcast to the destination ", context.describe_operand(0));
    return std::vector<TensorType>{context.operand(0)};
  };
  copy_into.elementwise_expr = [](codegen::KernelBuilder&, const std::vector<int>& operands,
                                  const OpContext&) { return std::vector<int>{operands[1]}; };
  registry.add(std::move(copy_into));

  // PyTorch's SGD with momentum (dampening 0, not Nesterov):
  //   g = grad + weight_decay * param;  buf = momentum * buf + g;  param -= lr * buf.
  OpDef sgd;
  sgd.name = "sgd_momentum_update";
  sgd.summary = "SGD with momentum; operands param, grad, buf, lr, momentum, weight_decay";
  sgd.min_operands = sgd.max_operands = 6;
  sgd.kind = OpKind::kCopyUpdate;
  sgd.effects.mutated_operands = {0, 2};
  sgd.effects.result_aliases = {0, 2};
  sgd.infer = [](const OpContext& context) {
    require_floating(context, 0);
    require_like(context, 0, 1);
    require_like(context, 0, 2);
    for (size_t i = 3; i < 6; ++i) require_f32_scalar(context, i);
    return std::vector<TensorType>{context.operand(0), context.operand(2)};
  };
  sgd.elementwise_expr = [](codegen::KernelBuilder& e, const std::vector<int>& in,
                            const OpContext&) {
    int param = in[0], grad = in[1], buf = in[2], lr = in[3], momentum = in[4], decay = in[5];
    int g = e.binary(ExprOp::kAdd, grad, e.binary(ExprOp::kMul, decay, param));
    int new_buf = e.binary(ExprOp::kAdd, e.binary(ExprOp::kMul, momentum, buf), g);
    int new_param = e.binary(ExprOp::kSub, param, e.binary(ExprOp::kMul, lr, new_buf));
    return std::vector<int>{new_param, new_buf};
  };
  registry.add(std::move(sgd));

  // AdamW (Loshchilov & Hutter), as PyTorch computes it, with `step` the
  // 1-based step count:
  //   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
  //   param -= lr * (wd * param + (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps))
  OpDef adamw;
  adamw.name = "adamw_update";
  adamw.summary =
      "AdamW; operands param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay, step";
  adamw.min_operands = adamw.max_operands = 10;
  adamw.kind = OpKind::kCopyUpdate;
  adamw.effects.mutated_operands = {0, 2, 3};
  adamw.effects.result_aliases = {0, 2, 3};
  adamw.infer = [](const OpContext& context) {
    require_floating(context, 0);
    require_like(context, 0, 1);
    require_like(context, 0, 2);
    require_like(context, 0, 3);
    for (size_t i = 4; i < 10; ++i) require_f32_scalar(context, i);
    return std::vector<TensorType>{context.operand(0), context.operand(2), context.operand(3)};
  };
  adamw.elementwise_expr = [](codegen::KernelBuilder& e, const std::vector<int>& in,
                              const OpContext&) {
    int param = in[0], grad = in[1], m = in[2], v = in[3], lr = in[4], beta1 = in[5];
    int beta2 = in[6], eps = in[7], decay = in[8], step = in[9];
    int one = e.constant(1.0);
    int new_m = e.binary(ExprOp::kAdd, e.binary(ExprOp::kMul, beta1, m),
                         e.binary(ExprOp::kMul, e.binary(ExprOp::kSub, one, beta1), grad));
    int new_v = e.binary(ExprOp::kAdd, e.binary(ExprOp::kMul, beta2, v),
                         e.binary(ExprOp::kMul, e.binary(ExprOp::kSub, one, beta2),
                                  e.binary(ExprOp::kMul, grad, grad)));
    int m_hat = e.binary(ExprOp::kDiv, new_m,
                         e.binary(ExprOp::kSub, one, e.binary(ExprOp::kPow, beta1, step)));
    int v_hat = e.binary(ExprOp::kDiv, new_v,
                         e.binary(ExprOp::kSub, one, e.binary(ExprOp::kPow, beta2, step)));
    int adam =
        e.binary(ExprOp::kDiv, m_hat, e.binary(ExprOp::kAdd, e.unary(ExprOp::kSqrt, v_hat), eps));
    int update = e.binary(ExprOp::kAdd, e.binary(ExprOp::kMul, decay, param), adam);
    int new_param = e.binary(ExprOp::kSub, param, e.binary(ExprOp::kMul, lr, update));
    return std::vector<int>{new_param, new_m, new_v};
  };
  registry.add(std::move(adamw));
}

}  // namespace grove::compiler::ops
