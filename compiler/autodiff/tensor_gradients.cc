// Gradient rules of the reductions, normalizations, losses, matmuls, views,
// gathers and the remaining differentiable ops (dropout, copy_into, print).
#include <numeric>

#include "compiler/autodiff/gradient_context.h"
#include "compiler/autodiff/gradient_rules.h"
#include "compiler/ops/op_helpers.h"

namespace grove::compiler::autodiff {

namespace {

using ops::GradientContext;
using Grads = std::vector<ValueId>;

void set(const std::string& op, ops::GradientRule rule) {
  ops::OpRegistry::global().set_gradient(op, std::move(rule));
}

DType dtype_of(GradientContext& c) { return c.result_type().dtype; }

std::vector<int64_t> reduce_dims(GradientContext& c) {
  return ops::normalize_reduce_dims(c.op, c.attrs().get_ints("dims"), c.operand_type(0).rank());
}

// The upstream gradient of a reduction, reshaped to keep the reduced dims.
ValueId kept_grad(GradientContext& c, const std::vector<int64_t>& dims) {
  return unsqueeze_reduced(c.b(), c.grad(), c.operand_type(0).shape, dims);
}

int64_t softmax_dim(GradientContext& c) {
  return ops::normalize_dim(c.op, c.attrs().get_int("dim"), c.operand_type(0).rank(), "dim");
}

// Collapses every dimension but the last: [..., n] -> [rows, n].
ValueId as_matrix(ProgramBuilder& b, ValueId value) {
  const Shape& shape = b.type(value).shape;
  int64_t columns = shape.empty() ? 1 : shape.back();
  int64_t rows = runtime::shape_numel(shape) / std::max<int64_t>(columns, 1);
  Shape matrix = {rows, columns};
  return shape == matrix ? value : b.reshape(value, matrix);
}

void register_reductions() {
  set("sum", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue};
    return {broadcast_to(c.b(), kept_grad(c, reduce_dims(c)), c.operand_type(0).shape)};
  });
  set("mean", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue};
    std::vector<int64_t> dims = reduce_dims(c);
    double count = 1;
    for (int64_t d : dims) count *= static_cast<double>(c.operand_type(0).shape[size_t(d)]);
    ProgramBuilder& b = c.b();
    ValueId scaled = b.div(kept_grad(c, dims), scalar(b, count, dtype_of(c)));
    return {broadcast_to(b, scaled, c.operand_type(0).shape)};
  });
  // The gradient goes to the elements equal to the maximum, split evenly
  // between ties.
  set("max", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue};
    ProgramBuilder& b = c.b();
    std::vector<int64_t> dims = reduce_dims(c);
    const Shape& shape = c.operand_type(0).shape;
    ValueId maximum = unsqueeze_reduced(b, c.result(), shape, dims);
    ValueId mask = b.cast(b.compare("eq", c.operand(0), maximum), c.operand_type(0).dtype);
    ValueId ties = b.sum(mask, dims, /*keepdim=*/true);
    return {b.mul(mask, b.div(kept_grad(c, dims), ties))};
  });
  // y = softmax(x): dx = y (g - sum(g y)).
  set("softmax", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue};
    ProgramBuilder& b = c.b();
    ValueId y = c.result();
    ValueId dot = b.sum(b.mul(c.grad(), y), {softmax_dim(c)}, /*keepdim=*/true);
    return {b.mul(y, b.sub(c.grad(), dot))};
  });
  // y = log_softmax(x): dx = g - exp(y) sum(g).
  set("log_softmax", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue};
    ProgramBuilder& b = c.b();
    ValueId total = b.sum(c.grad(), {softmax_dim(c)}, /*keepdim=*/true);
    return {b.sub(c.grad(), b.mul(b.exp(c.result()), total))};
  });
  // Recomputes the row statistics from x rather than saving them
  // (Note [Saved activations]):
  //   xhat = (x - mean) rstd,  dweight = sum_rows(g xhat),  dbias = sum_rows(g),
  //   dx = rstd (gw - mean(gw) - xhat mean(gw xhat))  with gw = g weight.
  // dx is one layer_norm_backward kernel (Note [Layer-norm input gradient]),
  // and xhat is layer_norm itself with weight 1 and bias 0 (one kernel).
  set("layer_norm", [](GradientContext& c) -> Grads {
    ProgramBuilder& b = c.b();
    DType dtype = dtype_of(c);
    ValueId x = c.operand(0);
    ValueId g = c.grad();
    const double eps = c.attrs().get_float("eps");
    int64_t rank = c.operand_type(0).rank();
    int64_t features = c.operand_type(0).shape.back();
    std::vector<int64_t> row_dims(static_cast<size_t>(rank - 1));
    std::iota(row_dims.begin(), row_dims.end(), 0);
    auto over_rows = [&](ValueId value) {
      return row_dims.empty() ? value : b.sum(value, row_dims, /*keepdim=*/false);
    };
    Grads grads(3, ir::kNoValue);
    if (c.wants(0)) grads[0] = b.op1("layer_norm_backward", {g, x, c.operand(1)}, {{"eps", eps}});
    if (c.wants(1)) {
      ValueId normalized =
          b.layer_norm(x, b.full(1.0, {features}, dtype), b.full(0.0, {features}, dtype), eps);
      grads[1] = over_rows(b.mul(g, normalized));
    }
    if (c.wants(2)) grads[2] = over_rows(g);
    return grads;
  });
  // loss = mean_rows(logsumexp(z) - z[label]):  dz = (softmax(z) - onehot) g / rows.
  set("cross_entropy", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue, ir::kNoValue};
    ProgramBuilder& b = c.b();
    const ir::TensorType& logits = c.operand_type(0);
    int64_t classes = logits.shape.back();
    double rows = static_cast<double>(logits.numel() / classes);
    ValueId target = one_hot(b, c.operand(1), classes, logits.dtype);
    ValueId scale = b.div(c.grad(), scalar(b, rows, logits.dtype));
    return {b.mul(b.sub(b.softmax(c.operand(0), -1), target), scale), ir::kNoValue};
  });
  // loss = mean((p - t)^2):  dp = 2 (p - t) g / n,  dt = -dp.
  set("mse_loss", [](GradientContext& c) -> Grads {
    ProgramBuilder& b = c.b();
    DType dtype = dtype_of(c);
    double count = static_cast<double>(c.operand_type(0).numel());
    ValueId scale = b.mul(c.grad(), scalar(b, 2.0 / count, dtype));
    ValueId prediction_grad = b.mul(b.sub(c.operand(0), c.operand(1)), scale);
    return {c.wants(0) ? prediction_grad : ir::kNoValue,
            c.wants(1) ? b.neg(prediction_grad) : ir::kNoValue};
  });
}

