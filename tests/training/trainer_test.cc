// Trainer on `sim` with the "eager" backend: loss curves match the float64
// reference trainer, and params, gradients and optimizer state keep their
// addresses across steps.
#include "training/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "compiler/ir/builder.h"
#include "runtime/device_context.h"
#include "tests/training/benchmark_models.h"
#include "training/reference_training.h"

namespace grove::training {
namespace {

using compiler::ir::DType;
using compiler::ir::ValueId;
using runtime::kSimDevice;
using runtime::Tensor;

Tensor to_device(const compiler::reference::HostTensor& host) {
  if (host.dtype == DType::kI64) {
    std::vector<int64_t> values(host.data.begin(), host.data.end());
    return Tensor::from_vector(values, host.shape, kSimDevice);
  }
  std::vector<float> values(host.data.begin(), host.data.end());
  return Tensor::from_vector(values, host.shape, kSimDevice);
}

// Runs `steps` steps of both trainers; expects each eager loss within
// `tolerance` (relative) of the reference's, and returns both curves.
void expect_matching_curves(const compiler::ir::Program& model, ValueId loss, OptimizerKind kind,
                            const compiler::reference::HostTensorList& inputs,
                            const Hyperparameters& hyper, int steps, double tolerance,
                            const std::string& name) {
  ReferenceTrainer reference_trainer(model, loss, kind);
  Trainer trainer(model, loss, {.backend = "eager", .optimizer = kind});
  compiler::TensorList device_inputs;
  for (const compiler::reference::HostTensor& input : inputs)
    device_inputs.push_back(to_device(input));
  std::cout << name << " (reference / eager):";
  for (int step = 0; step < steps; ++step) {
    double expected = reference_trainer.step(inputs, hyper);
    double got = trainer.step(device_inputs, hyper).to_doubles().at(0);
    std::cout << " " << expected << "/" << got;
    EXPECT_NEAR(got, expected, tolerance * std::abs(expected)) << name << " step " << step;
  }
  std::cout << "\n";
}

compiler::ir::Program small_mlp(ValueId* loss) {
  compiler::ir::ProgramBuilder b("small_mlp", kSimDevice);
  ValueId x = b.input("x", {4, 6});
  ValueId w1 = b.param("fc1.weight", {8, 6}, DType::kF32, compiler::ir::normal_init(0.5, 1));
  ValueId b1 = b.param("fc1.bias", {8}, DType::kF32, compiler::ir::normal_init(0.1, 2));
  ValueId w2 = b.param("fc2.weight", {3, 8}, DType::kF32, compiler::ir::normal_init(0.5, 3));
  b.output(b.linear(b.gelu(b.linear(x, w1, b1, "fc1")), w2, compiler::ir::kNoValue, "fc2"));
  compiler::ir::Program model = b.build();
  *loss = add_mse_loss(model, model.outputs()[0]);
  return model;
}

TEST(Trainer, SmallMlpLossCurveMatchesTheReferenceForBothOptimizers) {
  ValueId loss;
  compiler::ir::Program model = small_mlp(&loss);
  std::mt19937_64 rng(5);
  compiler::reference::HostTensorList inputs = {testing::normal_tensor({4, 6}, 1.0, rng),
                                                testing::normal_tensor({4, 3}, 1.0, rng)};
  Hyperparameters sgd;
  sgd.lr = 0.1;
  expect_matching_curves(model, loss, OptimizerKind::kSgdMomentum, inputs, sgd, 5, 1e-4,
                         "small mlp sgd");
  Hyperparameters adamw;
  adamw.lr = 0.01;
  adamw.weight_decay = 0.01;
  expect_matching_curves(model, loss, OptimizerKind::kAdamW, inputs, adamw, 5, 1e-4,
                         "small mlp adamw");
}

TEST(Trainer, ParamsGradientsAndOptimizerStateKeepTheirAddresses) {
  ValueId loss;
  compiler::ir::Program model = small_mlp(&loss);
  Trainer trainer(model, loss, {.backend = "eager", .optimizer = OptimizerKind::kAdamW});
  std::map<std::string, void*> addresses;
  for (const std::string& name : trainer.state_names()) {
    addresses[name] = trainer.state(name).address();
  }
  for (const char* name : {"fc1.weight", "grad.fc1.weight", "fc1.weight.exp_avg",
                           "fc1.weight.exp_avg_sq", "grad.fc2.weight"}) {
    EXPECT_TRUE(addresses.count(name)) << name;
  }
  std::mt19937_64 rng(8);
  compiler::TensorList inputs = {to_device(testing::normal_tensor({4, 6}, 1.0, rng)),
                                 to_device(testing::normal_tensor({4, 3}, 1.0, rng))};
  std::vector<double> before = trainer.state("fc1.weight").to_doubles();
  for (int step = 0; step < 3; ++step) trainer.step(inputs, {});
  EXPECT_EQ(trainer.steps_taken(), 3);
  for (const auto& [name, address] : addresses) {
    EXPECT_EQ(trainer.state(name).address(), address) << name;
  }
  EXPECT_NE(trainer.state("fc1.weight").to_doubles(), before);
  // The lowered optimizer step writes exactly the params and their state.
  std::vector<size_t> mutated = trainer.lowered_optimizer().function().mutated_input_indices;
  std::sort(mutated.begin(), mutated.end());
  EXPECT_EQ(mutated, mutated_input_positions(trainer.optimizer().program));
}

// Note [Argument sources]: every backward argument is the tensor its source
// names (state by address, the caller's inputs by address, d(loss) = 1, the
// forward's saved outputs), and running the lowered backward on them writes
// the gradients a forward_backward() writes.
TEST(Trainer, BackwardArgumentsComeFromTheirSources) {
  ValueId loss;
  compiler::ir::Program model = small_mlp(&loss);
  Trainer trainer(model, loss, {.backend = "eager", .optimizer = OptimizerKind::kSgdMomentum});
  std::mt19937_64 rng(21);
  compiler::TensorList inputs = {to_device(testing::normal_tensor({4, 6}, 1.0, rng)),
                                 to_device(testing::normal_tensor({4, 3}, 1.0, rng))};
  Tensor loss_value;
  compiler::TensorList args = trainer.backward_arguments(inputs, &loss_value);
  EXPECT_TRUE(loss_value.defined());
  const compiler::autodiff::TrainingPrograms& programs = trainer.programs();
  const compiler::ir::Program& backward = trainer.backward_stage().program();
  const std::vector<ValueId> call_inputs =
      programs.forward.inputs_of_kind(compiler::ir::ValueKind::kInput);
  ASSERT_EQ(args.size(), backward.inputs().size());
  size_t saved = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const compiler::ir::Value& value = backward.value(backward.inputs()[i]);
    const compiler::autodiff::BackwardInput& source = programs.backward_inputs[i];
    if (value.is_persistent()) {
      EXPECT_EQ(args[i].address(), trainer.state(value.name).address()) << value.name;
      continue;
    }
    switch (source.source) {
      case compiler::autodiff::BackwardInput::Source::kLossGradient:
        EXPECT_EQ(args[i].to_doubles(), std::vector<double>{1.0});
        break;
      case compiler::autodiff::BackwardInput::Source::kForwardInput: {
        auto at = std::find(call_inputs.begin(), call_inputs.end(),
                            programs.forward.inputs()[source.index]);
        ASSERT_NE(at, call_inputs.end()) << value.name;
        EXPECT_EQ(args[i].address(),
                  inputs[static_cast<size_t>(at - call_inputs.begin())].address())
            << value.name;
        break;
      }
      case compiler::autodiff::BackwardInput::Source::kForwardOutput:
        ++saved;
        EXPECT_EQ(args[i].shape(), value.type.shape) << value.name;
        break;
      case compiler::autodiff::BackwardInput::Source::kGradientBuffer:
        ADD_FAILURE() << "gradient buffer " << value.name << " is not persistent";
        break;
    }
  }
  EXPECT_EQ(saved, programs.saved_count());
  trainer.lowered_backward().function().call(args);
  std::vector<double> by_hand = trainer.state("grad.fc1.weight").to_doubles();
  trainer.forward_backward(inputs);
  EXPECT_EQ(trainer.state("grad.fc1.weight").to_doubles(), by_hand);
}

// Note [Hyperparameters on the device]: a learning-rate schedule reaches every
// step (losses and the final params match the reference, which takes each
// step's values directly), and the values cross to the device once per
// change: 7 changes over 10 steps, more than the pinned ring has slots.
TEST(Trainer, ScheduledHyperparametersReachEveryStepWithOneCopyPerChange) {
  ValueId loss;
  compiler::ir::Program model = small_mlp(&loss);
  std::mt19937_64 rng(13);
  compiler::reference::HostTensorList inputs = {testing::normal_tensor({4, 6}, 1.0, rng),
                                                testing::normal_tensor({4, 3}, 1.0, rng)};
  compiler::TensorList device_inputs = {to_device(inputs[0]), to_device(inputs[1])};
  ReferenceTrainer reference_trainer(model, loss, OptimizerKind::kSgdMomentum);
  Trainer trainer(model, loss, {.backend = "eager", .optimizer = OptimizerKind::kSgdMomentum});
  const std::vector<double> schedule = {0.1, 0.1, 0.1, 0.05, 0.02, 0.2, 0.01, 0.3, 0.07, 0.07};
  for (size_t step = 0; step < schedule.size(); ++step) {
    Hyperparameters hyper;
    hyper.lr = schedule[step];
    double expected = reference_trainer.step(inputs, hyper);
    double got = trainer.step(device_inputs, hyper).to_doubles().at(0);
    EXPECT_NEAR(got, expected, 1e-4 * std::abs(expected)) << "step " << step;
  }
  std::vector<double> expected = reference_trainer.state("fc1.weight").data;
  std::vector<double> got = trainer.state("fc1.weight").to_doubles();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i], 1e-4 + 1e-4 * std::abs(expected[i]))
        << "fc1.weight[" << i << "]";
  }
  EXPECT_EQ(trainer.hyperparameter_copies(), 7u);
}

