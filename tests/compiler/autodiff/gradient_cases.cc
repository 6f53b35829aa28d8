#include "tests/compiler/autodiff/gradient_cases.h"

#include "compiler/autodiff/gradient_rules.h"
#include "compiler/ops/op_registry.h"

namespace grove::compiler::autodiff {
namespace {

using ir::DType;
using ir::ValueId;

ValueId p(CaseBuilder& b, const std::string& name, const ir::Shape& shape) {
  return b.param(name, shape, b.dtype, ir::zeros_init());  // values are set by the test
}

ValueId ids(CaseBuilder& b, const ir::Shape& shape, int64_t limit, uint64_t seed) {
  return b.buffer("ids", shape, DType::kI64, ir::uniform_init(0, static_cast<double>(limit), seed));
}

ValueId random_mask(CaseBuilder& b, const ir::Shape& shape) {
  ValueId noise = b.buffer("noise", shape, DType::kF32, ir::normal_init(1, 77));
  return b.compare("gt", noise, b.full(0.0));
}

const Range kPositive{0.5, 2.0, false};
const Range kAwayFromZero{0.1, 1.0, true};

std::vector<GradientCase> make_cases() {
  std::vector<GradientCase> all;
  auto add = [&](std::string name, std::string op, std::function<ValueId(CaseBuilder&)> build,
                 Range range = {}) {
    all.push_back({std::move(name), std::move(op), std::move(build), range});
  };
  add("add_same_shape", "add", [](auto& b) { return b.add(p(b, "a", {2, 3}), p(b, "b", {2, 3})); });
  add("add_broadcast_row", "add", [](auto& b) { return b.add(p(b, "a", {2, 3}), p(b, "b", {3})); });
  add("add_broadcast_both", "add", [](auto& b) {
    return b.add(p(b, "a", {2, 1, 3}), p(b, "b", {4, 1}));
  });
  add("sub_broadcast_column", "sub", [](auto& b) {
    return b.sub(p(b, "a", {2, 3}), p(b, "b", {2, 1}));
  });
  add("mul_broadcast", "mul", [](auto& b) { return b.mul(p(b, "a", {3, 1}), p(b, "b", {1, 4})); });
  add("mul_same_operand", "mul", [](auto& b) {
    ValueId a = p(b, "a", {2, 3});
    return b.mul(a, a);
  });
  add(
      "div_broadcast", "div",
      [](auto& b) {
        return b.div(p(b, "a", {2, 3}), p(b, "b", {3}));
      },
      kPositive);
  add(
      "pow", "pow",
      [](auto& b) {
        return b.pow(p(b, "a", {2, 3}), p(b, "b", {2, 3}));
      },
      kPositive);
  add("neg", "neg", [](auto& b) { return b.neg(p(b, "x", {2, 3})); });
  add("exp", "exp", [](auto& b) { return b.exp(p(b, "x", {2, 3})); });
  add(
      "log", "log",
      [](auto& b) {
        return b.log(p(b, "x", {2, 3}));
      },
      kPositive);
  add("tanh", "tanh", [](auto& b) { return b.tanh(p(b, "x", {2, 3})); });
  add("sigmoid", "sigmoid", [](auto& b) { return b.sigmoid(p(b, "x", {2, 3})); });
  add(
      "relu", "relu",
      [](auto& b) {
        return b.relu(p(b, "x", {3, 4}));
      },
      kAwayFromZero);
  add(
      "gelu", "gelu",
      [](auto& b) {
        return b.gelu(p(b, "x", {3, 4}));
      },
      Range{-3, 3});
  add(
      "erf", "erf",
      [](auto& b) {
        return b.op1("erf", {p(b, "x", {3, 4})});
      },
      Range{-2, 2});
  add(
      "sqrt", "sqrt",
      [](auto& b) {
        return b.sqrt(p(b, "x", {2, 3}));
      },
      kPositive);
  add(
      "rsqrt", "rsqrt",
      [](auto& b) {
        return b.rsqrt(p(b, "x", {2, 3}));
      },
      kPositive);
  for (const char* op : {"sin", "cos", "atan", "expm1"}) {
    add(
        op, op,
        [op](auto& b) {
          return b.op1(op, {p(b, "x", {2, 3})});
        },
        Range{-2, 2});
  }
  add(
      "log1p", "log1p",
      [](auto& b) {
        return b.op1("log1p", {p(b, "x", {2, 3})});
      },
      kPositive);
  // Away from the integers and half-integers, where they jump.
  for (const char* op : {"floor", "ceil", "round", "trunc"}) {
    add(
        op, op,
        [op](auto& b) {
          return b.op1(op, {p(b, "x", {2, 3})});
        },
        Range{0.1, 0.4, true});
  }
  for (const char* op : {"maximum", "minimum"}) {
    add(op, op, [op](auto& b) { return b.op1(op, {p(b, "a", {2, 3}), p(b, "b", {3})}); });
  }
  add("where_broadcast", "where", [](auto& b) {
    return b.where(random_mask(b, {2, 3}), p(b, "a", {2, 3}), p(b, "b", {3}));
  });
  add("cast_f32_to_f64", "cast", [](auto& b) { return b.cast(p(b, "x", {2, 3}), DType::kF64); });
  add("full_operand", "full", [](auto& b) {
    return b.mul(p(b, "x", {2, 3}), b.full(1.5, {2, 3}, b.dtype));
  });
  add("sum_one_dim", "sum", [](auto& b) { return b.sum(p(b, "x", {2, 3, 4}), {1}); });
  add("sum_all", "sum", [](auto& b) { return b.sum(p(b, "x", {2, 3}), {}); });
  add("mean_keepdim", "mean", [](auto& b) { return b.mean(p(b, "x", {2, 3, 4}), {0, 2}, true); });
  add("max_last_dim", "max", [](auto& b) { return b.max(p(b, "x", {3, 5}), {-1}); });
  add(
      "softmax_last", "softmax",
      [](auto& b) {
        return b.softmax(p(b, "x", {2, 5}), -1);
      },
      Range{-2, 2});
  add(
      "softmax_first", "softmax",
      [](auto& b) {
        return b.softmax(p(b, "x", {3, 2}), 0);
      },
      Range{-2, 2});
  add(
      "log_softmax_middle", "log_softmax",
      [](auto& b) {
        return b.log_softmax(p(b, "x", {2, 4, 3}), 1);
      },
      Range{-2, 2});
  add("layer_norm", "layer_norm", [](auto& b) {
    return b.layer_norm(p(b, "x", {2, 3, 5}), p(b, "w", {5}), p(b, "bias", {5}), 1e-5);
  });
  add("cross_entropy", "cross_entropy", [](auto& b) {
    return b.cross_entropy(p(b, "logits", {2, 3, 5}), ids(b, {2, 3}, 5, 11));
  });
  add("mse_loss", "mse_loss", [](auto& b) {
    return b.mse_loss(p(b, "prediction", {2, 3}), p(b, "target", {2, 3}));
  });
  add("matmul_2d", "matmul", [](auto& b) {
    return b.matmul(p(b, "a", {3, 4}), p(b, "b", {4, 2}));
  });
  add("matmul_broadcast_batch", "matmul", [](auto& b) {
    return b.matmul(p(b, "a", {2, 1, 3, 4}), p(b, "b", {3, 4, 5}));
  });
  add("matmul_batched_by_matrix", "matmul", [](auto& b) {
    return b.matmul(p(b, "a", {2, 3, 4}), p(b, "b", {4, 2}));
  });
  add("linear_with_bias_3d", "linear", [](auto& b) {
    return b.linear(p(b, "x", {2, 3, 4}), p(b, "w", {5, 4}), p(b, "bias", {5}));
  });
  add("linear_vector_no_bias", "linear", [](auto& b) {
    return b.linear(p(b, "x", {4}), p(b, "w", {3, 4}), ir::kNoValue);
  });
  add("reshape", "reshape", [](auto& b) { return b.reshape(b.exp(p(b, "x", {2, 6})), {3, -1}); });
  add("transpose", "transpose", [](auto& b) { return b.transpose(p(b, "x", {2, 3, 4}), 0, 2); });
  add("permute", "permute", [](auto& b) { return b.permute(p(b, "x", {2, 3, 4}), {2, 0, 1}); });
  add("slice_middle", "slice", [](auto& b) { return b.slice(p(b, "x", {4, 5}), 1, 1, 3); });
  add("slice_negative_start", "slice", [](auto& b) {
    return b.slice(p(b, "x", {4, 5}), 0, -2, 100);
  });
  add("concat", "concat", [](auto& b) {
    return b.concat({p(b, "a", {2, 3}), p(b, "b", {2, 1}), p(b, "c", {2, 2})}, 1);
  });
  add("embedding", "embedding", [](auto& b) {
    return b.embedding(p(b, "table", {5, 3}), ids(b, {2, 4}, 5, 5));
  });
  add("dropout", "dropout", [](auto& b) {
    ValueId seed = b.buffer("seed", {}, DType::kI64, ir::constant_init(7));
    ValueId offset = b.buffer("offset", {}, DType::kI64, ir::constant_init(3));
    return b.dropout(p(b, "x", {4, 5}), seed, offset, 0.3);
  });
  // Draws from the implicit generator: the backward must mask with the
  // forward's numbers (Note [Generator state is read once]).
  add("dropout_implicit_generator", "dropout", [](auto& b) {
    return b.dropout(p(b, "x", {4, 5}), 0.3, "drop");
  });
  // The scalar's gradient is one reduction over merged dims with the dropout
  // of the gradient fused in (Note [Row-major index through merged dims]; the
  // fuzzer's seed 1181).
  add("dropout_of_broadcast_scalar", "dropout", [](auto& b) {
    ValueId x = b.buffer("x", {3, 2}, b.dtype, ir::normal_init(1, 5));
    return b.dropout(b.mul(x, p(b, "s", {})), 0.3, "drop");
  });
  // Reductions over merged dims whose prologue reads a value broadcast across
  // some of them, or holds a dropout over non-adjacent dims (Note [Reductions
  // read what they can index]; the fuzzer's seeds 20869 and 23279).
  add("broadcast_operand_of_a_merged_reduction", "mul", [](auto& b) {
    ValueId x = b.buffer("x", {2, 5, 3}, b.dtype, ir::normal_init(1, 5));
    ValueId factor = b.buffer("factor", {3}, b.dtype, ir::normal_init(1, 6));
    return b.mul(factor, b.mul(p(b, "s", {}), b.exp(x)));
  });
  add("dropout_over_non_adjacent_dims", "dropout", [](auto& b) {
    ValueId x = b.buffer("x", {4, 3, 5}, b.dtype, ir::normal_init(1, 5));
    return b.dropout(b.mul(x, p(b, "s", {3, 1})), 0.5, "drop");
  });
  // The row of a sum over every dim of log_softmax's gradient holds the
  // backward's keepdim sum over the last dim, read broadcast across the
  // merged dims (the gradient fuzzer's seed 60251: "keeps needing relaid
  // copies").
  add("log_softmax_summed_over_every_dim", "log_softmax", [](auto& b) {
    ValueId x = b.buffer("x", {2, 4, 3}, b.dtype, ir::normal_init(1, 7));
    return b.log_softmax(b.add(x, p(b, "s", {})), -1);
  });
  add("copy_into_broadcast", "copy_into", [](auto& b) {
    ValueId destination = b.buffer("destination", {2, 3}, b.dtype, ir::normal_init(1, 3));
    return b.copy_into(destination, b.tanh(p(b, "x", {3})));
  });
  add("print", "print", [](auto& b) { return b.print(p(b, "x", {2}), "gradient check"); });
  return all;
}

}  // namespace

const std::vector<GradientCase>& gradient_cases() {
  static const std::vector<GradientCase> all = make_cases();
  return all;
}

CaseModel build_case_model(const GradientCase& test_case, runtime::Device device, ir::DType dtype) {
  CaseBuilder b(test_case.name, device, dtype);
  ValueId y = test_case.build(b);
  const ir::TensorType y_type = b.type(y);
  ValueId projection = b.buffer("projection", y_type.shape, y_type.dtype, ir::normal_init(1, 99));
  ValueId loss = b.sum(b.mul(y, projection), {}, false, "loss");
  b.output(y);
  return {b.build(), loss};
}

std::set<std::string> ops_without_a_case() {
  register_gradients();
  std::set<std::string> checked;
  for (const GradientCase& test_case : gradient_cases()) checked.insert(test_case.op);
  std::set<std::string> missing;
  const ops::OpRegistry& registry = ops::OpRegistry::global();
  for (const std::string& op : registry.op_names()) {
    if (registry.get(op).gradient && checked.count(op) == 0) missing.insert(op);
  }
  return missing;
}

}  // namespace grove::compiler::autodiff