void register_matmuls() {
  // c = a @ b with broadcast batch dims: da = g b^T, db = a^T g, each summed
  // back over the batch dims its operand was broadcast along.
  set("matmul", [](GradientContext& c) -> Grads {
    ProgramBuilder& b = c.b();
    Grads grads(2, ir::kNoValue);
    if (c.wants(0)) {
      ValueId full = b.matmul(c.grad(), transpose_last(b, c.operand(1)));
      grads[0] = sum_to_shape(b, full, c.operand_type(0).shape);
    }
    if (c.wants(1)) {
      ValueId full = b.matmul(transpose_last(b, c.operand(0)), c.grad());
      grads[1] = sum_to_shape(b, full, c.operand_type(1).shape);
    }
    return grads;
  });
  // y = x w^T + bias:  dx = g w (a linear with weight w^T),  dw = g^T x over
  // all rows,  dbias = sum_rows(g).
  set("linear", [](GradientContext& c) -> Grads {
    ProgramBuilder& b = c.b();
    Grads grads(c.node.operands.size(), ir::kNoValue);
    ValueId g = c.grad();
    if (c.wants(0)) grads[0] = b.linear(g, b.transpose(c.operand(1), 0, 1), ir::kNoValue);
    if (c.wants(1)) {
      ValueId g_rows = as_matrix(b, g);
      grads[1] = b.matmul(b.transpose(g_rows, 0, 1), as_matrix(b, c.operand(0)));
    }
    if (grads.size() == 3 && c.wants(2)) grads[2] = sum_to_shape(b, g, c.operand_type(2).shape);
    return grads;
  });
}

