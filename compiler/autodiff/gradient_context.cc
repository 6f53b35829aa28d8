#include "compiler/autodiff/gradient_context.h"

#include <algorithm>

#include "runtime/error.h"

namespace grove::compiler::autodiff {

ValueId scalar(ProgramBuilder& b, double value, DType dtype) { return b.full(value, {}, dtype); }

ValueId sum_to_shape(ProgramBuilder& b, ValueId grad, const Shape& shape) {
  const Shape& from = b.type(grad).shape;
  if (from == shape) return grad;
  GROVE_CHECK_AS(ShapeError, from.size() >= shape.size(), "autodiff: a gradient of shape ",
                 ir::shape_text(from), " cannot be summed down to the larger shape ",
                 ir::shape_text(shape), "; a gradient rule returned a wrong shape");
  size_t lead = from.size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < from.size(); ++d) {
    bool broadcast = d < lead || (shape[d - lead] == 1 && from[d] != 1);
    if (broadcast) dims.push_back(static_cast<int64_t>(d));
  }
  ValueId reduced = dims.empty() ? grad : b.sum(grad, dims, /*keepdim=*/true);
  // keepdim left size-1 dims for the leading ones too; reshape drops them.
  if (b.type(reduced).shape != shape) reduced = b.reshape(reduced, shape);
  return reduced;
}

ValueId broadcast_to(ProgramBuilder& b, ValueId value, const Shape& shape) {
  const ir::TensorType& type = b.type(value);
  if (type.shape == shape) return value;
  // Adding a zero tensor of the target shape broadcasts; fusion folds the
  // constant into the consumer's kernel.
  return b.add(b.full(0.0, shape, type.dtype), value);
}

ValueId unsqueeze_reduced(ProgramBuilder& b, ValueId reduced, const Shape& input_shape,
                          const std::vector<int64_t>& dims) {
  Shape kept = input_shape;
  for (int64_t d : dims) kept[static_cast<size_t>(d)] = 1;
  if (b.type(reduced).shape == kept) return reduced;
  return b.reshape(reduced, kept);
}

namespace {

// 0, 1, ..., count - 1 as a [count] tensor of `dtype`, no persistent state.
// Note [Iota in few kernels]: with count <= 2^bits, index i is the sum over
// bits of digit_bit(i) 2^bit, and over a [2, ..., 2] (bits dims) tensor the
// digit of a bit is the vector [0, 1] broadcast along that bit's dim. So the
// sum is one fused elementwise kernel after the [0, 1] vector (a concat),
// where doubling with a concat per bit cost three kernels per bit.
ValueId iota(ProgramBuilder& b, int64_t count, DType dtype) {
  ValueId zero = b.full(0.0, {1}, dtype);
  if (count <= 1) return count == 1 ? zero : b.slice(zero, 0, 0, 0);
  int64_t bits = 0;
  while ((int64_t{1} << bits) < count) ++bits;
  ValueId zero_one = b.concat({zero, b.add(zero, scalar(b, 1.0, dtype))}, 0);
  // Every term has the cube's shape (the place value is a full cube), as the
  // fusion joins only same-shaped elementwise ops.
  const Shape cube(static_cast<size_t>(bits), 2);
  ValueId values = ir::kNoValue;
  for (int64_t bit = 0; bit < bits; ++bit) {
    Shape digit_shape(static_cast<size_t>(bits), 1);
    digit_shape[static_cast<size_t>(bits - 1 - bit)] = 2;  // row-major: the last dim is bit 0
    ValueId place = b.full(static_cast<double>(int64_t{1} << bit), cube, dtype);
    ValueId term = b.mul(b.reshape(zero_one, digit_shape), place);
    values = values == ir::kNoValue ? term : b.add(values, term);
  }
  values = b.reshape(values, {int64_t{1} << bits});
  if ((int64_t{1} << bits) != count) values = b.slice(values, 0, 0, count);
  return values;
}

}  // namespace

ValueId one_hot(ProgramBuilder& b, ValueId ids, int64_t classes, DType dtype) {
  const ir::TensorType& type = b.type(ids);
  GROVE_CHECK(classes > 0, "autodiff: one_hot needs a positive class count, found ", classes);
  Shape column = type.shape;
  column.push_back(1);
  ValueId matches = b.compare("eq", b.reshape(ids, column), iota(b, classes, type.dtype));
  return b.cast(matches, dtype);
}

ValueId transpose_last(ProgramBuilder& b, ValueId value) { return b.transpose(value, -2, -1); }

}  // namespace grove::compiler::autodiff