TEST(Trainer, MlpBenchmarkLossCurveMatchesTheReference) {
  testing::ModelWithLoss model = testing::mlp_with_mse(/*batch=*/8, kSimDevice);
  std::mt19937_64 rng(21);
  compiler::reference::HostTensor x = testing::normal_tensor({8, 512}, 1.0, rng);
  compiler::reference::HostTensor target = testing::normal_tensor({8, 512}, 0.5, rng);
  for (double& value : target.data) value = std::abs(value);
  Hyperparameters hyper;
  hyper.lr = 8;
  hyper.momentum = 0.5;
  expect_matching_curves(model.program, model.loss, OptimizerKind::kSgdMomentum, {x, target}, hyper,
                         6, 1e-3, "mlp16x512");
}

TEST(Trainer, GptBenchmarkLossCurveMatchesTheReference) {
  testing::ModelWithLoss model = testing::gpt_with_next_token_loss(1, 8, kSimDevice);
  Hyperparameters hyper;
  hyper.lr = 2e-3;
  expect_matching_curves(model.program, model.loss, OptimizerKind::kAdamW,
                         {testing::repeating_tokens(1, 8, {17, 301, 5, 42})}, hyper, 6, 1e-3,
                         "gpt4x256");
}

}  // namespace
}  // namespace grove::training