void register_views_and_gathers() {
  set("reshape", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue};
    return {c.b().reshape(c.grad(), c.operand_type(0).shape)};
  });
  set("transpose", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue};
    return {c.b().transpose(c.grad(), c.attrs().get_int("dim0"), c.attrs().get_int("dim1"))};
  });
  set("permute", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue};
    int64_t rank = c.operand_type(0).rank();
    std::vector<int64_t> inverse(static_cast<size_t>(rank));
    const std::vector<int64_t>& order = c.attrs().get_ints("order");
    for (size_t i = 0; i < order.size(); ++i) {
      inverse[static_cast<size_t>(ops::normalize_dim(c.op, order[i], rank, "order"))] =
          static_cast<int64_t>(i);
    }
    return {c.b().permute(c.grad(), inverse)};
  });
  // The gradient of a slice is the upstream gradient padded with zeros.
  set("slice", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue};
    ProgramBuilder& b = c.b();
    const Shape& shape = c.operand_type(0).shape;
    int64_t dim =
        ops::normalize_dim(c.op, c.attrs().get_int("dim"), c.operand_type(0).rank(), "dim");
    auto d = static_cast<size_t>(dim);
    auto [begin, end] =
        ops::slice_bounds(c.attrs().get_int("start"), c.attrs().get_int("end"), shape[d]);
    std::vector<ValueId> parts;
    auto zeros = [&](int64_t length) {
      Shape part = shape;
      part[d] = length;
      parts.push_back(b.full(0.0, part, dtype_of(c)));
    };
    if (begin > 0) zeros(begin);
    parts.push_back(c.grad());
    if (end < shape[d]) zeros(shape[d] - end);
    return {parts.size() == 1 ? parts[0] : b.concat(parts, dim)};
  });
  set("concat", [](GradientContext& c) -> Grads {
    ProgramBuilder& b = c.b();
    int64_t dim = ops::normalize_dim(c.op, c.attrs().get_int("dim"), c.result_type().rank(), "dim");
    Grads grads;
    int64_t start = 0;
    for (size_t i = 0; i < c.node.operands.size(); ++i) {
      int64_t length = c.operand_type(i).shape[static_cast<size_t>(dim)];
      grads.push_back(c.wants(i) ? b.slice(c.grad(), dim, start, start + length) : ir::kNoValue);
      start += length;
    }
    return grads;
  });
  // A scatter-add of the upstream rows into the table, as one_hot(ids)^T @ g.
  set("embedding", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue, ir::kNoValue};
    ProgramBuilder& b = c.b();
    const ir::TensorType& table = c.operand_type(0);
    ValueId picks = as_matrix(b, one_hot(b, c.operand(1), table.shape[0], table.dtype));
    return {b.matmul(b.transpose(picks, 0, 1), as_matrix(b, c.grad())), ir::kNoValue};
  });
}

void register_others() {
  // Dropout is linear in x with a mask fixed by (seed, offset): dropping the
  // gradient with the same seed and offset applies the same mask and scale.
  set("dropout", [](GradientContext& c) -> Grads {
    if (!c.wants(0)) return {ir::kNoValue, ir::kNoValue, ir::kNoValue};
    ValueId dropped = c.b().op1("dropout", {c.grad(), c.operand(1), c.operand(2)},
                                {{"p", c.attrs().get_float("p")}});
    return {dropped, ir::kNoValue, ir::kNoValue};
  });
  // The destination's old contents are overwritten: no gradient flows to it.
  set("copy_into", [](GradientContext& c) -> Grads {
    if (!c.wants(1)) return {ir::kNoValue, ir::kNoValue};
    return {ir::kNoValue, sum_to_shape(c.b(), c.grad(), c.operand_type(1).shape)};
  });
  set("print", [](GradientContext& c) -> Grads { return {c.wants(0) ? c.grad() : ir::kNoValue}; });
}

}  // namespace

namespace detail {

void register_tensor_gradients() {
  register_reductions();
  register_matmuls();
  register_views_and_gathers();
  register_others();
}

}  // namespace detail

}  // namespace grove::compiler::autodiff
