#include "compiler/ops/op_helpers.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"

namespace grove::compiler::ops {

Shape broadcast_shapes(const OpContext& context, const std::vector<size_t>& operand_indices) {
  size_t rank = 0;
  for (size_t index : operand_indices) {
    rank = std::max(rank, context.operand(index).shape.size());
  }
  Shape result(rank, 1);
  std::vector<size_t> source(rank, operand_indices.empty() ? 0 : operand_indices[0]);
  for (size_t index : operand_indices) {
    const Shape& shape = context.operand(index).shape;
    size_t pad = rank - shape.size();
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t size = shape[d];
      int64_t& merged = result[pad + d];
      if (size == merged || size == 1) continue;
      if (merged == 1) {
        merged = size;
        source[pad + d] = index;
        continue;
      }
      throw ShapeError(str_cat(context.where(), ": cannot broadcast ",
                               context.describe_operand(source[pad + d]), " with ",
                               context.describe_operand(index), ": dimension ", pad + d,
                               " (aligned from the right) is ", merged, " vs ", size,
                               "; sizes must match or one must be 1"));
    }
  }
  return result;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  size_t pad = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] != 1 && from[d] != to[pad + d]) return false;
  }
  return true;
}

int64_t normalize_dim(const OpContext& context, int64_t dim, int64_t rank,
                      const std::string& attr_name) {
  int64_t normalized = dim < 0 ? dim + rank : dim;
  GROVE_CHECK_AS(ShapeError, normalized >= 0 && normalized < rank, context.where(), ": attribute '",
                 attr_name, "' = ", dim, " is out of range for rank ", rank, " (",
                 context.describe_operand(0), "); use a dimension in [", -rank, ", ", rank, ")");
  return normalized;
}

std::vector<int64_t> normalize_reduce_dims(const OpContext& context,
                                           const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<int64_t> normalized;
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) normalized.push_back(d);
    return normalized;
  }
  for (int64_t dim : dims) normalized.push_back(normalize_dim(context, dim, rank, "dims"));
  std::sort(normalized.begin(), normalized.end());
  GROVE_CHECK_AS(ShapeError,
                 std::adjacent_find(normalized.begin(), normalized.end()) == normalized.end(),
                 context.where(), ": attribute 'dims' lists a dimension twice");
  return normalized;
}

bool is_integer(DType dtype) { return dtype == DType::kI32 || dtype == DType::kI64; }

DType compute_dtype(DType dtype) { return runtime::is_floating(dtype) ? DType::kF32 : dtype; }

void require_floating(const OpContext& context, size_t operand) {
  GROVE_CHECK_AS(DTypeError, runtime::is_floating(context.operand(operand).dtype), context.where(),
                 ": ", context.describe_operand(operand),
                 " must have a floating dtype (f32, bf16, f16); cast it first");
}

void require_integer(const OpContext& context, size_t operand) {
  GROVE_CHECK_AS(DTypeError, is_integer(context.operand(operand).dtype), context.where(), ": ",
                 context.describe_operand(operand), " must hold integer indices (i32 or i64)");
}

void require_same_dtype(const OpContext& context, size_t a, size_t b) {
  GROVE_CHECK_AS(DTypeError, context.operand(a).dtype == context.operand(b).dtype, context.where(),
                 ": ", context.describe_operand(a), " and ", context.describe_operand(b),
                 " must have the same dtype; insert a cast");
}

void require_rank_at_least(const OpContext& context, size_t operand, int64_t rank) {
  GROVE_CHECK_AS(ShapeError, context.operand(operand).rank() >= rank, context.where(), ": ",
                 context.describe_operand(operand), " must have rank >= ", rank);
}

void require_scalar(const OpContext& context, size_t operand) {
  GROVE_CHECK_AS(ShapeError, context.operand(operand).is_scalar(), context.where(), ": ",
                 context.describe_operand(operand), " must be a scalar (shape [])");
}

