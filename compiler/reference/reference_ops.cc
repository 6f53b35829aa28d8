// Every op in float64, written for clarity rather than speed: this is the
// oracle the kernels are tested against.
#include "compiler/reference/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>

#include "compiler/ops/op_helpers.h"
#include "compiler/ops/philox.h"
#include "runtime/error.h"

namespace grove::compiler::reference {

using ir::DType;
using ir::Shape;

namespace {

using Operands = std::vector<const HostTensor*>;

HostTensor make(const ir::TensorType& type) {
  HostTensor tensor;
  tensor.shape = type.shape;
  tensor.dtype = type.dtype;
  tensor.data.assign(static_cast<size_t>(runtime::shape_numel(type.shape)), 0.0);
  return tensor;
}

// Element strides of `from` when broadcast to `to` (0 along broadcast dims).
Shape broadcast_strides(const Shape& from, const Shape& to) {
  Shape strides(to.size(), 0);
  Shape contiguous = runtime::contiguous_strides(from);
  size_t pad = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    strides[pad + d] = from[d] == 1 ? 0 : contiguous[d];
  }
  return strides;
}

// Calls visit(flat_output_index, offsets) for every element of `shape`, where
// offsets[k] is the flat index into operand k under `strides[k]`.
void for_each_index(const Shape& shape, const std::vector<Shape>& strides,
                    const std::function<void(int64_t, const std::vector<int64_t>&)>& visit) {
  int64_t count = runtime::shape_numel(shape);
  std::vector<int64_t> index(shape.size(), 0);
  std::vector<int64_t> offsets(strides.size(), 0);
  for (int64_t flat = 0; flat < count; ++flat) {
    visit(flat, offsets);
    for (size_t d = shape.size(); d-- > 0;) {
      ++index[d];
      for (size_t k = 0; k < strides.size(); ++k) offsets[k] += strides[k][d];
      if (index[d] < shape[d]) break;
      for (size_t k = 0; k < strides.size(); ++k) offsets[k] -= strides[k][d] * shape[d];
      index[d] = 0;
    }
  }
}

HostTensor elementwise(const Operands& operands, const ir::TensorType& type,
                       const std::function<double(const std::vector<double>&)>& f) {
  HostTensor out = make(type);
  std::vector<Shape> strides;
  for (const HostTensor* operand : operands) {
    strides.push_back(broadcast_strides(operand->shape, type.shape));
  }
  std::vector<double> args(operands.size());
  for_each_index(type.shape, strides, [&](int64_t flat, const std::vector<int64_t>& offsets) {
    for (size_t k = 0; k < operands.size(); ++k) {
      args[k] = operands[k]->data[static_cast<size_t>(offsets[k])];
    }
    out.data[static_cast<size_t>(flat)] = round_to_dtype(f(args), type.dtype);
  });
  return out;
}

// Keeps integer results exact and floats unrounded (the oracle stays in f64).
double finish(double value, DType dtype) {
  return runtime::is_floating(dtype) ? value : round_to_dtype(value, dtype);
}

double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// g * gelu'(x), the derivative of gelu's tanh approximation.
double gelu_backward(double g, double x) {
  const double k = std::sqrt(2 / M_PI), a = 0.044715;
  const double t = std::tanh(k * (x + a * x * x * x));
  return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * a * x * x));
}

// Splits `shape` around `dims` (sorted): outer × reduced, with `reduced`
// enumerating the row elements. Returns, for each output element (non-reduced
// index, row-major) the flat input indices of its row.
std::vector<std::vector<int64_t>> rows_of(const Shape& shape, const std::vector<int64_t>& dims) {
  Shape kept_shape;
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) kept_shape.push_back(shape[d]);
  }
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(runtime::shape_numel(kept_shape)));
  Shape kept_strides = runtime::contiguous_strides(kept_shape);
  std::vector<int64_t> index(shape.size(), 0);
  int64_t count = runtime::shape_numel(shape);
  for (int64_t flat = 0; flat < count; ++flat) {
    int64_t row = 0;
    for (size_t d = 0, k = 0; d < shape.size(); ++d) {
      if (!reduced[d]) row += index[d] * kept_strides[k++];
    }
    rows[static_cast<size_t>(row)].push_back(flat);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return rows;
}

