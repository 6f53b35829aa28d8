// The Trainer on every device (sim always, cuda on a GPU host): the forward
// loss of both benchmark models agrees with the float64 reference, the
// gradients computed on cuda agree with those computed on sim, and a short
// training run lowers the loss by a stated factor on each device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "runtime/device_context.h"
#include "tests/common/test_util.h"
#include "tests/training/benchmark_models.h"
#include "training/reference_training.h"
#include "training/trainer.h"

namespace grove::training {
namespace {

using compiler::ir::DType;
using runtime::Tensor;

class TrainerOnDevice : public grove::testing::DeviceTest {};

Tensor to_device(const compiler::reference::HostTensor& host, runtime::Device device) {
  if (host.dtype == DType::kI64) {
    std::vector<int64_t> values(host.data.begin(), host.data.end());
    return Tensor::from_vector(values, host.shape, device);
  }
  std::vector<float> values(host.data.begin(), host.data.end());
  return Tensor::from_vector(values, host.shape, device);
}

compiler::TensorList to_device(const compiler::reference::HostTensorList& inputs,
                               runtime::Device device) {
  compiler::TensorList tensors;
  for (const compiler::reference::HostTensor& input : inputs)
    tensors.push_back(to_device(input, device));
  return tensors;
}

// A model built for `device` (the JSON loader places params there).
using ModelFactory = testing::ModelWithLoss (*)(runtime::Device);

testing::ModelWithLoss mlp_batch4(runtime::Device device) {
  return testing::mlp_with_mse(/*batch=*/4, device);
}
testing::ModelWithLoss gpt_batch1_seq8(runtime::Device device) {
  return testing::gpt_with_next_token_loss(/*batch=*/1, /*seq=*/8, device);
}

compiler::reference::HostTensorList mlp_inputs() {
  std::mt19937_64 rng(5);
  compiler::reference::HostTensor x = testing::normal_tensor({4, 512}, 1.0, rng);
  compiler::reference::HostTensor target = testing::normal_tensor({4, 512}, 0.5, rng);
  for (double& value : target.data) value = std::abs(value);
  return {x, target};
}

compiler::reference::HostTensorList gpt_inputs() {
  return {testing::repeating_tokens(1, 8, {17, 301, 5, 42})};
}

double max_abs(const std::vector<double>& values) {
  double largest = 0;
  for (double value : values) largest = std::max(largest, std::abs(value));
  return largest;
}

// max |a - b| / max(max |b|, floor). The floor keeps gradients that are zero
// in exact arithmetic (the key projection's bias: softmax ignores a constant
// shift of its row) from being compared at the scale of rounding noise.
double relative_max_error(const std::vector<double>& a, const std::vector<double>& b,
                          double floor) {
  double difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference = std::max(difference, std::abs(a[i] - b[i]));
  return difference / std::max(max_abs(b), floor);
}

// Forward + backward on `device`: the loss is within 1e-4 (relative) of the
// float64 reference's; on a device other than sim every gradient buffer is
// within 1e-3 of the one computed on sim, relative to its largest entry (at
// least 1e-4 of the largest entry of all gradients).
void expect_forward_backward_agrees(ModelFactory factory,
                                    const compiler::reference::HostTensorList& inputs,
                                    runtime::Device device, const std::string& name) {
  testing::ModelWithLoss model = factory(device);
  Trainer trainer(model.program, model.loss, {.backend = "eager"});
  const double loss = trainer.forward_backward(to_device(inputs, device)).to_doubles().at(0);

  testing::ModelWithLoss host_model = factory(runtime::kCpuDevice);
  ReferenceTrainer reference_trainer(host_model.program, host_model.loss,
                                     OptimizerKind::kSgdMomentum);
  Hyperparameters no_update;
  no_update.lr = 0;
  const double expected = reference_trainer.step(inputs, no_update);
  EXPECT_NEAR(loss, expected, 1e-4 * std::abs(expected)) << name << " loss on " << device.str();
  std::cout << name << " on " << device.str() << ": loss " << loss << " (reference " << expected
            << ")\n";

  if (device == runtime::kSimDevice) return;
  testing::ModelWithLoss sim_model = factory(runtime::kSimDevice);
  Trainer sim_trainer(sim_model.program, sim_model.loss, {.backend = "eager"});
  sim_trainer.forward_backward(to_device(inputs, runtime::kSimDevice));
  std::vector<std::string> gradients;
  double largest = 0;
  for (const std::string& state : trainer.state_names()) {
    if (state.rfind("grad.", 0) != 0) continue;
    gradients.push_back(state);
    largest = std::max(largest, max_abs(sim_trainer.state(state).to_doubles()));
  }
  double worst = 0;
  std::string worst_name;
  for (const std::string& state : gradients) {
    double error = relative_max_error(trainer.state(state).to_doubles(),
                                      sim_trainer.state(state).to_doubles(), 1e-4 * largest);
    if (error > worst) worst = error, worst_name = state;
    EXPECT_LT(error, 1e-3) << name << " " << state << " on " << device.str() << " vs sim";
  }
  EXPECT_FALSE(gradients.empty()) << name << ": no gradient buffers found";
  std::cout << name << ": " << gradients.size() << " gradients, worst relative difference to sim "
            << worst << " (" << worst_name << ")\n";
}

TEST_P(TrainerOnDevice, MlpForwardBackwardAgreesWithReferenceAndSim) {
  expect_forward_backward_agrees(mlp_batch4, mlp_inputs(), device(), "mlp16x512");
}

TEST_P(TrainerOnDevice, GptForwardBackwardAgreesWithReferenceAndSim) {
  expect_forward_backward_agrees(gpt_batch1_seq8, gpt_inputs(), device(), "gpt4x256");
}

void print_curve(const std::string& name, runtime::Device device,
                 const std::vector<double>& losses) {
  std::cout << name << " on " << device.str() << " loss:";
  for (double loss : losses) std::cout << " " << loss;
  std::cout << "\n";
}

// mlp16x512, batch 8, SGD with momentum on a fixed synthetic regression (the
// task of training_run_test.cc, here through the Trainer on the device).
TEST_P(TrainerOnDevice, MlpWithSgdMomentumLowersTheLossTwentyfoldIn10Steps) {
  testing::ModelWithLoss model = testing::mlp_with_mse(/*batch=*/8, device());
  Trainer trainer(model.program, model.loss,
                  {.backend = "eager", .optimizer = OptimizerKind::kSgdMomentum});
  std::mt19937_64 rng(21);
  compiler::reference::HostTensor x = testing::normal_tensor({8, 512}, 1.0, rng);
  compiler::reference::HostTensor offsets = testing::normal_tensor({512}, 0.5, rng);
  compiler::reference::HostTensor target = testing::normal_tensor({8, 512}, 0.05, rng);
  for (size_t i = 0; i < target.data.size(); ++i) {
    target.data[i] += std::abs(offsets.data[i % 512]);
  }
  Hyperparameters hyper;
  hyper.lr = 24;
  hyper.momentum = 0.3;
  compiler::TensorList inputs = to_device({x, target}, device());
  std::vector<double> losses;
  for (int step = 0; step < 10; ++step) {
    losses.push_back(trainer.step(inputs, hyper).to_doubles().at(0));
  }
  print_curve("mlp16x512", device(), losses);
  EXPECT_LT(losses.back(), losses.front() / 20);
}

// gpt4x256, batch 1, seq 8, AdamW on a repeating token pattern.
TEST_P(TrainerOnDevice, GptWithAdamWLowersTheNextTokenLossTwentyfoldIn12Steps) {
  testing::ModelWithLoss model = testing::gpt_with_next_token_loss(1, 8, device());
  Trainer trainer(model.program, model.loss,
                  {.backend = "eager", .optimizer = OptimizerKind::kAdamW});
  Hyperparameters hyper;
  hyper.lr = 2e-3;
  hyper.weight_decay = 0.01;
  compiler::TensorList inputs = to_device(gpt_inputs(), device());
  std::vector<double> losses;
  for (int step = 0; step < 12; ++step) {
    losses.push_back(trainer.step(inputs, hyper).to_doubles().at(0));
  }
  print_curve("gpt4x256", device(), losses);
  EXPECT_LT(losses.back(), losses.front() / 20);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TrainerOnDevice);

}  // namespace
}  // namespace grove::training
