// Gradient check of every differentiable op on sim's JIT kernels: each case of
// gradient_cases.h is trained by a Trainer (eager backend) on sim, and its
// backward's gradients are compared with central finite differences in f64 of
// its forward program on the reference interpreter, from the same params,
// buffers and generator state (tests/common/gradient_oracle.h). The oracle
// shares no code with the gradient rules, the backward's lowering or sim's
// kernels.
//
// Why the differences are not taken on sim: grove's kernels compute in f32
// registers whatever the tensors' dtype (Note [Kernel spec types],
// compiler/codegen/kernel_spec.h) and GEMMs take no f64, so differences of
// sim's forward carry f32 rounding (~1e-7 |loss| / h); the reference's carry
// ~1e-10. The cases run in f32; the bound covers sim's f32 gradients:
// |analytic - numeric| <= 1e-5 * max(1, |numeric|) (worst measured: 3.4e-7,
// layer_norm), and the forward's loss within 1e-5 * max(1, |loss|) of the
// reference's.
//
// The implicit-generator dropout case checks that the backward masks with the
// forward's numbers (Note [Generator state is read once]): the oracle reads
// the generator state the step left in the trainer's buffers, which is the
// forward's only when the backward draws nothing (with the old recomputed
// offset, the loss check failed: sim 0.859, the reference -1.294).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

#include "runtime/philox_generator.h"
#include "tests/common/gradient_oracle.h"
#include "tests/common/test_util.h"
#include "tests/compiler/autodiff/gradient_cases.h"
#include "training/trainer.h"

namespace grove::compiler::autodiff {
namespace {

using ir::DType;
using runtime::Tensor;

constexpr double kGradientBound = 1e-5;
constexpr double kLossBound = 1e-5;

void check_on_sim(const GradientCase& test_case) {
  CaseModel built = build_case_model(test_case, runtime::kSimDevice, DType::kF32);
  training::Trainer trainer(built.model, built.loss, {.backend = "eager"});

  GROVE_SEEDED_RNG(rng);
  std::uniform_real_distribution<double> uniform(test_case.range.low, test_case.range.high);
  std::bernoulli_distribution flip(0.5);
  std::vector<std::string> names;
  for (ir::ValueId param : trainer.programs().params) {
    names.push_back(trainer.programs().forward.value(param).name);
    std::vector<float> data(static_cast<size_t>(trainer.state(names.back()).numel()));
    for (float& value : data) {
      value = static_cast<float>(uniform(rng));
      if (test_case.range.signed_ && flip(rng)) value = -value;
    }
    Tensor state = trainer.state(names.back());
    state.copy_from_host(data.data());
  }
  runtime::default_generator(runtime::kSimDevice).manual_seed(4321);
  const double loss = trainer.forward_backward({}).to_doubles().at(0);
  testing::GradientOracle oracle(trainer, {});
  const double expected_loss = oracle.loss();
  EXPECT_LE(std::abs(loss - expected_loss), kLossBound * std::max(1.0, std::abs(expected_loss)))
      << "sim's forward gives loss " << loss << ", the reference " << expected_loss;

  double worst = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    std::vector<double> gradient = trainer.state(gradient_buffer_name(names[i])).to_doubles();
    for (size_t j = 0; j < gradient.size(); ++j) {
      const double numeric = oracle.derivative(i, j);
      const double error = std::abs(gradient[j] - numeric) / std::max(1.0, std::abs(numeric));
      worst = std::max(worst, error);
      EXPECT_LE(error, kGradientBound)
          << names[i] << "[" << j << "]: sim " << gradient[j] << ", f64 differences " << numeric;
    }
  }
  std::cout << test_case.name << ": max relative error " << worst << "\n";
}

class SimGradientCheck : public ::testing::TestWithParam<GradientCase> {};

TEST_P(SimGradientCheck, BackwardMatchesF64FiniteDifferencesOfTheForward) {
  check_on_sim(GetParam());
}

INSTANTIATE_TEST_SUITE_P(EveryDifferentiableOp, SimGradientCheck,
                         ::testing::ValuesIn(gradient_cases()),
                         [](const ::testing::TestParamInfo<GradientCase>& info) {
                           return info.param.name;
                         });

// A new op with a gradient rule fails here until it has a case in
// gradient_cases.cc, so it cannot skip the check on sim.
TEST(SimGradientCheckTable, EveryOpWithAGradientHasACase) {
  EXPECT_EQ(ops_without_a_case(), std::set<std::string>{});
}

}  // namespace
}  // namespace grove::compiler::autodiff