ops::OpContext context_for(const ir::Node& node, const Operands& operands) {
  ops::OpContext context;
  context.node_name = node.name;
  context.op = node.op;
  context.attrs = node.attrs;
  for (const HostTensor* operand : operands) {
    context.operand_types.push_back(ir::TensorType{operand->shape, operand->dtype, {}});
    context.operand_names.push_back("?");
  }
  return context;
}

HostTensor reduce(const ir::Node& node, const Operands& in, const ir::TensorType& type) {
  const HostTensor& x = *in[0];
  std::vector<int64_t> dims = ops::normalize_reduce_dims(
      context_for(node, in), node.attrs.get_ints("dims"), static_cast<int64_t>(x.shape.size()));
  HostTensor out = make(type);
  auto rows = rows_of(x.shape, dims);
  for (size_t r = 0; r < rows.size(); ++r) {
    double acc = node.op == "max" ? -std::numeric_limits<double>::infinity() : 0;
    for (int64_t i : rows[r]) {
      double v = x.data[static_cast<size_t>(i)];
      acc =
          node.op == "max" ? (std::isnan(v) || std::isnan(acc) ? NAN : std::max(acc, v)) : acc + v;
    }
    if (node.op == "mean") acc /= static_cast<double>(rows[r].size());
    out.data[r] = finish(acc, type.dtype);
  }
  return out;
}

HostTensor softmax(const ir::Node& node, const Operands& in, const ir::TensorType& type) {
  const HostTensor& x = *in[0];
  int64_t dim = ops::normalize_dim(context_for(node, in), node.attrs.get_int("dim"),
                                   static_cast<int64_t>(x.shape.size()), "dim");
  HostTensor out = make(type);
  for (const auto& row : rows_of(x.shape, {dim})) {
    double row_max = -std::numeric_limits<double>::infinity();
    for (int64_t i : row) row_max = std::max(row_max, x.data[static_cast<size_t>(i)]);
    double total = 0;
    for (int64_t i : row) total += std::exp(x.data[static_cast<size_t>(i)] - row_max);
    for (int64_t i : row) {
      double shifted = x.data[static_cast<size_t>(i)] - row_max;
      out.data[static_cast<size_t>(i)] =
          node.op == "softmax" ? std::exp(shifted) / total : shifted - std::log(total);
    }
  }
  return out;
}

// Note [Fused attention op] in float64: per (leading index, query head, query
// position) the masked, scaled scores' safe softmax times value.
HostTensor attention(const ir::Node& node, const Operands& in, const ir::TensorType& type) {
  const HostTensor& q = *in[0];
  const HostTensor& k = *in[1];
  const HostTensor& v = *in[2];
  const size_t rank = q.shape.size();
  const int64_t heads = q.shape[rank - 3], key_heads = k.shape[rank - 3];
  const int64_t queries = q.shape[rank - 2], features = q.shape[rank - 1];
  const int64_t keys = k.shape[rank - 2], value_features = v.shape[rank - 1];
  const int64_t group = heads / key_heads;
  const int64_t leading = q.numel() / (heads * queries * features);
  const double scale = node.attrs.get_float("scale");
  const bool causal = node.attrs.get_int("causal") != 0;
  Shape scores_shape = q.shape;
  scores_shape.back() = keys;
  const Shape mask_strides =
      in.size() == 4 ? broadcast_strides(in[3]->shape, scores_shape) : Shape(rank, 0);
  const double minus_infinity = -std::numeric_limits<double>::infinity();
  HostTensor out = make(type);
  std::vector<double> scores(static_cast<size_t>(keys));
  for (int64_t l = 0; l < leading; ++l) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kh = l * key_heads + h / group;
      for (int64_t i = 0; i < queries; ++i) {
        const double* query = q.data.data() + ((l * heads + h) * queries + i) * features;
        double row_max = minus_infinity;
        for (int64_t j = 0; j < keys; ++j) {
          const double* key = k.data.data() + (kh * keys + j) * features;
          double s = 0;
          for (int64_t d = 0; d < features; ++d) s += query[d] * key[d];
          s *= scale;
          if (in.size() == 4) {
            int64_t at = 0;
            const int64_t coordinates[] = {h, i, j};
            int64_t rest = l;
            for (size_t d = rank - 3; d-- > 0;) {
              at += (rest % q.shape[d]) * mask_strides[d];
              rest /= q.shape[d];
            }
            for (size_t d = 0; d < 3; ++d) at += coordinates[d] * mask_strides[rank - 3 + d];
            const double mask = in[3]->data[static_cast<size_t>(at)];
            if (in[3]->dtype == DType::kBool) {
              if (mask == 0) s = minus_infinity;
            } else {
              s += mask;
            }
          }
          if (causal && j > i) s = minus_infinity;
          scores[static_cast<size_t>(j)] = s;
          row_max = std::max(row_max, s);
        }
        if (row_max == minus_infinity) row_max = 0;
        double total = 0;
        for (double& s : scores) total += (s = std::exp(s - row_max));
        double* row = out.data.data() + ((l * heads + h) * queries + i) * value_features;
        for (int64_t f = 0; f < value_features; ++f) {
          double sum = 0;
          for (int64_t j = 0; j < keys; ++j) {
            sum += scores[static_cast<size_t>(j)] *
                   v.data[static_cast<size_t>((kh * keys + j) * value_features + f)];
          }
          row[f] = finish(total > 0 ? sum / total : 0.0, type.dtype);
        }
      }
    }
  }
  return out;
}

