// KernelBuilder assembles a KernelSpec expression by expression, inferring
// each expr's dtype from Note [Kernel spec types] (kernel_spec.h), so that a
// fused kernel reads like the computation it performs:
//
//   KernelBuilder k("fused_add_gelu", {rows, cols});
//   int x = k.load(k.input(DType::kBF16, {cols, 1}));
//   int b = k.load(k.input(DType::kF32, {0, 1}));        // bias broadcast over rows
//   k.output(k.unary(ExprOp::kGelu, k.binary(ExprOp::kAdd, x, b)), DType::kBF16, {cols, 1});
//   KernelSpec spec = k.build();
#pragma once

#include <string>
#include <utility>

#include "compiler/codegen/kernel_spec.h"

namespace grove::compiler::codegen {

class KernelBuilder {
 public:
  // Builds a new spec.
  KernelBuilder(std::string name, runtime::Shape iteration_shape);
  // Appends to `target`, which must outlive the builder: the op registry's
  // lowering hooks add an op's expressions to the kernel being assembled.
  explicit KernelBuilder(KernelSpec& target) : spec_(&target) {}
  KernelBuilder(const KernelBuilder&) = delete;
  KernelBuilder& operator=(const KernelBuilder&) = delete;

  // Declares an input buffer; returns its index (for load()).
  int input(runtime::DType dtype, runtime::Shape strides);
  // Leaves; each returns the new expr's index.
  int load(int input, runtime::DType as = runtime::DType::kF32);
  int constant(double value, runtime::DType dtype = runtime::DType::kF32);
  int scalar();  // a new f32 scalar parameter
  int index(int dimension);
  // inputs[input] at the i64 element offset `offset` (Note [Kernel spec gathers and randomness]).
  int load_at(int input, int offset, runtime::DType as = runtime::DType::kF32);
  // A uniform f32 in [0, 1) from Philox(seed, counter), both i64 exprs.
  int philox(int seed, int counter);
  // The f32 value of reduction `reduction` (an index reduce() returned).
  int reduced(int reduction);
  // Float math gives f32; neg/abs/relu keep the operand's dtype; comparisons and
  // and/or/not give bool; add/sub/mul/max/min keep the first operand's dtype.
  int unary(ExprOp op, int operand);
  int binary(ExprOp op, int lhs, int rhs);
  int where(int condition, int if_true, int if_false);
  // `operand` itself when it already has `dtype`.
  int cast(int operand, runtime::DType dtype);
  // Adds a reduction over the last dimension of `expr`, accumulated in f32;
  // returns its index (for reduced()).
  int reduce(ReduceOp op, int expr);
  // reduced(reduce(op, expr)): the reduction's value as an expr.
  int reduce_value(ReduceOp op, int expr) { return reduced(reduce(op, expr)); }
  void output(int expr, runtime::DType dtype, runtime::Shape strides, bool per_row = false);
  // Appends `expr` as it is (its operands must precede it); returns its index.
  int add(Expr expr);

  runtime::DType dtype_of(int expr) const { return spec_->exprs.at(expr).dtype; }
  // The spec, verified (throws grove::Error naming the first malformed part).
  KernelSpec build() const;
  const KernelSpec& spec() const { return *spec_; }
  KernelSpec& spec() { return *spec_; }

 private:
  KernelSpec owned_;
  KernelSpec* spec_ = &owned_;
};

}  // namespace grove::compiler::codegen
