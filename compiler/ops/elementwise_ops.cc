// Elementwise ops: arithmetic, math, comparisons, where, cast and full.
// Binary ops broadcast (numpy rules) and need operands of one dtype.
#include <cmath>
#include <cstdlib>
#include <string>

#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"

namespace grove::compiler::ops {

namespace {

using codegen::ExprOp;

// gelu, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
int emit_gelu(codegen::KernelBuilder& emitter, int x) {
  DType dtype = emitter.dtype_of(x);
  int x_cubed = emitter.binary(ExprOp::kMul, emitter.binary(ExprOp::kMul, x, x), x);
  int inner = emitter.binary(
      ExprOp::kAdd, x, emitter.binary(ExprOp::kMul, emitter.constant(0.044715, dtype), x_cubed));
  int scaled = emitter.binary(ExprOp::kMul, emitter.constant(std::sqrt(2.0 / M_PI), dtype), inner);
  int one_plus = emitter.binary(ExprOp::kAdd, emitter.constant(1.0, dtype),
                                emitter.unary(ExprOp::kTanh, scaled));
  return emitter.binary(ExprOp::kMul, emitter.binary(ExprOp::kMul, emitter.constant(0.5, dtype), x),
                        one_plus);
}

// erf(x) by Abramowitz and Stegun 7.1.26, |error| < 1.5e-7 (below f32's step
// at 1): erf(|x|) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-x^2),
// t = 1 / (1 + p |x|), and erf is odd. Built from exprs every device has, so
// no libm call reaches the kernels; PyTorch's exact gelu is 0.5 x (1 + erf(x / sqrt 2)).
int emit_erf(codegen::KernelBuilder& emitter, int x) {
  DType dtype = emitter.dtype_of(x);
  // Note [Erf as one expression] (compiler/codegen/kernel_math.h).
  if (dtype == DType::kF32 && fast_erf_enabled()) return emitter.unary(ExprOp::kErf, x);
  auto constant = [&](double value) { return emitter.constant(value, dtype); };
  auto mul = [&](int a, int b) { return emitter.binary(ExprOp::kMul, a, b); };
  auto add = [&](int a, int b) { return emitter.binary(ExprOp::kAdd, a, b); };
  int magnitude = emitter.unary(ExprOp::kAbs, x);
  int t = emitter.binary(ExprOp::kDiv, constant(1.0),
                         add(constant(1.0), mul(constant(0.3275911), magnitude)));
  int poly = constant(1.061405429);
  for (double coefficient : {-1.453152027, 1.421413741, -0.284496736, 0.254829592}) {
    poly = add(constant(coefficient), mul(t, poly));
  }
  int decay = emitter.unary(ExprOp::kExp, emitter.unary(ExprOp::kNeg, mul(x, x)));
  int positive = emitter.binary(ExprOp::kSub, constant(1.0), mul(mul(t, poly), decay));
  int is_negative = emitter.binary(ExprOp::kLt, x, constant(0.0));
  return emitter.where(is_negative, emitter.unary(ExprOp::kNeg, positive), positive);
}

}  // namespace

bool fast_erf_enabled() {
  const char* value = std::getenv("GROVE_FAST_ERF");
  return value == nullptr || std::string(value) != "0";
}

namespace {

DType dtype_attr(const OpContext& context, const std::string& attr) {
  const std::string& name = context.attrs.get_string(attr);
  try {
    return runtime::parse_dtype(name);
  } catch (const DTypeError& error) {
    throw DTypeError(str_cat(context.where(), ": attribute '", attr, "': ", error.what()));
  }
}

}  // namespace

void register_elementwise_ops(OpRegistry& registry) {
  registry.add(binary_op("add", "a + b", DTypeRule::kNumeric, ExprOp::kAdd, false));
  registry.add(binary_op("sub", "a - b", DTypeRule::kNumeric, ExprOp::kSub, false));
  registry.add(binary_op("mul", "a * b", DTypeRule::kNumeric, ExprOp::kMul, false));
  registry.add(binary_op("div", "a / b (floating)", DTypeRule::kFloating, ExprOp::kDiv, false));
  registry.add(binary_op("pow", "a ** b (floating)", DTypeRule::kFloating, ExprOp::kPow, false));
  registry.add(binary_op("lt", "a < b -> bool", DTypeRule::kAny, ExprOp::kLt, true));
  registry.add(binary_op("le", "a <= b -> bool", DTypeRule::kAny, ExprOp::kLe, true));
  registry.add(binary_op("gt", "a > b -> bool", DTypeRule::kAny, ExprOp::kGt, true));
  registry.add(binary_op("ge", "a >= b -> bool", DTypeRule::kAny, ExprOp::kGe, true));
  registry.add(binary_op("eq", "a == b -> bool", DTypeRule::kAny, ExprOp::kEq, true));
  registry.add(binary_op("ne", "a != b -> bool", DTypeRule::kAny, ExprOp::kNe, true));

  auto simple = [](ExprOp op) {
    return [op](codegen::KernelBuilder& emitter, int x) { return emitter.unary(op, x); };
  };
  registry.add(unary_op("neg", "-x", DTypeRule::kNumeric, simple(ExprOp::kNeg)));
  registry.add(unary_op("exp", "e^x", DTypeRule::kFloating, simple(ExprOp::kExp)));
  registry.add(unary_op("log", "natural log", DTypeRule::kFloating, simple(ExprOp::kLog)));
  registry.add(unary_op("tanh", "tanh(x)", DTypeRule::kFloating, simple(ExprOp::kTanh)));
  registry.add(
      unary_op("sigmoid", "1 / (1 + e^-x)", DTypeRule::kFloating, simple(ExprOp::kSigmoid)));
  registry.add(unary_op("sqrt", "square root", DTypeRule::kFloating, simple(ExprOp::kSqrt)));
  registry.add(unary_op("rsqrt", "1 / sqrt(x)", DTypeRule::kFloating, simple(ExprOp::kRsqrt)));
  registry.add(unary_op(
      "relu", "max(x, 0)", DTypeRule::kNumeric, [](codegen::KernelBuilder& emitter, int x) {
        return emitter.binary(ExprOp::kMax, x, emitter.constant(0, emitter.dtype_of(x)));
      }));
  registry.add(unary_op("gelu", "gelu, tanh approximation", DTypeRule::kFloating, emit_gelu));
  registry.add(
      unary_op("erf", "error function (|error| < 1.5e-7)", DTypeRule::kFloating, emit_erf));
  // gelu's gradient as one op, so that the lowering can give it to a GEMM's
  // epilogue (cuBLASLt's DGELU) instead of a kernel.
  OpDef gelu_backward = binary_op("gelu_backward", "g * gelu'(x) (gelu's gradient; g, x)",
                                  DTypeRule::kFloating, ExprOp::kMul, false);
  gelu_backward.elementwise_expr = [](codegen::KernelBuilder& emitter,
                                      const std::vector<int>& operands, const OpContext&) {
    return std::vector<int>{emit_gelu_backward(emitter, operands[0], operands[1])};
  };
  registry.add(gelu_backward);

  OpDef where;
  where.name = "where";
  where.summary = "condition ? a : b (condition bool; broadcasting)";
  where.min_operands = where.max_operands = 3;
  where.kind = OpKind::kElementwise;
  where.infer = [](const OpContext& context) {
    GROVE_CHECK_AS(DTypeError, context.operand(0).dtype == DType::kBool, context.where(), ": ",
                   context.describe_operand(0), " is the condition and must be bool");
    require_same_dtype(context, 1, 2);
    return std::vector<TensorType>{
        with_shape(context.operand(1), broadcast_shapes(context, {0, 1, 2}))};
  };
  where.elementwise_expr = [](codegen::KernelBuilder& emitter, const std::vector<int>& operands,
                              const OpContext&) {
    return std::vector<int>{emitter.where(operands[0], operands[1], operands[2])};
  };
  registry.add(std::move(where));

  OpDef cast;
  cast.name = "cast";
  cast.summary = "convert to `dtype` (floats truncate toward zero into integers; bool is x != 0)";
  cast.min_operands = cast.max_operands = 1;
  cast.attrs = {{"dtype", AttrKind::kString, std::nullopt}};
  cast.kind = OpKind::kElementwise;
  cast.accepts_dynamic_shapes = true;
  cast.infer = [](const OpContext& context) {
    return std::vector<TensorType>{with_dtype(context.operand(0), dtype_attr(context, "dtype"))};
  };
  cast.elementwise_expr = [](codegen::KernelBuilder& emitter, const std::vector<int>& operands,
                             const OpContext& context) {
    DType target = runtime::parse_dtype(context.attrs.get_string("dtype"));
    int x = operands[0];
    if (target == DType::kBool) {
      return std::vector<int>{
          emitter.binary(ExprOp::kNe, x, emitter.constant(0, emitter.dtype_of(x)))};
    }
    // A cast to bf16/f16 stays f32 in registers, rounded there as the
    // reference rounds at the cast (Note [Casts to a narrow float round in
    // registers]); a value that already is bf16 (f16) needs no rounding.
    int cast = emitter.cast(x, compute_dtype(target));
    const DType source = context.operand(0).dtype;
    if (target == DType::kBF16 && source != DType::kBF16) {
      return std::vector<int>{emitter.unary(ExprOp::kRoundToBf16, cast)};
    }
    if (target == DType::kF16 && source != DType::kF16) {
      return std::vector<int>{emitter.unary(ExprOp::kRoundToF16, cast)};
    }
    return std::vector<int>{cast};
  };
  registry.add(std::move(cast));

  OpDef full;
  full.name = "full";
  full.summary = "a constant tensor of `shape` filled with `value`";
  full.attrs = {{"value", AttrKind::kFloat, std::nullopt},
                {"shape", AttrKind::kInts, std::vector<int64_t>{}},
                {"dtype", AttrKind::kString, std::string("f32")}};
  full.kind = OpKind::kElementwise;
  full.infer = [](const OpContext& context) {
    const std::vector<int64_t>& shape = context.attrs.get_ints("shape");
    for (int64_t dim : shape) {
      GROVE_CHECK_AS(ShapeError, dim >= 0, context.where(), ": attribute 'shape' ",
                     ir::shape_text(shape), " has a negative dimension");
    }
    return std::vector<TensorType>{TensorType{shape, dtype_attr(context, "dtype"), context.device}};
  };
  full.elementwise_expr = [](codegen::KernelBuilder& emitter, const std::vector<int>&,
                             const OpContext& context) {
    DType dtype = runtime::parse_dtype(context.attrs.get_string("dtype"));
    return std::vector<int>{
        emitter.constant(context.attrs.get_float("value"), compute_dtype(dtype))};
  };
  registry.add(std::move(full));
}

}  // namespace grove::compiler::ops