// layer_norm's input gradient (Note [Layer-norm input gradient]) in float64.
HostTensor layer_norm_backward(const ir::Node& node, const Operands& in,
                               const ir::TensorType& type) {
  const HostTensor& g = *in[0];
  const HostTensor& x = *in[1];
  const HostTensor& weight = *in[2];
  int64_t features = x.shape.back();
  double eps = node.attrs.get_float("eps");
  double n = static_cast<double>(features);
  HostTensor out = make(type);
  for (int64_t row = 0; row * features < x.numel(); ++row) {
    const double* values = x.data.data() + row * features;
    const double* grads = g.data.data() + row * features;
    double mean = 0, variance = 0;
    for (int64_t j = 0; j < features; ++j) mean += values[j];
    mean /= n;
    for (int64_t j = 0; j < features; ++j) variance += (values[j] - mean) * (values[j] - mean);
    variance /= n;
    double rstd = 1 / std::sqrt(variance + eps);
    double mean_gw = 0, mean_gw_xhat = 0;
    for (int64_t j = 0; j < features; ++j) {
      double gw = grads[j] * weight.data[static_cast<size_t>(j)];
      mean_gw += gw;
      mean_gw_xhat += gw * (values[j] - mean) * rstd;
    }
    mean_gw /= n;
    mean_gw_xhat /= n;
    for (int64_t j = 0; j < features; ++j) {
      double gw = grads[j] * weight.data[static_cast<size_t>(j)];
      double xhat = (values[j] - mean) * rstd;
      out.data[static_cast<size_t>(row * features + j)] =
          rstd * (gw - mean_gw - xhat * mean_gw_xhat);
    }
  }
  return out;
}

HostTensor layer_norm(const ir::Node& node, const Operands& in, const ir::TensorType& type) {
  const HostTensor& x = *in[0];
  int64_t features = x.shape.back();
  double eps = node.attrs.get_float("eps");
  HostTensor out = make(type);
  for (int64_t row = 0; row * features < x.numel(); ++row) {
    const double* values = x.data.data() + row * features;
    double mean = 0, variance = 0;
    for (int64_t j = 0; j < features; ++j) mean += values[j];
    mean /= static_cast<double>(features);
    for (int64_t j = 0; j < features; ++j) variance += (values[j] - mean) * (values[j] - mean);
    variance /= static_cast<double>(features);
    double inv_std = 1 / std::sqrt(variance + eps);
    for (int64_t j = 0; j < features; ++j) {
      out.data[static_cast<size_t>(row * features + j)] =
          (values[j] - mean) * inv_std * in[1]->data[static_cast<size_t>(j)] +
          in[2]->data[static_cast<size_t>(j)];
    }
  }
  return out;
}

