// Optimizer step programs: the SGD-momentum and AdamW updates against a
// hand-computed reference over 3 steps (with a learning-rate schedule fed
// through the inputs), and their mutation metadata.
#include "training/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/ir/builder.h"
#include "compiler/reference/reference_interpreter.h"
#include "runtime/error.h"

namespace grove::training {
namespace {

using compiler::ir::DType;
using compiler::ir::ValueId;
using compiler::reference::HostTensor;
using compiler::reference::HostTensorList;

// Two params of different shapes (the optimizer copies them from the model).
compiler::ir::Program two_param_model() {
  compiler::ir::ProgramBuilder b("model");
  ValueId x = b.input("x", {2, 3});
  ValueId w = b.param("w", {4, 3}, DType::kF32, compiler::ir::normal_init(1, 1));
  ValueId bias = b.param("bias", {4}, DType::kF32, compiler::ir::normal_init(1, 2));
  b.output(b.linear(x, w, bias));
  return b.build();
}

std::vector<double> random_values(size_t count, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> values(count);
  for (double& value : values) value = normal(rng);
  return values;
}

// Runs `optimizer` for 3 steps with fresh random gradients and a schedule
// lr_t = lr / t, checking every param and state element after each step
// against `expected_step` (which updates its own copies).
void check_three_steps(
    const OptimizerProgram& optimizer, Hyperparameters hyper,
    const std::function<void(std::vector<double>& param, const std::vector<double>& grad,
                             std::vector<std::vector<double>>& state, const Hyperparameters&,
                             int64_t step)>& expected_step) {
  const compiler::ir::Program& program = optimizer.program;
  const uint64_t seed = 42;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  HostTensorList args = compiler::reference::initial_state(program);
  size_t count = optimizer.params.size();
  std::vector<std::vector<double>> params(count);
  std::vector<std::vector<std::vector<double>>> states(count);
  for (size_t i = 0; i < count; ++i) {
    auto position = static_cast<size_t>(program.input_position(optimizer.params[i]));
    params[i] = args[position].data;
    for (ValueId buffer : optimizer.state[i]) {
      auto at = static_cast<size_t>(program.input_position(buffer));
      // Start the state away from zero so that the old state matters (and
      // positive: AdamW's second moment is a running mean of squares).
      args[at].data = random_values(args[at].data.size(), rng);
      for (double& value : args[at].data) value = std::abs(value);
      states[i].push_back(args[at].data);
    }
  }
  const double base_lr = hyper.lr;
  for (int64_t step = 1; step <= 3; ++step) {
    hyper.lr = base_lr / static_cast<double>(step);
    std::vector<double> values = optimizer.hyperparameter_values(hyper, step);
    for (size_t h = 0; h < values.size(); ++h) args[h] = HostTensor::scalar(values[h]);
    for (size_t i = 0; i < count; ++i) {
      auto at = static_cast<size_t>(program.input_position(optimizer.gradients[i]));
      args[at].data = random_values(args[at].data.size(), rng);
      expected_step(params[i], args[at].data, states[i], hyper, step);
    }
    compiler::reference::reference_run_in_place(program, args);
    for (size_t i = 0; i < count; ++i) {
      const HostTensor& param =
          args[static_cast<size_t>(program.input_position(optimizer.params[i]))];
      for (size_t j = 0; j < params[i].size(); ++j) {
        EXPECT_NEAR(param.data[j], params[i][j], 1e-12) << "step " << step << " param " << i;
      }
      for (size_t s = 0; s < optimizer.state[i].size(); ++s) {
        const HostTensor& state =
            args[static_cast<size_t>(program.input_position(optimizer.state[i][s]))];
        for (size_t j = 0; j < state.data.size(); ++j) {
          EXPECT_NEAR(state.data[j], states[i][s][j], 1e-12) << "step " << step << " state " << s;
        }
      }
    }
  }
}

TEST(Optimizer, SgdMomentumMatchesHandComputedUpdatesOverThreeSteps) {
  compiler::ir::Program model = two_param_model();
  OptimizerProgram sgd = build_optimizer_program(
      model, model.inputs_of_kind(compiler::ir::ValueKind::kParam), OptimizerKind::kSgdMomentum);
  Hyperparameters hyper;
  hyper.lr = 0.1;
  hyper.momentum = 0.9;
  hyper.weight_decay = 0.01;
  check_three_steps(sgd, hyper,
                    [](std::vector<double>& param, const std::vector<double>& grad,
                       std::vector<std::vector<double>>& state, const Hyperparameters& h, int64_t) {
                      std::vector<double>& buffer = state[0];
                      for (size_t j = 0; j < param.size(); ++j) {
                        double g = grad[j] + h.weight_decay * param[j];
                        buffer[j] = h.momentum * buffer[j] + g;
                        param[j] -= h.lr * buffer[j];
                      }
                    });
}

TEST(Optimizer, AdamWMatchesHandComputedUpdatesWithBiasCorrectionOverThreeSteps) {
  compiler::ir::Program model = two_param_model();
  OptimizerProgram adamw = build_optimizer_program(
      model, model.inputs_of_kind(compiler::ir::ValueKind::kParam), OptimizerKind::kAdamW);
  Hyperparameters hyper;
  hyper.lr = 0.01;
  hyper.beta1 = 0.8;
  hyper.beta2 = 0.95;
  hyper.eps = 1e-6;
  hyper.weight_decay = 0.1;
  check_three_steps(
      adamw, hyper,
      [](std::vector<double>& param, const std::vector<double>& grad,
         std::vector<std::vector<double>>& state, const Hyperparameters& h, int64_t step) {
        std::vector<double>& m = state[0];
        std::vector<double>& v = state[1];
        for (size_t j = 0; j < param.size(); ++j) {
          m[j] = h.beta1 * m[j] + (1 - h.beta1) * grad[j];
          v[j] = h.beta2 * v[j] + (1 - h.beta2) * grad[j] * grad[j];
          double m_hat = m[j] / (1 - std::pow(h.beta1, step));
          double v_hat = v[j] / (1 - std::pow(h.beta2, step));
          param[j] -= h.lr * (h.weight_decay * param[j] + m_hat / (std::sqrt(v_hat) + h.eps));
        }
      });
}

// The positions of `values` in program.inputs(), ascending.
std::vector<size_t> positions(const compiler::ir::Program& program, std::vector<ValueId> values) {
  std::vector<size_t> result;
  for (ValueId value : values) result.push_back(static_cast<size_t>(program.input_position(value)));
  std::sort(result.begin(), result.end());
  return result;
}

TEST(Optimizer, MutatesExactlyTheParamsAndTheirStateBuffers) {
  compiler::ir::Program model = two_param_model();
  for (OptimizerKind kind : {OptimizerKind::kSgdMomentum, OptimizerKind::kAdamW}) {
    SCOPED_TRACE(optimizer_kind_name(kind));
    OptimizerProgram optimizer =
        build_optimizer_program(model, model.inputs_of_kind(compiler::ir::ValueKind::kParam), kind);
    std::vector<ValueId> written = optimizer.params;
    for (const auto& state : optimizer.state)
      written.insert(written.end(), state.begin(), state.end());
    EXPECT_EQ(mutated_input_positions(optimizer.program), positions(optimizer.program, written));
    EXPECT_EQ(written.size(), kind == OptimizerKind::kAdamW ? 6u : 4u);
    // Hyper-parameters are inputs; params, gradients and state are persistent.
    for (size_t h = 0; h < optimizer.hyperparameter_names.size(); ++h) {
      const compiler::ir::Value& value = optimizer.program.value(optimizer.program.inputs()[h]);
      EXPECT_EQ(value.kind, compiler::ir::ValueKind::kInput);
      EXPECT_EQ(value.name, optimizer.hyperparameter_names[h]);
      EXPECT_TRUE(value.type.is_scalar());
    }
    for (ValueId gradient : optimizer.gradients) {
      EXPECT_EQ(optimizer.program.value(gradient).kind, compiler::ir::ValueKind::kBuffer);
    }
    EXPECT_TRUE(optimizer.program.outputs().empty());
  }
}

TEST(Optimizer, RejectsValuesThatAreNotFloatingParams) {
  compiler::ir::Program model = two_param_model();
  ValueId x = model.inputs_of_kind(compiler::ir::ValueKind::kInput)[0];
  EXPECT_THROW(build_optimizer_program(model, {x}, OptimizerKind::kAdamW), Error);
  EXPECT_THROW(build_optimizer_program(model, {}, OptimizerKind::kAdamW), Error);
  ValueId w = model.inputs_of_kind(compiler::ir::ValueKind::kParam)[0];
  EXPECT_THROW(build_optimizer_program(model, {w, w}, OptimizerKind::kSgdMomentum), Error);
}

// kFlatInput is kInput with every gradient sliced out of one flat input
// "grads" (grove.optim's process-group step takes it through the C API); the
// same gradients give the same update, bit for bit on the reference.
TEST(Optimizer, FlatGradientsUpdateAsOneGradientInputPerParam) {
  compiler::ir::Program model = two_param_model();
  const std::vector<ValueId> params = model.inputs_of_kind(compiler::ir::ValueKind::kParam);
  OptimizerProgram per_param =
      build_optimizer_program(model, params, OptimizerKind::kAdamW, GradientSource::kInput);
  OptimizerProgram flat =
      build_optimizer_program(model, params, OptimizerKind::kAdamW, GradientSource::kFlatInput);
  const ValueId grads = flat.program.inputs()[flat.hyperparameter_names.size()];
  EXPECT_EQ(flat.program.value(grads).name, "grads");
  EXPECT_EQ(flat.program.value(grads).type.shape, (runtime::Shape{4 * 3 + 4}));
  EXPECT_EQ(flat.program.inputs_of_kind(compiler::ir::ValueKind::kInput).size(),
            flat.hyperparameter_names.size() + 1);

  std::mt19937_64 rng(7);
  SCOPED_TRACE("seed 7");
  HostTensorList by_param = compiler::reference::initial_state(per_param.program);
  HostTensorList by_flat = compiler::reference::initial_state(flat.program);
  Hyperparameters hyper;
  hyper.lr = 0.05;
  hyper.weight_decay = 0.01;
  const std::vector<double> values = per_param.hyperparameter_values(hyper, 1);
  for (size_t h = 0; h < values.size(); ++h) {
    by_param[h] = HostTensor::scalar(values[h]);
    by_flat[h] = HostTensor::scalar(values[h]);
  }
  std::vector<double> all;
  for (ValueId gradient : per_param.gradients) {
    const compiler::ir::TensorType& type = per_param.program.value(gradient).type;
    std::vector<double> values = random_values(static_cast<size_t>(type.numel()), rng);
    all.insert(all.end(), values.begin(), values.end());
    by_param[static_cast<size_t>(per_param.program.input_position(gradient))] = {
        type.shape, type.dtype, std::move(values)};
  }
  by_flat[static_cast<size_t>(flat.program.input_position(grads))] = {
      {static_cast<int64_t>(all.size())}, DType::kF32, all};
  compiler::reference::reference_run_in_place(per_param.program, by_param);
  compiler::reference::reference_run_in_place(flat.program, by_flat);
  for (size_t i = 0; i < params.size(); ++i) {
    const HostTensor& expected =
        by_param[static_cast<size_t>(per_param.program.input_position(per_param.params[i]))];
    const HostTensor& got =
        by_flat[static_cast<size_t>(flat.program.input_position(flat.params[i]))];
    EXPECT_EQ(got.data, expected.data) << "param " << i;
  }
}

TEST(Optimizer, FlatGradientsRefuseParamsOfTwoDtypes) {
  compiler::ir::ProgramBuilder b("mixed");
  ValueId x = b.input("x", {2, 3});
  ValueId w = b.param("w", {4, 3}, DType::kF32, compiler::ir::normal_init(1, 1));
  ValueId bias = b.param("bias", {4}, DType::kF32, compiler::ir::normal_init(1, 2));
  ValueId scale = b.param("scale", {4}, DType::kF16, compiler::ir::normal_init(1, 3));
  b.output(b.linear(x, w, bias));
  compiler::ir::Program model = b.build();
  EXPECT_THROW(build_optimizer_program(model, {w, scale}, OptimizerKind::kSgdMomentum,
                                       GradientSource::kFlatInput),
               DTypeError);
}

}  // namespace
}  // namespace grove::training
