// Forward + backward of both benchmark models on the float64 reference: the
// backward's gradients equal central finite differences of the forward's loss
// on sampled param entries (from the first, a middle and the last layers).
//
// Bound: |analytic - numeric| <= 1e-6 * |numeric| + 1e-9, with h = 1e-5. The
// absolute floor covers the rounding of the finite difference itself, about
// 1e-16 * |loss| / h ~ 1e-11 here (the observed differences are <= 1e-10).
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "compiler/autodiff/training_programs.h"
#include "tests/training/benchmark_models.h"
#include "training/reference_training.h"

namespace grove::training {
namespace {

using compiler::reference::HostTensorList;
using testing::ModelWithLoss;

constexpr double kRelativeBound = 1e-6;
constexpr double kAbsoluteFloor = 1e-9;
constexpr double kStep = 1e-5;

// Checks `entries_per_param` entries of each param named in `names`: the
// entry with the largest gradient and seeded random ones.
void check_sampled_gradients(const compiler::autodiff::TrainingPrograms& programs,
                             HostTensorList inputs, const std::vector<std::string>& names,
                             int entries_per_param, uint64_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  ForwardBackward result = reference_forward_backward(programs, inputs);
  std::mt19937_64 rng(seed);
  for (const std::string& name : names) {
    auto param = programs.forward.find_value(name);
    ASSERT_TRUE(param) << name;
    auto index =
        static_cast<size_t>(std::find(programs.params.begin(), programs.params.end(), *param) -
                            programs.params.begin());
    ASSERT_LT(index, programs.params.size()) << name;
    const std::vector<double>& grad = result.gradients[index].data;
    size_t largest = 0;
    for (size_t j = 0; j < grad.size(); ++j) {
      if (std::abs(grad[j]) > std::abs(grad[largest])) largest = j;
    }
    ASSERT_GT(std::abs(grad[largest]), 0) << name << " has an all-zero gradient";
    std::vector<size_t> entries = {largest};
    std::uniform_int_distribution<size_t> pick(0, grad.size() - 1);
    while (static_cast<int>(entries.size()) < entries_per_param) entries.push_back(pick(rng));

    auto position = static_cast<size_t>(programs.forward.input_position(*param));
    for (size_t j : entries) {
      HostTensorList shifted = inputs;
      double x = inputs[position].data[j];
      double h = kStep * std::max(1.0, std::abs(x));
      shifted[position].data[j] = x + h;
      double plus =
          compiler::reference::reference_run(programs.forward, shifted)[programs.loss_output]
              .data[0];
      shifted[position].data[j] = x - h;
      double minus =
          compiler::reference::reference_run(programs.forward, shifted)[programs.loss_output]
              .data[0];
      double numeric = (plus - minus) / (2 * h);
      EXPECT_LE(std::abs(grad[j] - numeric), kRelativeBound * std::abs(numeric) + kAbsoluteFloor)
          << name << "[" << j << "]: analytic " << grad[j] << ", numeric " << numeric;
      std::cout << name << "[" << j << "] analytic " << grad[j] << " numeric " << numeric
                << " difference " << std::abs(grad[j] - numeric) << "\n";
    }
  }
}

TEST(ModelGradients, MlpWithMseLossMatchesFiniteDifferences) {
  ModelWithLoss model = testing::mlp_with_mse(/*batch=*/2);
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model.program, model.loss);
  EXPECT_EQ(programs.params.size(), 32u);
  std::mt19937_64 rng(7);
  HostTensorList inputs = compiler::reference::initial_state(programs.forward);
  inputs[static_cast<size_t>(programs.forward.input_position(*programs.forward.find_value("x")))] =
      testing::normal_tensor({2, 512}, 1.0, rng);
  inputs[static_cast<size_t>(programs.forward.input_position(
      *programs.forward.find_value("target")))] = testing::normal_tensor({2, 512}, 0.5, rng);
  check_sampled_gradients(programs, inputs, {"fc0.weight", "fc7.bias", "fc15.weight"}, 3, 11);
}

TEST(ModelGradients, GptWithNextTokenLossMatchesFiniteDifferences) {
  ModelWithLoss model = testing::gpt_with_next_token_loss(/*batch=*/1, /*seq=*/8);
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model.program, model.loss);
  EXPECT_EQ(programs.params.size(), 69u);
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int64_t> token(0, 511);
  HostTensorList inputs = compiler::reference::initial_state(programs.forward);
  compiler::reference::HostTensor& tokens = inputs[static_cast<size_t>(
      programs.forward.input_position(*programs.forward.find_value("tokens")))];
  tokens = compiler::reference::HostTensor{{1, 8}, compiler::ir::DType::kI64, {}};
  for (int i = 0; i < 8; ++i) tokens.data.push_back(static_cast<double>(token(rng)));
  check_sampled_gradients(programs, inputs,
                          {"tok_emb", "pos_emb", "h0.ln1.weight", "h1.attn.q.weight",
                           "h2.attn.v.bias", "h3.mlp.fc.weight", "ln_f.bias", "lm_head.weight"},
                          2, 13);
}

// Note [Saved activations] on the real models: recomputing cheap values
// saves memory and the gelu outputs are never saved.
TEST(ModelGradients, RecomputationShrinksTheSavedActivationsOfBothModels) {
  for (bool gpt : {false, true}) {
    ModelWithLoss model =
        gpt ? testing::gpt_with_next_token_loss(1, 8) : testing::mlp_with_mse(/*batch=*/8);
    compiler::autodiff::TrainingOptions save_all;
    save_all.recompute = false;
    compiler::autodiff::TrainingPrograms recomputing =
        compiler::autodiff::build_training_programs(model.program, model.loss);
    compiler::autodiff::TrainingPrograms saving =
        compiler::autodiff::build_training_programs(model.program, model.loss, save_all);
    std::cout << model.program.name() << ": saved " << recomputing.saved_count() << " values, "
              << recomputing.saved_bytes << " bytes (" << recomputing.recomputed.size()
              << " recomputed); without recomputation " << saving.saved_count() << " values, "
              << saving.saved_bytes << " bytes\n";
    EXPECT_LT(recomputing.saved_bytes, saving.saved_bytes);
    for (size_t i = recomputing.first_saved_output; i < recomputing.forward.outputs().size(); ++i) {
      const compiler::ir::Value& saved =
          recomputing.forward.value(recomputing.forward.outputs()[i]);
      EXPECT_EQ(saved.name.find("gelu"), std::string::npos) << saved.name;
    }
  }
}

}  // namespace
}  // namespace grove::training