// a [..., M, K] @ b [..., K, N] with broadcast batch dims.
HostTensor matmul(const Operands& in, const ir::TensorType& type, bool b_transposed) {
  const HostTensor& a = *in[0];
  const HostTensor& b = *in[1];
  int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back();
  int64_t n = type.shape.back();
  Shape batch(type.shape.begin(), type.shape.end() - 2);
  Shape a_batch(a.shape.begin(), a.shape.end() - 2);
  Shape b_batch(b.shape.begin(), b.shape.end() - 2);
  HostTensor out = make(type);
  std::vector<Shape> strides = {broadcast_strides(a_batch, batch),
                                broadcast_strides(b_batch, batch)};
  for_each_index(batch, strides, [&](int64_t flat, const std::vector<int64_t>& offsets) {
    const double* pa = a.data.data() + offsets[0] * m * k;
    const double* pb = b.data.data() + offsets[1] * k * n;
    double* po = out.data.data() + flat * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          acc += pa[i * k + p] * (b_transposed ? pb[j * k + p] : pb[p * n + j]);
        }
        po[i * n + j] = acc;
      }
    }
  });
  return out;
}

HostTensor linear(const Operands& in, const ir::TensorType& type) {
  const HostTensor& x = *in[0];
  const HostTensor& w = *in[1];
  int64_t k = x.shape.back(), n = w.shape[0];
  int64_t rows = x.numel() / std::max<int64_t>(k, 1);
  if (k == 0) rows = runtime::shape_numel(type.shape) / std::max<int64_t>(n, 1);
  HostTensor out = make(type);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = in.size() == 3 ? in[2]->data[static_cast<size_t>(j)] : 0;
      for (int64_t p = 0; p < k; ++p) {
        acc += x.data[static_cast<size_t>(r * k + p)] * w.data[static_cast<size_t>(j * k + p)];
      }
      out.data[static_cast<size_t>(r * n + j)] = acc;
    }
  }
  return out;
}

// The result of a permutation of x's dims: result dim i is x's dim order[i].
HostTensor permuted(const HostTensor& x, const std::vector<int64_t>& order,
                    const ir::TensorType& type) {
  HostTensor out = make(type);
  Shape x_strides = runtime::contiguous_strides(x.shape);
  Shape strides(order.size());
  for (size_t i = 0; i < order.size(); ++i) strides[i] = x_strides[static_cast<size_t>(order[i])];
  for_each_index(type.shape, {strides}, [&](int64_t flat, const std::vector<int64_t>& offsets) {
    out.data[static_cast<size_t>(flat)] = x.data[static_cast<size_t>(offsets[0])];
  });
  return out;
}

std::vector<int64_t> normalized_order(const ir::Node& node, const Operands& in) {
  auto rank = static_cast<int64_t>(in[0]->shape.size());
  ops::OpContext context = context_for(node, in);
  std::vector<int64_t> order;
  if (node.op == "transpose") {
    for (int64_t d = 0; d < rank; ++d) order.push_back(d);
    std::swap(order[static_cast<size_t>(
                  ops::normalize_dim(context, node.attrs.get_int("dim0"), rank, "dim0"))],
              order[static_cast<size_t>(
                  ops::normalize_dim(context, node.attrs.get_int("dim1"), rank, "dim1"))]);
  } else {
    for (int64_t d : node.attrs.get_ints("order")) {
      order.push_back(ops::normalize_dim(context, d, rank, "order"));
    }
  }
  return order;
}

HostTensor slice(const ir::Node& node, const Operands& in, const ir::TensorType& type) {
  const HostTensor& x = *in[0];
  auto d = static_cast<size_t>(ops::normalize_dim(context_for(node, in), node.attrs.get_int("dim"),
                                                  static_cast<int64_t>(x.shape.size()), "dim"));
  auto [begin, end] =
      ops::slice_bounds(node.attrs.get_int("start"), node.attrs.get_int("end"), x.shape[d]);
  (void)end;
  HostTensor out = make(type);
  Shape strides = runtime::contiguous_strides(x.shape);
  int64_t base = begin * strides[d];
  for_each_index(type.shape, {strides}, [&](int64_t flat, const std::vector<int64_t>& offsets) {
    out.data[static_cast<size_t>(flat)] = x.data[static_cast<size_t>(base + offsets[0])];
  });
  return out;
}

HostTensor concat(const ir::Node& node, const Operands& in, const ir::TensorType& type) {
  auto d = static_cast<size_t>(ops::normalize_dim(context_for(node, in), node.attrs.get_int("dim"),
                                                  static_cast<int64_t>(type.shape.size()), "dim"));
  HostTensor out = make(type);
  Shape out_strides = runtime::contiguous_strides(type.shape);
  int64_t start = 0;
  for (const HostTensor* part : in) {
    for_each_index(part->shape, {out_strides},
                   [&](int64_t flat, const std::vector<int64_t>& offsets) {
                     out.data[static_cast<size_t>(offsets[0] + start * out_strides[d])] =
                         part->data[static_cast<size_t>(flat)];
                   });
    start += part->shape[d];
  }
  return out;
}

