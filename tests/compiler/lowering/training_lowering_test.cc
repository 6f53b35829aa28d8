// The training programs of the benchmark models (forward, backward and the
// optimizer step): kernel counts per call, and the metadata the tree relies on.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <map>

#include "compiler/autodiff/training_programs.h"
#include "compiler/lowering/lower.h"
#include "runtime/device_context.h"
#include "tests/common/test_util.h"
#include "tests/training/benchmark_models.h"
#include "training/optimizer.h"

namespace grove {
namespace {

using compiler::lowering::KernelReport;
using compiler::lowering::LoweredProgram;
using runtime::kSimDevice;
using training::OptimizerKind;

struct LoweredTraining {
  compiler::autodiff::TrainingPrograms programs;
  training::OptimizerProgram optimizer;
  LoweredProgram forward, backward, step;
};

LoweredProgram lower_training(const compiler::ir::Program& program) {
  compiler::lowering::LowerOptions options;
  options.mode = compiler::ops::ExecMode::kTraining;
  return compiler::lowering::lower(program, options);
}

LoweredTraining lower_all(const training::testing::ModelWithLoss& model, OptimizerKind kind) {
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model.program, model.loss);
  training::OptimizerProgram optimizer =
      training::build_optimizer_program(programs.forward, programs.params, kind);
  LoweredProgram forward = lower_training(programs.forward);
  LoweredProgram backward = lower_training(programs.backward);
  LoweredProgram step = lower_training(optimizer.program);
  return LoweredTraining{std::move(programs), std::move(optimizer), forward, backward, step};
}

std::map<std::string, int> histogram(const KernelReport& report) {
  std::map<std::string, int> counts;
  for (const std::string& name : report.kernels) ++counts[name];
  return counts;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

void print(const std::string& what, const LoweredTraining& lowered) {
  std::cout << what << " forward:  " << lowered.forward.kernel_report().str() << "\n"
            << what << " backward: " << lowered.backward.kernel_report().str() << "\n"
            << what << " optimizer: " << lowered.step.kernel_report().str() << "\n";
}

// The backward's mutated inputs are exactly the gradient buffers, and the
// optimizer step's exactly the params and their state buffers.
void expect_exact_mutations(const LoweredTraining& lowered) {
  const compiler::ir::Program& backward = lowered.programs.backward;
  std::vector<size_t> gradient_positions;
  for (size_t i = 0; i < backward.inputs().size(); ++i) {
    if (backward.value(backward.inputs()[i]).name.rfind("grad.", 0) == 0) {
      gradient_positions.push_back(i);
    }
  }
  EXPECT_EQ(lowered.backward.function().mutated_input_indices, gradient_positions);
  EXPECT_EQ(lowered.step.function().mutated_input_indices,
            training::mutated_input_positions(lowered.optimizer.program));
  // Each param and its state buffers (SGD: momentum; AdamW: exp_avg, exp_avg_sq).
  EXPECT_EQ(lowered.step.function().mutated_input_indices.size(),
            (1 + lowered.optimizer.state.at(0).size()) * lowered.optimizer.params.size());
}

// Note [Results written into their destination]: every weight and bias
// gradient is written by its GEMM straight into its buffer (no copy_into
// kernel); the 32 SGD updates are one multi-part kernel.
TEST(TrainingLowering, MlpStepWritesGradientsInPlaceAndUpdatesEveryParamInOneKernel) {
  LoweredTraining lowered =
      lower_all(training::testing::mlp_with_mse(32, kSimDevice), OptimizerKind::kSgdMomentum);
  print("mlp16x512 b32", lowered);
  if (std::getenv("GROVE_TEST_DESCRIBE")) std::cout << lowered.backward.describe();
  KernelReport forward = lowered.forward.kernel_report();
  KernelReport backward = lowered.backward.kernel_report();
  KernelReport step = lowered.step.kernel_report();
  EXPECT_EQ(forward.library_gemms, 16u) << forward.str();
  // Each GEMM applies bias and gelu and keeps the pre-activation for the
  // backward (Note [GEMM auxiliary output]): only the loss is a kernel.
  EXPECT_EQ(forward.kernels.size(), 1u) << forward.str();
  EXPECT_EQ(histogram(backward)["copy_into"], 0) << backward.str();
  EXPECT_EQ(histogram(backward)["multi_copy_into"], 0) << backward.str();
  // Per layer two GEMMs and nothing else: the input gradient's GEMM applies
  // gelu's gradient (Note [GEMM gelu gradients]) and the weight gradient's
  // GEMM also yields the bias gradient (Note [Bias gradients from
  // weight-gradient GEMMs]). The kernels left: the loss's gradient with the
  // last gelu's (its scale computed in it: Note [Small values computed per
  // element]), and the gelu outputs recomputed for the weight gradients (one
  // multi-part kernel).
  EXPECT_EQ(backward.kernels.size(), 2u) << backward.str();
  EXPECT_EQ(backward.library_gemms, 31u) << backward.str();
  const std::string description = lowered.backward.describe();
  EXPECT_EQ(occurrences(description, "+dgelu"), 15u) << description;
  EXPECT_EQ(occurrences(description, "+bias_grad_a"), 16u) << description;
  ASSERT_EQ(step.kernels.size(), 1u) << step.str();
  EXPECT_EQ(step.kernels[0], "multi_sgd_momentum_update");
  expect_exact_mutations(lowered);
}

TEST(TrainingLowering, GptStepUpdatesEveryParamInOneKernelWithExactMutations) {
  LoweredTraining lowered = lower_all(training::testing::gpt_with_next_token_loss(2, 8, kSimDevice),
                                      OptimizerKind::kSgdMomentum);
  print("gpt4x256 b2 T8", lowered);
  if (std::getenv("GROVE_TEST_DESCRIBE")) std::cout << lowered.backward.describe();
  KernelReport step = lowered.step.kernel_report();
  // Every param's update in one launch: the hyper-parameters are passed once
  // and the in-place outputs cost no pointer (Note [Multi-part kernel
  // arguments]), so the 52 updates fit cuda's parameter space.
  ASSERT_EQ(step.kernels.size(), 1u) << step.str();
  EXPECT_EQ(step.kernels[0], "multi_sgd_momentum_update");
  expect_exact_mutations(lowered);
}

TEST(TrainingLowering, AdamWStepOfEitherModelIsOneKernel) {
  using training::testing::ModelWithLoss;
  for (const ModelWithLoss& model :
       {training::testing::mlp_with_mse(32, kSimDevice),
        training::testing::gpt_with_next_token_loss(2, 8, kSimDevice)}) {
    LoweredTraining lowered = lower_all(model, OptimizerKind::kAdamW);
    KernelReport step = lowered.step.kernel_report();
    ASSERT_EQ(step.kernels.size(), 1u) << model.program.name() << ": " << step.str();
    EXPECT_EQ(step.kernels[0], "multi_adamw_update");
    expect_exact_mutations(lowered);
  }
}

// GROVE_HORIZONTAL_FUSION=0 keeps one update kernel per param (A/B timing).
TEST(TrainingLowering, HorizontalFusionSwitchKeepsOneKernelPerParam) {
  testing::ScopedEnv env("GROVE_HORIZONTAL_FUSION", "0");
  LoweredTraining lowered =
      lower_all(training::testing::mlp_with_mse(32, kSimDevice), OptimizerKind::kSgdMomentum);
  KernelReport step = lowered.step.kernel_report();
  EXPECT_EQ(step.kernels.size(), lowered.optimizer.params.size()) << step.str();
  for (const std::string& name : step.kernels) {
    EXPECT_EQ(name, "sgd_momentum_update");
  }
  expect_exact_mutations(lowered);
}

}  // namespace
}  // namespace grove
