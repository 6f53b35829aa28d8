// Matmuls (library GEMM), views (no kernel; the result aliases operand 0),
// and the index-driven copies concat and embedding.
#include <algorithm>

#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"

namespace grove::compiler::ops {

namespace {

OpDef view_op(const std::string& name, const std::string& summary, std::vector<AttrSpec> attrs,
              std::function<Shape(const OpContext&)> shape_rule) {
  OpDef def;
  def.name = name;
  def.summary = summary;
  def.min_operands = def.max_operands = 1;
  def.attrs = std::move(attrs);
  def.kind = OpKind::kView;
  def.effects.result_aliases = {0};
  def.infer = [shape_rule](const OpContext& context) {
    return std::vector<TensorType>{with_shape(context.operand(0), shape_rule(context))};
  };
  return def;
}

Shape reshape_shape(const OpContext& context) {
  const Shape& input = context.operand(0).shape;
  Shape shape = context.attrs.get_ints("shape");
  int inferred = -1;
  int64_t known = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) {
      GROVE_CHECK_AS(ShapeError, d < input.size(), context.where(), ": attribute 'shape' ",
                     ir::shape_text(shape), " copies dimension ", d, " (0) but ",
                     context.describe_operand(0), " has rank ", input.size());
      shape[d] = input[d];
    }
    if (shape[d] == -1) {
      GROVE_CHECK_AS(ShapeError, inferred < 0, context.where(), ": attribute 'shape' ",
                     ir::shape_text(shape), " has more than one -1");
      inferred = static_cast<int>(d);
      continue;
    }
    GROVE_CHECK_AS(ShapeError, shape[d] > 0, context.where(), ": attribute 'shape' ",
                   ir::shape_text(context.attrs.get_ints("shape")), " has an invalid size ",
                   shape[d], " (use -1 to infer one dimension, 0 to copy the input's)");
    GROVE_CHECK_AS(ShapeError, !__builtin_mul_overflow(known, shape[d], &known), context.where(),
                   ": attribute 'shape' ", ir::shape_text(context.attrs.get_ints("shape")),
                   " has more elements than a 64-bit count holds");
  }
  int64_t total = runtime::shape_numel(input);
  if (inferred >= 0) {
    GROVE_CHECK_AS(ShapeError, known > 0 && total % known == 0, context.where(),
                   ": cannot infer the -1 of ", ir::shape_text(context.attrs.get_ints("shape")),
                   " for ", context.describe_operand(0));
    shape[static_cast<size_t>(inferred)] = total / known;
    known = total;
  }
  GROVE_CHECK_AS(ShapeError, known == total, context.where(), ": cannot reshape ",
                 context.describe_operand(0), " (", total, " elements) to ", ir::shape_text(shape),
                 " (", known, " elements)");
  return shape;
}

Shape permute_shape(const OpContext& context, const std::vector<int64_t>& order,
                    const std::string& attr) {
  const Shape& input = context.operand(0).shape;
  auto rank = static_cast<int64_t>(input.size());
  GROVE_CHECK_AS(ShapeError, static_cast<int64_t>(order.size()) == rank, context.where(),
                 ": attribute '", attr, "' ", ir::shape_text(order), " must list each of the ",
                 rank, " dimensions of ", context.describe_operand(0), " once");
  std::vector<bool> seen(input.size(), false);
  Shape shape;
  for (int64_t dim : order) {
    int64_t d = normalize_dim(context, dim, rank, attr);
    GROVE_CHECK_AS(ShapeError, !seen[static_cast<size_t>(d)], context.where(), ": attribute '",
                   attr, "' ", ir::shape_text(order), " lists dimension ", d, " twice");
    seen[static_cast<size_t>(d)] = true;
    shape.push_back(input[static_cast<size_t>(d)]);
  }
  return shape;
}

}  // namespace

// Slice bounds follow Python: negative values count from the end, and both
// ends are clamped to [0, size].
std::pair<int64_t, int64_t> slice_bounds(int64_t start, int64_t end, int64_t size) {
  auto clamp = [size](int64_t value) {
    if (value < 0) value += size;
    return std::clamp<int64_t>(value, 0, size);
  };
  int64_t begin = clamp(start);
  return {begin, std::max(begin, clamp(end))};
}