int64_t checked_index(const ir::Node& node, double value, int64_t limit, const char* what) {
  auto index = static_cast<int64_t>(value);
  GROVE_CHECK(index >= 0 && index < limit, "node '", node.name, "' (", node.op, "): ", what, " ",
              index, " is out of range [0, ", limit, ")");
  return index;
}

HostTensor embedding(const ir::Node& node, const Operands& in, const ir::TensorType& type) {
  const HostTensor& table = *in[0];
  int64_t vocab = table.shape[0], width = table.shape[1];
  HostTensor out = make(type);
  for (int64_t i = 0; i < in[1]->numel(); ++i) {
    int64_t row = checked_index(node, in[1]->data[static_cast<size_t>(i)], vocab, "token id");
    std::copy_n(table.data.begin() + row * width, width, out.data.begin() + i * width);
  }
  return out;
}

HostTensor cross_entropy(const ir::Node& node, const Operands& in, const ir::TensorType& type) {
  const HostTensor& logits = *in[0];
  int64_t classes = logits.shape.back();
  int64_t rows = in[1]->numel();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = logits.data.data() + r * classes;
    double row_max = *std::max_element(row, row + classes);
    double sum = 0;
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(row[j] - row_max);
    int64_t label = checked_index(node, in[1]->data[static_cast<size_t>(r)], classes, "label");
    total += std::log(sum) + row_max - row[label];
  }
  HostTensor out = make(type);
  out.data[0] = total / static_cast<double>(rows);
  return out;
}

HostTensor dropout(const ir::Node& node, const Operands& in, const ir::TensorType& type) {
  double p = node.attrs.get_float("p");
  auto seed = static_cast<uint64_t>(static_cast<int64_t>(in[1]->data[0]));
  auto offset = static_cast<uint64_t>(static_cast<int64_t>(in[2]->data[0]));
  HostTensor out = make(type);
  for (int64_t i = 0; i < in[0]->numel(); ++i) {
    bool keep =
        ops::philox_uniform(seed, offset + static_cast<uint64_t>(i)) >= static_cast<float>(p);
    out.data[static_cast<size_t>(i)] = keep ? in[0]->data[static_cast<size_t>(i)] / (1 - p) : 0;
  }
  return out;
}

HostTensor nonzero(const HostTensor& x) {
  HostTensor out;
  out.dtype = DType::kI64;
  auto rank = static_cast<int64_t>(x.shape.size());
  int64_t count = 0;
  std::vector<int64_t> index(x.shape.size(), 0);
  for (int64_t flat = 0; flat < x.numel(); ++flat) {
    if (x.data[static_cast<size_t>(flat)] != 0) {
      ++count;
      out.data.insert(out.data.end(), index.begin(), index.end());
    }
    for (size_t d = x.shape.size(); d-- > 0;) {
      if (++index[d] < x.shape[d]) break;
      index[d] = 0;
    }
  }
  out.shape = {count, rank};
  return out;
}

std::string print_text(const ir::Node& node, const HostTensor& x) {
  std::ostringstream text;
  text << node.attrs.get_string("message") << ": " << runtime::dtype_name(x.dtype)
       << ir::shape_text(x.shape) << " [";
  for (size_t i = 0; i < x.data.size(); ++i) text << (i ? ", " : "") << x.data[i];
  text << "]";
  return text.str();
}

using Unary = double (*)(double);
const std::map<std::string, Unary>& unary_functions() {
  static const std::map<std::string, Unary> functions = {
      {"neg", [](double x) { return -x; }},
      {"exp", [](double x) { return std::exp(x); }},
      {"log", [](double x) { return std::log(x); }},
      {"tanh", [](double x) { return std::tanh(x); }},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"relu", [](double x) { return x > 0 ? x : 0.0; }},
      {"gelu", gelu},
      {"erf", [](double x) { return std::erf(x); }},
      {"sqrt", [](double x) { return std::sqrt(x); }},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }},
      {"sin", [](double x) { return std::sin(x); }},
      {"cos", [](double x) { return std::cos(x); }},
      {"atan", [](double x) { return std::atan(x); }},
      {"log1p", [](double x) { return std::log1p(x); }},
      {"expm1", [](double x) { return std::expm1(x); }},
      {"floor", [](double x) { return std::floor(x); }},
      {"ceil", [](double x) { return std::ceil(x); }},
      {"trunc", [](double x) { return std::trunc(x); }},
      {"round", [](double x) { return std::nearbyint(x); }},  // ties to even
  };
  return functions;
}

