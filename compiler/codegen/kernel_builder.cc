#include "compiler/codegen/kernel_builder.h"

#include "runtime/error.h"

namespace grove::compiler::codegen {

using runtime::DType;

KernelBuilder::KernelBuilder(std::string name, runtime::Shape iteration_shape) {
  spec_->name = std::move(name);
  spec_->iteration_shape = std::move(iteration_shape);
}

int KernelBuilder::add(Expr expr) {
  for (int operand : expr.operands) {
    GROVE_CHECK(operand >= 0 && operand < static_cast<int>(spec_->exprs.size()), "KernelBuilder '",
                spec_->name, "': operand ", operand, " is not an expr built so far (",
                spec_->exprs.size(), " exprs)");
  }
  spec_->exprs.push_back(std::move(expr));
  return static_cast<int>(spec_->exprs.size()) - 1;
}

int KernelBuilder::input(DType dtype, runtime::Shape strides) {
  spec_->inputs.push_back(BufferSpec{dtype, std::move(strides)});
  return static_cast<int>(spec_->inputs.size()) - 1;
}

int KernelBuilder::load(int input, DType as) {
  Expr expr;
  expr.op = ExprOp::kLoad;
  expr.dtype = as;
  expr.input = input;
  return add(expr);
}

int KernelBuilder::constant(double value, DType dtype) {
  Expr expr;
  expr.op = ExprOp::kConstant;
  expr.dtype = dtype;
  expr.constant = value;
  return add(expr);
}

int KernelBuilder::scalar() {
  Expr expr;
  expr.op = ExprOp::kScalarParam;
  expr.input = spec_->scalar_count++;
  return add(expr);
}

int KernelBuilder::index(int dimension) {
  Expr expr;
  expr.op = ExprOp::kIndex;
  expr.dtype = DType::kI64;
  expr.input = dimension;
  return add(expr);
}

int KernelBuilder::load_at(int input, int offset, DType as) {
  Expr expr;
  expr.op = ExprOp::kLoadAt;
  expr.dtype = as;
  expr.input = input;
  expr.operands = {offset};
  return add(expr);
}

int KernelBuilder::philox(int seed, int counter) {
  Expr expr;
  expr.op = ExprOp::kPhilox;
  expr.dtype = DType::kF32;
  expr.operands = {seed, counter};
  return add(expr);
}

int KernelBuilder::reduced(int reduction) {
  Expr expr;
  expr.op = ExprOp::kReduced;
  expr.dtype = DType::kF32;
  expr.reduction = reduction;
  return add(expr);
}

int KernelBuilder::unary(ExprOp op, int operand) {
  Expr expr;
  expr.op = op;
  expr.operands = {operand};
  const bool keeps_dtype =
      op == ExprOp::kNeg || op == ExprOp::kAbs || op == ExprOp::kRelu || op == ExprOp::kNot;
  expr.dtype = keeps_dtype && operand >= 0 && operand < static_cast<int>(spec_->exprs.size())
                   ? spec_->exprs[operand].dtype
                   : DType::kF32;
  return add(expr);
}

int KernelBuilder::binary(ExprOp op, int lhs, int rhs) {
  Expr expr;
  expr.op = op;
  expr.operands = {lhs, rhs};
  switch (op) {
    case ExprOp::kLt:
    case ExprOp::kLe:
    case ExprOp::kGt:
    case ExprOp::kGe:
    case ExprOp::kEq:
    case ExprOp::kNe:
      expr.dtype = DType::kBool;
      break;
    case ExprOp::kDiv:
    case ExprOp::kPow:
      expr.dtype = DType::kF32;
      break;
    default:
      expr.dtype = lhs >= 0 && lhs < static_cast<int>(spec_->exprs.size()) ? spec_->exprs[lhs].dtype
                                                                           : DType::kF32;
  }
  return add(expr);
}

int KernelBuilder::where(int condition, int if_true, int if_false) {
  Expr expr;
  expr.op = ExprOp::kWhere;
  expr.operands = {condition, if_true, if_false};
  expr.dtype = if_true >= 0 && if_true < static_cast<int>(spec_->exprs.size())
                   ? spec_->exprs[if_true].dtype
                   : DType::kF32;
  return add(expr);
}

int KernelBuilder::cast(int operand, DType dtype) {
  if (operand >= 0 && operand < static_cast<int>(spec_->exprs.size()) &&
      spec_->exprs[operand].dtype == dtype) {
    return operand;
  }
  Expr expr;
  expr.op = ExprOp::kCast;
  expr.dtype = dtype;
  expr.operands = {operand};
  return add(expr);
}

int KernelBuilder::reduce(ReduceOp op, int expr) {
  GROVE_CHECK(expr >= 0 && expr < static_cast<int>(spec_->exprs.size()), "KernelBuilder '",
              spec_->name, "': reduce of expr ", expr, ", which is not an expr built so far");
  // Reductions accumulate in f32 (Note [Kernel spec types]).
  spec_->reductions.push_back(Reduction{op, cast(expr, DType::kF32)});
  return static_cast<int>(spec_->reductions.size()) - 1;
}

void KernelBuilder::output(int expr, DType dtype, runtime::Shape strides, bool per_row) {
  OutputSpec output;
  output.dtype = dtype;
  output.expr = expr;
  output.per_row = per_row;
  output.strides = std::move(strides);
  spec_->outputs.push_back(std::move(output));
}

KernelSpec KernelBuilder::build() const {
  spec_->verify();
  return *spec_;
}

}  // namespace grove::compiler::codegen
