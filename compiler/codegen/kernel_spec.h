// KernelSpec is the device-independent description of one generated kernel:
// an iteration space, input buffers read with per-dimension strides (0 for a
// broadcast dimension), an expression DAG evaluated per element, optional
// reductions over the innermost iteration dimension, and outputs. Codegen
// lowers the same spec to PTX (cuda) and to a host function (sim, cpu).
//
// Note [Kernel spec reductions]: when `reductions` is non-empty the last
// dimension of `iteration_shape` is reduced. Reductions are evaluated in order
// over each row; the expression of a later reduction (and any output) may read
// the result of an earlier one through kReduced. Outputs with per_row = true
// are written once per row (their shape is iteration_shape without its last
// dimension); other outputs are written per element after the reductions (the
// epilogue), which is how softmax and layer_norm become one kernel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace grove::compiler::codegen {

enum class ExprOp : uint8_t {
  // leaves
  kLoad,         // inputs[input] at the current index, converted to f32 (or kept integral)
  kConstant,     // `constant`
  kScalarParam,  // scalars[input]: an f32 kernel argument (e.g. a learning rate)
  kReduced,      // the result of reductions[reduction] for the current row
  kIndex,        // the current index along dimension `input` of the iteration space (i64)
  // unary
  kNeg, kExp, kLog, kTanh, kSigmoid, kRelu, kGelu, kSqrt, kRsqrt, kAbs, kNot,
  // binary
  kAdd, kSub, kMul, kDiv, kPow, kMax, kMin,
  kLt, kLe, kGt, kGe, kEq, kNe, kAnd, kOr,
  // ternary
  kWhere,  // operands: condition, if-true, if-false
  // conversion
  kCast,  // to `dtype`
};

struct Expr {
  ExprOp op = ExprOp::kConstant;
  runtime::DType dtype = runtime::DType::kF32;  // the value's type (f32 for float math)
  std::vector<int> operands;                    // indices of earlier exprs
  int input = -1;                               // kLoad, kScalarParam, kIndex
  int reduction = -1;                           // kReduced
  double constant = 0;                          // kConstant
};

struct BufferSpec {
  runtime::DType dtype = runtime::DType::kF32;
  // Element strides over iteration_shape (same rank); 0 broadcasts.
  runtime::Shape strides;
};

enum class ReduceOp : uint8_t { kSum, kMax, kMin };

struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  int expr = -1;  // evaluated per element of the row, then reduced
};

struct OutputSpec {
  runtime::DType dtype = runtime::DType::kF32;
  int expr = -1;
  bool per_row = false;
  // Element strides over the output's iteration space (iteration_shape, or
  // iteration_shape minus its last dimension when per_row).
  runtime::Shape strides;
};

struct KernelSpec {
  std::string name;  // a readable prefix: "fused_add_gelu"
  runtime::Shape iteration_shape;
  std::vector<BufferSpec> inputs;
  int scalar_count = 0;
  std::vector<Expr> exprs;  // topologically ordered: operands precede users
  std::vector<Reduction> reductions;
  std::vector<OutputSpec> outputs;

  // Canonical text of everything that affects the generated code; kernels are
  // cached by it.
  std::string signature() const;
  // Throws grove::Error naming the first malformed part.
  void verify() const;
};

}  // namespace grove::compiler::codegen
