// Short training runs of both benchmark models on the float64 reference:
// forward, backward and the in-place optimizer step lower the loss by a
// stated factor on a small synthetic task.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "tests/training/benchmark_models.h"
#include "training/reference_training.h"

namespace grove::training {
namespace {

using compiler::reference::HostTensorList;

void print_curve(const std::string& name, const std::vector<double>& losses) {
  std::cout << name << " loss:";
  for (double loss : losses) std::cout << " " << loss;
  std::cout << "\n";
}

// mlp16x512, batch 8, SGD with momentum on a fixed synthetic regression:
// each target row is one fixed vector (|N(0, 0.5)| per feature: the model
// ends in a GELU, so targets are kept in its range) plus N(0, 0.05) noise
// per sample.
TEST(TrainingRun, MlpWithSgdMomentumLowersTheLossTwentyfoldIn10Steps) {
  testing::ModelWithLoss model = testing::mlp_with_mse(/*batch=*/8);
  ReferenceTrainer trainer(model.program, model.loss, OptimizerKind::kSgdMomentum);
  const uint64_t seed = 21;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  compiler::reference::HostTensor x = testing::normal_tensor({8, 512}, 1.0, rng);
  compiler::reference::HostTensor offsets = testing::normal_tensor({512}, 0.5, rng);
  compiler::reference::HostTensor target = testing::normal_tensor({8, 512}, 0.05, rng);
  for (size_t i = 0; i < target.data.size(); ++i) {
    target.data[i] += std::abs(offsets.data[i % 512]);
  }
  // mse_loss averages over all 8 x 512 elements, so per-element gradients
  // are small and the learning rate is large.
  Hyperparameters hyper;
  hyper.lr = 24;
  hyper.momentum = 0.3;
  std::vector<double> losses;
  for (int step = 0; step < 10; ++step) losses.push_back(trainer.step({x, target}, hyper));
  print_curve("mlp16x512", losses);
  EXPECT_LT(losses.back(), losses.front() / 20);
  EXPECT_EQ(trainer.steps_taken(), 10);
}

// gpt4x256, batch 1, seq 8, AdamW on a repeating token pattern.
TEST(TrainingRun, GptWithAdamWLowersTheNextTokenLossTwentyfoldIn12Steps) {
  testing::ModelWithLoss model = testing::gpt_with_next_token_loss(/*batch=*/1, /*seq=*/8);
  ReferenceTrainer trainer(model.program, model.loss, OptimizerKind::kAdamW);
  compiler::reference::HostTensor tokens = testing::repeating_tokens(1, 8, {17, 301, 5, 42});
  Hyperparameters hyper;
  hyper.lr = 2e-3;
  hyper.weight_decay = 0.01;
  std::vector<double> losses;
  for (int step = 0; step < 12; ++step) losses.push_back(trainer.step({tokens}, hyper));
  print_curve("gpt4x256", losses);
  EXPECT_LT(losses.back(), losses.front() / 20);
}

}  // namespace
}  // namespace grove::training