using Binary = double (*)(double, double);
const std::map<std::string, Binary>& binary_functions() {
  static const std::map<std::string, Binary> functions = {
      {"add", [](double a, double b) { return a + b; }},
      {"sub", [](double a, double b) { return a - b; }},
      {"mul", [](double a, double b) { return a * b; }},
      {"div", [](double a, double b) { return a / b; }},
      {"pow", [](double a, double b) { return std::pow(a, b); }},
      {"lt", [](double a, double b) { return a < b ? 1.0 : 0.0; }},
      {"le", [](double a, double b) { return a <= b ? 1.0 : 0.0; }},
      {"gt", [](double a, double b) { return a > b ? 1.0 : 0.0; }},
      {"ge", [](double a, double b) { return a >= b ? 1.0 : 0.0; }},
      {"eq", [](double a, double b) { return a == b ? 1.0 : 0.0; }},
      {"ne", [](double a, double b) { return a != b ? 1.0 : 0.0; }},
      {"gelu_backward", gelu_backward},
      // NaN propagates, as in PyTorch.
      {"maximum", [](double a, double b) { return a != a || b != b ? NAN : std::max(a, b); }},
      {"minimum", [](double a, double b) { return a != a || b != b ? NAN : std::min(a, b); }},
      // Bool and integer operands are exact in double (|x| < 2^53).
      {"bitwise_and",
       [](double a, double b) {
         return static_cast<double>(static_cast<int64_t>(a) & static_cast<int64_t>(b));
       }},
      {"bitwise_or",
       [](double a, double b) {
         return static_cast<double>(static_cast<int64_t>(a) | static_cast<int64_t>(b));
       }},
      {"bitwise_xor",
       [](double a, double b) {
         return static_cast<double>(static_cast<int64_t>(a) ^ static_cast<int64_t>(b));
       }},
      // Integer division; a zero divisor divides by 1, as the kernels do.
      {"floor_divide", [](double a, double b) { return std::floor(a / (b == 0 ? 1 : b)); }},
      {"remainder",
       [](double a, double b) {
         double d = b == 0 ? 1 : b;
         return a - std::floor(a / d) * d;
       }},
      {"truncate_divide", [](double a, double b) { return std::trunc(a / (b == 0 ? 1 : b)); }},
      {"fmod", [](double a, double b) { return std::fmod(a, b == 0 ? 1 : b); }},
  };
  return functions;
}

HostTensor unrounded_elementwise(const Operands& in, const ir::TensorType& type,
                                 const std::function<double(const std::vector<double>&)>& f) {
  return elementwise(in, ir::TensorType{type.shape, DType::kF64, type.device}, f);
}

HostTensor with_dtype(HostTensor tensor, DType dtype) {
  tensor.dtype = dtype;
  for (double& value : tensor.data) value = finish(value, dtype);
  return tensor;
}

}  // namespace

