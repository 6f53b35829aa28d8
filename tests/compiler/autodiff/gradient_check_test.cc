// Gradient check of every differentiable op (the cases of gradient_cases.h):
// the backward program's gradients (run on the float64 reference interpreter)
// against central finite differences of the forward program.
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
#include "tests/compiler/autodiff/gradient_cases.h"
#include "training/reference_training.h"

namespace grove::compiler::autodiff {
namespace {

using ir::DType;
using ir::ValueId;
using reference::HostTensorList;

constexpr double kRelativeBound = 1e-6;
constexpr double kStep = 1e-5;

class GradientCheck : public ::testing::TestWithParam<GradientCase> {};

TEST_P(GradientCheck, BackwardMatchesCentralFiniteDifferences) {
  const GradientCase& test_case = GetParam();
  CaseModel built = build_case_model(test_case, runtime::kCpuDevice, DType::kF32);
  TrainingPrograms programs = build_training_programs(built.model, built.loss);

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

INSTANTIATE_TEST_SUITE_P(EveryDifferentiableOp, GradientCheck,
                         ::testing::ValuesIn(gradient_cases()),
                         [](const ::testing::TestParamInfo<GradientCase>& info) {
                           return info.param.name;
                         });

TEST(GradientRules, EveryOpHasARuleAndAGradientCheckUnlessNonDifferentiable) {
  register_gradients();
  std::set<std::string> checked;
  for (const GradientCase& test_case : gradient_cases()) checked.insert(test_case.op);
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
