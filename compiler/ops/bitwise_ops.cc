// Bitwise ops on bool and integer tensors: and, or, xor and not (on bool they
// are the logical ops); and integer division: floor_divide and remainder
// (Python's: the remainder has the divisor's sign), truncate_divide and fmod
// (C's: the dividend's sign). Operands of one dtype, broadcasting. A zero
// divisor divides by 1 (a kernel cannot raise; PyTorch raises).
#include <utility>

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

OpDef integer_binary(const std::string& name, const std::string& summary,
                     std::function<int(codegen::KernelBuilder&, int, int)> build) {
  OpDef def = binary_op(name, summary, DTypeRule::kAny, ExprOp::kIntDiv, false);
  InferFn infer = def.infer;
  def.infer = [infer](const OpContext& context) {
    require_integer(context, 0);
    return infer(context);
  };
  def.elementwise_expr = [build](codegen::KernelBuilder& emitter, const std::vector<int>& operands,
                                 const OpContext&) {
    return std::vector<int>{build(emitter, operands[0], operands[1])};
  };
  return def;
}

// {quotient, remainder} of a / b, truncated or floored (Python's).
std::pair<int, int> divide(codegen::KernelBuilder& e, int a, int b, bool floor) {
  DType dtype = e.dtype_of(a);
  int zero = e.constant(0, dtype);
  int divisor = e.where(e.binary(ExprOp::kEq, b, zero), e.constant(1, dtype), b);
  int quotient = e.binary(ExprOp::kIntDiv, a, divisor);
  int remainder = e.binary(ExprOp::kSub, a, e.binary(ExprOp::kMul, quotient, divisor));
  if (!floor) return {quotient, remainder};
  // A nonzero remainder whose sign differs from the divisor's moves one down.
  int adjust = e.binary(ExprOp::kAnd, e.binary(ExprOp::kNe, remainder, zero),
                        e.binary(ExprOp::kNe, e.binary(ExprOp::kLt, remainder, zero),
                                 e.binary(ExprOp::kLt, divisor, zero)));
  return {e.where(adjust, e.binary(ExprOp::kSub, quotient, e.constant(1, dtype)), quotient),
          e.where(adjust, e.binary(ExprOp::kAdd, remainder, divisor), remainder)};
}

}  // namespace

void register_bitwise_ops(OpRegistry& registry) {
  registry.add(integer_binary(
      "floor_divide", "floor(a / b) of integers",
      [](codegen::KernelBuilder& e, int a, int b) { return divide(e, a, b, true).first; }));
  registry.add(integer_binary(
      "remainder", "a - floor(a / b) b of integers (divisor's sign)",
      [](codegen::KernelBuilder& e, int a, int b) { return divide(e, a, b, true).second; }));
  registry.add(integer_binary(
      "truncate_divide", "a / b of integers, rounded toward zero",
      [](codegen::KernelBuilder& e, int a, int b) { return divide(e, a, b, false).first; }));
  registry.add(integer_binary(
      "fmod", "a - trunc(a / b) b of integers (dividend's sign)",
      [](codegen::KernelBuilder& e, int a, int b) { return divide(e, a, b, false).second; }));
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