HostTensorList evaluate_node(const ir::Node& node, const Operands& in,
                             const std::vector<ir::TensorType>& types,
                             const ReferenceOptions& options) {
  const std::string& op = node.op;
  const ir::TensorType& type = types.at(0);
  if (auto unary = unary_functions().find(op); unary != unary_functions().end()) {
    Unary f = unary->second;
    return {with_dtype(unrounded_elementwise(in, type, [f](const auto& a) { return f(a[0]); }),
                       type.dtype)};
  }
  if (auto binary = binary_functions().find(op); binary != binary_functions().end()) {
    Binary f = binary->second;
    return {with_dtype(
        unrounded_elementwise(in, type, [f](const auto& a) { return f(a[0], a[1]); }), type.dtype)};
  }
  if (op == "bitwise_not") {
    const bool is_bool = in[0]->dtype == DType::kBool;
    return {with_dtype(unrounded_elementwise(in, type,
                                             [is_bool](const auto& a) {
                                               return is_bool ? (a[0] != 0 ? 0.0 : 1.0)
                                                              : static_cast<double>(
                                                                    ~static_cast<int64_t>(a[0]));
                                             }),
                       type.dtype)};
  }
  if (op == "where") {
    return {with_dtype(
        unrounded_elementwise(in, type, [](const auto& a) { return a[0] != 0 ? a[1] : a[2]; }),
        type.dtype)};
  }
  if (op == "cast") {
    // Unlike other ops, a cast rounds floats to the target format.
    return {elementwise(in, type, [](const auto& a) { return a[0]; })};
  }
  if (op == "full") {
    HostTensor out = make(type);
    std::fill(out.data.begin(), out.data.end(), finish(node.attrs.get_float("value"), type.dtype));
    return {out};
  }
  if (op == "sum" || op == "mean" || op == "max") return {reduce(node, in, type)};
  if (op == "softmax" || op == "log_softmax") return {softmax(node, in, type)};
  if (op == "layer_norm") return {layer_norm(node, in, type)};
  if (op == "attention") return {attention(node, in, type)};
  if (op == "layer_norm_backward") return {layer_norm_backward(node, in, type)};
  if (op == "matmul") return {matmul(in, type, false)};
  if (op == "linear") return {linear(in, type)};
  if (op == "reshape") {
    HostTensor out = *in[0];
    out.shape = type.shape;
    return {out};
  }
  if (op == "transpose" || op == "permute") {
    return {permuted(*in[0], normalized_order(node, in), type)};
  }
  if (op == "slice") return {slice(node, in, type)};
  if (op == "concat") return {concat(node, in, type)};
  if (op == "embedding") return {embedding(node, in, type)};
  if (op == "cross_entropy") return {cross_entropy(node, in, type)};
  if (op == "mse_loss") {
    double total = 0;
    for (int64_t i = 0; i < in[0]->numel(); ++i) {
      double diff = in[0]->data[static_cast<size_t>(i)] - in[1]->data[static_cast<size_t>(i)];
      total += diff * diff;
    }
    HostTensor out = make(type);
    out.data[0] = total / static_cast<double>(in[0]->numel());
    return {out};
  }
  if (op == "dropout") return {dropout(node, in, type)};
  if (op == "copy_into") {
    return {with_dtype(unrounded_elementwise({in[1]}, type, [](const auto& a) { return a[0]; }),
                       type.dtype)};
  }
  if (op == "sgd_momentum_update") {
    HostTensor param = *in[0], buf = *in[2];
    double lr = in[3]->data[0], momentum = in[4]->data[0], decay = in[5]->data[0];
    for (size_t i = 0; i < param.data.size(); ++i) {
      double g = in[1]->data[i] + decay * param.data[i];
      buf.data[i] = momentum * buf.data[i] + g;
      param.data[i] -= lr * buf.data[i];
    }
    return {param, buf};
  }
  if (op == "adamw_update") {
    HostTensor param = *in[0], m = *in[2], v = *in[3];
    double lr = in[4]->data[0], beta1 = in[5]->data[0], beta2 = in[6]->data[0];
    double eps = in[7]->data[0], decay = in[8]->data[0], step = in[9]->data[0];
    double correction1 = 1 - std::pow(beta1, step), correction2 = 1 - std::pow(beta2, step);
    for (size_t i = 0; i < param.data.size(); ++i) {
      double g = in[1]->data[i];
      m.data[i] = beta1 * m.data[i] + (1 - beta1) * g;
      v.data[i] = beta2 * v.data[i] + (1 - beta2) * g * g;
      double adam = (m.data[i] / correction1) / (std::sqrt(v.data[i] / correction2) + eps);
      param.data[i] -= lr * (decay * param.data[i] + adam);
    }
    return {param, m, v};
  }
  if (op == "nonzero") return {nonzero(*in[0])};
  if (op == "print") {
    std::string text = print_text(node, *in[0]);
    if (options.print_sink) {
      options.print_sink(text);
    } else {
      std::cerr << text << "\n";
    }
    return {*in[0]};
  }
  throw Error(
      str_cat("reference: node '", node.name, "': op '", op, "' has no reference implementation"));
}

}  // namespace grove::compiler::reference
