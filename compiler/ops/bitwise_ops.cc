// Bitwise ops on bool and integer tensors: and, or, xor and not (on bool they
// are the logical ops). Operands of one dtype, broadcasting.
#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"

namespace grove::compiler::ops {

namespace {

using codegen::ExprOp;

void require_bool_or_integer(const OpContext& context, size_t operand) {
  DType dtype = context.operand(operand).dtype;
  GROVE_CHECK_AS(DTypeError, dtype == DType::kBool || is_integer(dtype), context.where(), ": ",
                 context.describe_operand(operand),
                 " must be bool or an integer (compare floats first)");
}

OpDef bitwise_binary(const std::string& name, const std::string& summary, ExprOp expr_op) {
  OpDef def = binary_op(name, summary, DTypeRule::kAny, expr_op, false);
  InferFn infer = def.infer;
  def.infer = [infer](const OpContext& context) {
    require_bool_or_integer(context, 0);
    return infer(context);
  };
  return def;
}

}  // namespace

void register_bitwise_ops(OpRegistry& registry) {
  registry.add(bitwise_binary("bitwise_and", "a & b (bool or integers)", ExprOp::kAnd));
  registry.add(bitwise_binary("bitwise_or", "a | b (bool or integers)", ExprOp::kOr));
  registry.add(bitwise_binary("bitwise_xor", "a ^ b (bool or integers)", ExprOp::kXor));
  OpDef bitwise_not =
      unary_op("bitwise_not", "~a (bool: logical not)", DTypeRule::kAny,
               [](codegen::KernelBuilder& e, int x) { return e.unary(ExprOp::kNot, x); });
  InferFn infer = bitwise_not.infer;
  bitwise_not.infer = [infer](const OpContext& context) {
    require_bool_or_integer(context, 0);
    return infer(context);
  };
  registry.add(std::move(bitwise_not));
}

}  // namespace grove::compiler::ops