void require_same_shape(const OpContext& context, size_t a, size_t b) {
  GROVE_CHECK_AS(ShapeError, context.operand(a).shape == context.operand(b).shape, context.where(),
                 ": ", context.describe_operand(a), " and ", context.describe_operand(b),
                 " must have the same shape");
}

TensorType with_shape(const TensorType& type, Shape shape) {
  TensorType result = type;
  result.shape = std::move(shape);
  return result;
}

TensorType with_dtype(const TensorType& type, DType dtype) {
  TensorType result = type;
  result.dtype = dtype;
  return result;
}

// With t = tanh(k (x + a x^3)), gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2).
int emit_gelu_backward(codegen::KernelBuilder& emitter, int g, int x) {
  using codegen::ExprOp;
  const DType dtype = emitter.dtype_of(x);
  auto mul = [&](int a, int b) { return emitter.binary(ExprOp::kMul, a, b); };
  auto add = [&](int a, int b) { return emitter.binary(ExprOp::kAdd, a, b); };
  auto constant = [&](double value) { return emitter.constant(value, dtype); };
  const double k = std::sqrt(2.0 / M_PI);
  const double a = 0.044715;
  int x_squared = mul(x, x);
  int t = emitter.unary(ExprOp::kTanh,
                        mul(constant(k), mul(x, add(constant(1.0), mul(constant(a), x_squared)))));
  int left = mul(constant(0.5), add(constant(1.0), t));
  int sech_squared = emitter.binary(ExprOp::kSub, constant(1.0), mul(t, t));
  int slope = mul(constant(k), add(constant(1.0), mul(constant(3 * a), x_squared)));
  int right = mul(mul(constant(0.5), x), mul(sech_squared, slope));
  return mul(g, add(left, right));
}

void check_dtype_rule(const OpContext& context, size_t operand, DTypeRule rule) {
  DType dtype = context.operand(operand).dtype;
  if (rule == DTypeRule::kFloating) require_floating(context, operand);
  if (rule == DTypeRule::kNumeric) {
    GROVE_CHECK_AS(DTypeError, dtype != DType::kBool, context.where(), ": ",
                   context.describe_operand(operand),
                   " is bool; arithmetic needs a numeric dtype (cast it first)");
  }
}

OpDef unary_op(const std::string& name, const std::string& summary, DTypeRule rule,
               std::function<int(codegen::KernelBuilder&, int)> build) {
  OpDef def;
  def.name = name;
  def.summary = summary;
  def.min_operands = def.max_operands = 1;
  def.kind = OpKind::kElementwise;
  def.infer = [rule](const OpContext& context) {
    check_dtype_rule(context, 0, rule);
    return std::vector<TensorType>{context.operand(0)};
  };
  def.elementwise_expr = [build](codegen::KernelBuilder& emitter, const std::vector<int>& operands,
                                 const OpContext&) {
    return std::vector<int>{build(emitter, operands[0])};
  };
  return def;
}

OpDef binary_op(const std::string& name, const std::string& summary, DTypeRule rule,
                codegen::ExprOp expr_op, bool comparison) {
  OpDef def;
  def.name = name;
  def.summary = summary;
  def.min_operands = def.max_operands = 2;
  def.kind = OpKind::kElementwise;
  def.infer = [rule, comparison](const OpContext& context) {
    check_dtype_rule(context, 0, rule);
    require_same_dtype(context, 0, 1);
    TensorType result = with_shape(context.operand(0), broadcast_shapes(context, {0, 1}));
    if (comparison) result.dtype = DType::kBool;
    return std::vector<TensorType>{result};
  };
  def.elementwise_expr = [expr_op](codegen::KernelBuilder& emitter,
                                   const std::vector<int>& operands, const OpContext&) {
    return std::vector<int>{emitter.binary(expr_op, operands[0], operands[1])};
  };
  return def;
}

}  // namespace grove::compiler::ops
