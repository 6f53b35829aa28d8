// Gradient check of every differentiable op: the backward program's gradients
// (run on the float64 reference interpreter) against central finite
// differences of the forward program.
//
// Bound: for every element of every param, |analytic - numeric| <=
// kRelativeBound * max(1, |numeric|), kRelativeBound = 1e-6, with the
// central-difference step h = 1e-5 * max(1, |x|). (In float64 the
// truncation error is ~h^2 and the rounding error ~1e-16 / h, both ~1e-10.)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <random>
#include <set>

#include "compiler/autodiff/gradient_rules.h"
#include "compiler/autodiff/training_programs.h"
#include "compiler/ir/builder.h"
#include "compiler/ops/op_registry.h"
#include "compiler/training/reference_training.h"

namespace grove::compiler::autodiff {
namespace {

using ir::DType;
using ir::ProgramBuilder;
using ir::ValueId;
using reference::HostTensorList;

constexpr double kRelativeBound = 1e-6;
constexpr double kStep = 1e-5;

// Every param of a case is filled uniformly from [low, high]; with `signed_`,
// each value's sign is flipped at random (so [0.1, 1] keeps away from 0).
struct Range {
  double low = -1;
  double high = 1;
  bool signed_ = false;
};

struct GradientCase {
  std::string name;
  std::string op;  // the op whose rule this case checks
  std::function<ValueId(ProgramBuilder&)> build;
  Range range;
};

ValueId p(ProgramBuilder& b, const std::string& name, const ir::Shape& shape,
          DType dtype = DType::kF32) {
  return b.param(name, shape, dtype, ir::zeros_init());  // values are set by the test
}

ValueId ids(ProgramBuilder& b, const ir::Shape& shape, int64_t limit, uint64_t seed) {
  return b.buffer("ids", shape, DType::kI64, ir::uniform_init(0, static_cast<double>(limit), seed));
}

ValueId random_mask(ProgramBuilder& b, const ir::Shape& shape) {
  ValueId noise = b.buffer("noise", shape, DType::kF32, ir::normal_init(1, 77));
  return b.compare("gt", noise, b.full(0.0));
}

const Range kPositive{0.5, 2.0, false};
const Range kAwayFromZero{0.1, 1.0, true};

std::vector<GradientCase> cases() {
  std::vector<GradientCase> all;
  auto add = [&](std::string name, std::string op, std::function<ValueId(ProgramBuilder&)> build,
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
    return b.mul(p(b, "x", {2, 3}), b.full(1.5, {2, 3}));
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
  add("copy_into_broadcast", "copy_into", [](auto& b) {
    ValueId destination = b.buffer("destination", {2, 3}, DType::kF32, ir::normal_init(1, 3));
    return b.copy_into(destination, b.tanh(p(b, "x", {3})));
  });
  add("print", "print", [](auto& b) { return b.print(p(b, "x", {2}), "gradient check"); });
  return all;
}

class GradientCheck : public ::testing::TestWithParam<GradientCase> {};

TEST_P(GradientCheck, BackwardMatchesCentralFiniteDifferences) {
  const GradientCase& test_case = GetParam();
  ProgramBuilder b(test_case.name);
  ValueId y = test_case.build(b);
  // A random projection makes every element of y matter differently.
  const ir::TensorType y_type = b.type(y);
  ValueId projection = b.buffer("projection", y_type.shape, y_type.dtype, ir::normal_init(1, 99));
  ValueId loss = b.sum(b.mul(y, projection), {}, false, "loss");
  b.output(y);
  ir::Program model = b.build();
  TrainingPrograms programs = build_training_programs(model, loss);

  const uint32_t seed = 1234;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(test_case.range.low, test_case.range.high);
  std::bernoulli_distribution flip(0.5);
  HostTensorList inputs = reference::initial_state(programs.forward);
  for (ValueId param : programs.params) {
    auto position = static_cast<size_t>(programs.forward.input_position(param));
    for (double& value : inputs[position].data) {
      value = uniform(rng);
      if (test_case.range.signed_ && flip(rng)) value = -value;
    }
  }
  training::ForwardBackward result = training::reference_forward_backward(programs, inputs);
  ASSERT_EQ(result.gradients.size(), programs.params.size());

  double worst = 0;
  for (size_t i = 0; i < programs.params.size(); ++i) {
    const std::string& name = programs.forward.value(programs.params[i]).name;
    EXPECT_TRUE(programs.param_has_gradient[i]) << name;
    auto position = static_cast<size_t>(programs.forward.input_position(programs.params[i]));
    for (size_t j = 0; j < inputs[position].data.size(); ++j) {
      HostTensorList shifted = inputs;
      double x = inputs[position].data[j];
      double h = kStep * std::max(1.0, std::abs(x));
      shifted[position].data[j] = x + h;
      double plus =
          reference::reference_run(programs.forward, shifted)[programs.loss_output].data[0];
      shifted[position].data[j] = x - h;
      double minus =
          reference::reference_run(programs.forward, shifted)[programs.loss_output].data[0];
      double numeric = (plus - minus) / (2 * h);
      double analytic = result.gradients[i].data[j];
      double error = std::abs(analytic - numeric) / std::max(1.0, std::abs(numeric));
      worst = std::max(worst, error);
      EXPECT_LE(error, kRelativeBound)
          << name << "[" << j << "]: analytic " << analytic << ", numeric " << numeric;
    }
  }
  RecordProperty("max_relative_error", std::to_string(worst));
  std::cout << test_case.name << ": max relative error " << worst << " over "
            << programs.params.size() << " params\n";
}

INSTANTIATE_TEST_SUITE_P(EveryDifferentiableOp, GradientCheck, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<GradientCase>& info) {
                           return info.param.name;
                         });

TEST(GradientRules, EveryOpHasARuleAndAGradientCheckUnlessNonDifferentiable) {
  register_gradients();
  std::set<std::string> checked;
  for (const GradientCase& test_case : cases()) checked.insert(test_case.op);
  const ops::OpRegistry& registry = ops::OpRegistry::global();
  for (const std::string& op : registry.op_names()) {
    bool non_differentiable = non_differentiable_ops().count(op) != 0;
    EXPECT_EQ(static_cast<bool>(registry.get(op).gradient), !non_differentiable) << op;
    if (!non_differentiable) {
      EXPECT_TRUE(checked.count(op)) << op << " has no gradient check";
    }
  }
  for (const auto& [op, reason] : non_differentiable_ops()) {
    EXPECT_NE(registry.find(op), nullptr) << op << " is listed but not registered";
  }
}

}  // namespace
}  // namespace grove::compiler::autodiff