void register_structural_ops(OpRegistry& registry) {
  OpDef matmul;
  matmul.name = "matmul";
  matmul.summary = "a @ b; a [..., M, K], b [..., K, N]; batch dims broadcast";
  matmul.min_operands = matmul.max_operands = 2;
  matmul.kind = OpKind::kMatmul;
  matmul.infer = [](const OpContext& context) {
    require_floating(context, 0);
    require_same_dtype(context, 0, 1);
    require_rank_at_least(context, 0, 2);
    require_rank_at_least(context, 1, 2);
    const Shape& a = context.operand(0).shape;
    const Shape& b = context.operand(1).shape;
    GROVE_CHECK_AS(ShapeError, a.back() == b[b.size() - 2], context.where(),
                   ": inner dimensions differ: ", context.describe_operand(0),
                   " has K = ", a.back(), " but ", context.describe_operand(1),
                   " has K = ", b[b.size() - 2]);
    OpContext batch = context;
    batch.operand_types[0].shape.resize(a.size() - 2);
    batch.operand_types[1].shape.resize(b.size() - 2);
    Shape shape = broadcast_shapes(batch, {0, 1});
    shape.push_back(a[a.size() - 2]);
    shape.push_back(b.back());
    return std::vector<TensorType>{with_shape(context.operand(0), shape)};
  };
  registry.add(std::move(matmul));

  OpDef linear;
  linear.name = "linear";
  linear.summary = "x @ weight^T + bias; x [..., K], weight [N, K], bias [N] (optional)";
  linear.min_operands = 2;
  linear.max_operands = 3;
  linear.kind = OpKind::kMatmul;
  linear.infer = [](const OpContext& context) {
    require_floating(context, 0);
    require_same_dtype(context, 0, 1);
    require_rank_at_least(context, 0, 1);
    const Shape& x = context.operand(0).shape;
    const Shape& weight = context.operand(1).shape;
    GROVE_CHECK_AS(ShapeError, weight.size() == 2 && weight[1] == x.back(), context.where(), ": ",
                   context.describe_operand(1), " must have shape [N, ", x.back(),
                   "] to match the last dimension of ", context.describe_operand(0));
    if (context.operand_types.size() == 3) {
      require_same_dtype(context, 0, 2);
      GROVE_CHECK_AS(ShapeError, context.operand(2).shape == Shape{weight[0]}, context.where(),
                     ": ", context.describe_operand(2), " must have shape [", weight[0], "]");
    }
    Shape shape = x;
    shape.back() = weight[0];
    return std::vector<TensorType>{with_shape(context.operand(0), shape)};
  };
  registry.add(std::move(linear));

  registry.add(view_op("reshape", "a view with another shape (-1 infers one dim, 0 copies)",
                       {{"shape", AttrKind::kInts, std::nullopt}}, reshape_shape));
  registry.add(
      view_op("transpose", "swap two dimensions",
              {{"dim0", AttrKind::kInt, std::nullopt}, {"dim1", AttrKind::kInt, std::nullopt}},
              [](const OpContext& context) {
                int64_t rank = context.operand(0).rank();
                int64_t d0 = normalize_dim(context, context.attrs.get_int("dim0"), rank, "dim0");
                int64_t d1 = normalize_dim(context, context.attrs.get_int("dim1"), rank, "dim1");
                Shape shape = context.operand(0).shape;
                std::swap(shape[static_cast<size_t>(d0)], shape[static_cast<size_t>(d1)]);
                return shape;
              }));
  registry.add(view_op("permute", "reorder dimensions: result dim i is input dim order[i]",
                       {{"order", AttrKind::kInts, std::nullopt}}, [](const OpContext& context) {
                         return permute_shape(context, context.attrs.get_ints("order"), "order");
                       }));
  registry.add(view_op(
      "slice", "[start, end) along `dim` (Python bounds, clamped)",
      {{"dim", AttrKind::kInt, std::nullopt},
       {"start", AttrKind::kInt, int64_t{0}},
       {"end", AttrKind::kInt, std::nullopt}},
      [](const OpContext& context) {
        require_rank_at_least(context, 0, 1);
        Shape shape = context.operand(0).shape;
        auto d = static_cast<size_t>(
            normalize_dim(context, context.attrs.get_int("dim"), context.operand(0).rank(), "dim"));
        auto [begin, end] =
            slice_bounds(context.attrs.get_int("start"), context.attrs.get_int("end"), shape[d]);
        shape[d] = end - begin;
        return shape;
      }));

  OpDef concat;
  concat.name = "concat";
  concat.summary = "join operands along `dim` (other dims equal)";
  concat.min_operands = 1;
  concat.max_operands = -1;
  concat.attrs = {{"dim", AttrKind::kInt, std::nullopt}};
  concat.kind = OpKind::kGather;
  concat.infer = [](const OpContext& context) {
    require_rank_at_least(context, 0, 1);
    const TensorType& first = context.operand(0);
    auto d = static_cast<size_t>(
        normalize_dim(context, context.attrs.get_int("dim"), first.rank(), "dim"));
    Shape shape = first.shape;
    shape[d] = 0;
    for (size_t i = 0; i < context.operand_types.size(); ++i) {
      require_same_dtype(context, 0, i);
      const Shape& other = context.operand(i).shape;
      bool compatible = other.size() == first.shape.size();
      for (size_t k = 0; compatible && k < other.size(); ++k) {
        compatible = k == d || other[k] == first.shape[k];
      }
      GROVE_CHECK_AS(ShapeError, compatible, context.where(), ": ", context.describe_operand(i),
                     " does not match ", context.describe_operand(0),
                     " outside the concat dimension ", d);
      shape[d] += other[d];
    }
    return std::vector<TensorType>{with_shape(first, shape)};
  };
  registry.add(std::move(concat));

  OpDef embedding;
  embedding.name = "embedding";
  embedding.summary = "rows of table [V, D] picked by integer ids [...] -> [..., D]";
  embedding.min_operands = embedding.max_operands = 2;
  embedding.kind = OpKind::kGather;
  embedding.infer = [](const OpContext& context) {
    require_integer(context, 1);
    GROVE_CHECK_AS(ShapeError, context.operand(0).rank() == 2, context.where(), ": ",
                   context.describe_operand(0), " must be a [vocab, dim] table");
    Shape shape = context.operand(1).shape;
    shape.push_back(context.operand(0).shape[1]);
    return std::vector<TensorType>{with_shape(context.operand(0), shape)};
  };
  registry.add(std::move(embedding));
}

}  // namespace grove::compiler::ops
