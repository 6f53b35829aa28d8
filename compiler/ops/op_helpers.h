// Shared checks and shape rules for op definitions. Every failure names the
// node (OpContext::where()) and the operands involved.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/ops/op_registry.h"

namespace grove::compiler::ops {

// Numpy broadcasting: shapes are aligned at the right; each dimension pair
// must be equal or contain a 1. Throws ShapeError naming the operands.
Shape broadcast_shapes(const OpContext& context, const std::vector<size_t>& operand_indices);
// Whether `from` broadcasts to exactly `to`.
bool broadcasts_to(const Shape& from, const Shape& to);

// `dim` in [-rank, rank) → [0, rank); throws ShapeError naming the attribute.
int64_t normalize_dim(const OpContext& context, int64_t dim, int64_t rank,
                      const std::string& attr_name);
// Sorted, distinct, normalized; empty means every dimension.
std::vector<int64_t> normalize_reduce_dims(const OpContext& context,
                                           const std::vector<int64_t>& dims, int64_t rank);

void require_floating(const OpContext& context, size_t operand);
void require_integer(const OpContext& context, size_t operand);  // i32 or i64
void require_same_dtype(const OpContext& context, size_t a, size_t b);
void require_rank_at_least(const OpContext& context, size_t operand, int64_t rank);
void require_scalar(const OpContext& context, size_t operand);  // shape {}
void require_same_shape(const OpContext& context, size_t a, size_t b);

// Python slice bounds: negative values count from the end; both ends are
// clamped to [0, size] and end >= start. Returns {begin, end}.
std::pair<int64_t, int64_t> slice_bounds(int64_t start, int64_t end, int64_t size);

bool is_integer(DType dtype);
// The dtype expressions compute in for a value of `dtype`: f32 for floating
// types (bf16 and f16 accumulate in f32), the dtype itself otherwise.
DType compute_dtype(DType dtype);

TensorType with_shape(const TensorType& type, Shape shape);
TensorType with_dtype(const TensorType& type, DType dtype);

// The dtypes an elementwise op takes: any, numeric (not bool), floating.
enum class DTypeRule { kAny, kNumeric, kFloating };
// Throws DTypeError naming the node and operand when `rule` rejects it.
void check_dtype_rule(const OpContext& context, size_t operand, DTypeRule rule);
// An elementwise op of one operand whose result has the operand's type;
// `build` makes its expression from the operand's.
OpDef unary_op(const std::string& name, const std::string& summary, DTypeRule rule,
               std::function<int(codegen::KernelBuilder&, int)> build);
// An elementwise op of two broadcasting operands of one dtype computed by one
// ExprOp; a comparison's result is bool.
OpDef binary_op(const std::string& name, const std::string& summary, DTypeRule rule,
                codegen::ExprOp expr_op, bool comparison);

// Registration of the built-in ops, one function per file.
void register_elementwise_ops(OpRegistry& registry);
void register_reduction_ops(OpRegistry& registry);
void register_structural_ops(OpRegistry& registry);
void register_training_ops(OpRegistry& registry);
void register_special_ops(OpRegistry& registry);
void register_math_ops(OpRegistry& registry);       // math_ops.cc
void register_bitwise_ops(OpRegistry& registry);    // bitwise_ops.cc
void register_attention_ops(OpRegistry& registry);  // attention_ops.cc

// g * gelu'(x) for gelu's tanh approximation, as expressions of `emitter`
// (the gelu_backward op, and GEMM kernels with a gelu-gradient epilogue).
int emit_gelu_backward(codegen::KernelBuilder& emitter, int g, int x);

// Whether the op erf is one expr, kErf (Note [Erf as one expression] in
// compiler/codegen/kernel_math.h): GROVE_FAST_ERF, on unless 0 (0: written out).
bool fast_erf_enabled();

}  // namespace grove::compiler::ops
