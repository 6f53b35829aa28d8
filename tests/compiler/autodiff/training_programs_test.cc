// build_training_programs: the forward/backward split, saved activations and
// recomputation, gradient buffers, and the errors.
#include "compiler/autodiff/training_programs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "compiler/ir/builder.h"
#include "runtime/error.h"
#include "training/losses.h"
#include "training/optimizer.h"
#include "training/reference_training.h"

namespace grove::compiler::autodiff {
namespace {

using ir::DType;
using ir::ProgramBuilder;
using ir::ValueId;
using reference::HostTensor;
using reference::HostTensorList;

// x [4, 6] -> linear(8) -> gelu -> linear(3), mse against `target`.
ir::Program small_mlp(ValueId* loss) {
  ProgramBuilder b("small_mlp");
  ValueId x = b.input("x", {4, 6});
  ValueId w1 = b.param("fc1.weight", {8, 6}, DType::kF32, ir::normal_init(0.5, 1));
  ValueId b1 = b.param("fc1.bias", {8}, DType::kF32, ir::normal_init(0.1, 2));
  ValueId w2 = b.param("fc2.weight", {3, 8}, DType::kF32, ir::normal_init(0.5, 3));
  ValueId b2 = b.param("fc2.bias", {3}, DType::kF32, ir::normal_init(0.1, 4));
  ValueId hidden = b.gelu(b.linear(x, w1, b1, "fc1"), "act1");
  b.output(b.linear(hidden, w2, b2, "fc2"));
  ir::Program model = b.build();
  *loss = training::add_mse_loss(model, model.outputs()[0]);
  return model;
}

HostTensor random_tensor(const ir::Shape& shape, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0, 1);
  HostTensor tensor{shape, DType::kF32, {}};
  tensor.data.resize(static_cast<size_t>(runtime::shape_numel(shape)));
  for (double& value : tensor.data) value = normal(rng);
  return tensor;
}

// The forward's arguments: initial params, random inputs.
HostTensorList forward_inputs(const ir::Program& forward, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostTensorList inputs = reference::initial_state(forward);
  for (size_t i = 0; i < forward.inputs().size(); ++i) {
    const ir::Value& value = forward.value(forward.inputs()[i]);
    if (value.kind == ir::ValueKind::kInput) inputs[i] = random_tensor(value.type.shape, rng);
  }
  return inputs;
}

std::vector<std::string> saved_names(const TrainingPrograms& programs) {
  std::vector<std::string> names;
  for (size_t i = programs.first_saved_output; i < programs.forward.outputs().size(); ++i) {
    names.push_back(programs.forward.value(programs.forward.outputs()[i]).name);
  }
  return names;
}

TEST(TrainingPrograms, ForwardKeepsTheModelInputsAndReturnsOutputsLossAndSavedValues) {
  ValueId loss;
  ir::Program model = small_mlp(&loss);
  TrainingPrograms programs = build_training_programs(model, loss);
  ASSERT_EQ(programs.forward.inputs().size(), model.inputs().size());
  for (size_t i = 0; i < model.inputs().size(); ++i) {
    EXPECT_EQ(programs.forward.value(programs.forward.inputs()[i]).name,
              model.value(model.inputs()[i]).name);
  }
  EXPECT_EQ(programs.model_output_count, 1u);
  EXPECT_EQ(programs.loss_output, 1u);
  EXPECT_EQ(programs.first_saved_output, 2u);
  EXPECT_EQ(programs.params.size(), 4u);
  EXPECT_EQ(programs.backward.outputs().size(), 4u);
  // The backward's inputs: d(loss) first, then the saved values, then what it
  // reads from the forward's inputs, then one gradient buffer per param.
  EXPECT_EQ(programs.backward_inputs.front().source, BackwardInput::Source::kLossGradient);
  size_t buffers = std::count_if(programs.backward_inputs.begin(), programs.backward_inputs.end(),
                                 [](const BackwardInput& input) {
                                   return input.source == BackwardInput::Source::kGradientBuffer;
                                 });
  EXPECT_EQ(buffers, 4u);
}

TEST(TrainingPrograms, RecomputesGeluFromTheSavedLinearOutputInsteadOfSavingIt) {
  ValueId loss;
  ir::Program model = small_mlp(&loss);
  TrainingPrograms recomputing = build_training_programs(model, loss);
  TrainingOptions save_all;
  save_all.recompute = false;
  TrainingPrograms saving = build_training_programs(model, loss, save_all);

  std::vector<std::string> saved = saved_names(recomputing);
  EXPECT_NE(std::find(saved.begin(), saved.end(), "fc1"), saved.end());
  EXPECT_EQ(std::find(saved.begin(), saved.end(), "act1"), saved.end());
  EXPECT_NE(std::find(recomputing.recomputed.begin(), recomputing.recomputed.end(), "act1"),
            recomputing.recomputed.end());
  std::vector<std::string> all = saved_names(saving);
  EXPECT_NE(std::find(all.begin(), all.end(), "act1"), all.end());
  EXPECT_LT(recomputing.saved_bytes, saving.saved_bytes);

  // Both splits compute the same gradients.
  HostTensorList inputs = forward_inputs(recomputing.forward, 5);
  training::ForwardBackward a = training::reference_forward_backward(recomputing, inputs);
  training::ForwardBackward b = training::reference_forward_backward(saving, inputs);
  ASSERT_EQ(a.gradients.size(), b.gradients.size());
  for (size_t i = 0; i < a.gradients.size(); ++i) {
    for (size_t j = 0; j < a.gradients[i].data.size(); ++j) {
      EXPECT_NEAR(a.gradients[i].data[j], b.gradients[i].data[j], 1e-12);
    }
  }
}

TEST(TrainingPrograms, BackwardWritesGradientBuffersInPlaceAndReturnsThem) {
  ValueId loss;
  ir::Program model = small_mlp(&loss);
  TrainingPrograms programs = build_training_programs(model, loss);
  std::vector<size_t> expected;
  for (size_t i = 0; i < programs.backward_inputs.size(); ++i) {
    if (programs.backward_inputs[i].source == BackwardInput::Source::kGradientBuffer) {
      expected.push_back(i);
      const ir::Value& buffer = programs.backward.value(programs.backward.inputs()[i]);
      EXPECT_EQ(buffer.kind, ir::ValueKind::kBuffer);
      EXPECT_EQ(buffer.name.rfind("grad.", 0), 0u) << buffer.name;
    }
  }
  EXPECT_EQ(training::mutated_input_positions(programs.backward), expected);

  TrainingOptions outputs_only;
  outputs_only.gradient_storage = GradientStorage::kOutputs;
  TrainingPrograms fresh = build_training_programs(model, loss, outputs_only);
  EXPECT_TRUE(training::mutated_input_positions(fresh.backward).empty());
  HostTensorList inputs = forward_inputs(programs.forward, 9);
  training::ForwardBackward in_buffers = training::reference_forward_backward(programs, inputs);
  training::ForwardBackward as_outputs = training::reference_forward_backward(fresh, inputs);
  for (size_t i = 0; i < in_buffers.gradients.size(); ++i) {
    EXPECT_EQ(in_buffers.gradients[i].data, as_outputs.gradients[i].data);
  }
}

TEST(TrainingPrograms, ParamTheLossDoesNotReachGetsAZeroGradient) {
  ProgramBuilder b("partial");
  ValueId used = b.param("used", {3}, DType::kF32, ir::normal_init(1, 1));
  b.param("unused", {2}, DType::kF32, ir::normal_init(1, 2));
  ValueId through_integer = b.param("through_integer", {3}, DType::kF32, ir::normal_init(4, 3));
  ValueId rounded = b.cast(b.cast(through_integer, DType::kI32), DType::kF32);
  ValueId loss = b.sum(b.mul(used, rounded), {});
  b.output(loss);
  ir::Program model = b.build();
  TrainingPrograms programs = build_training_programs(model, loss);
  EXPECT_EQ(programs.param_has_gradient, (std::vector<bool>{true, false, false}));
  training::ForwardBackward result =
      training::reference_forward_backward(programs, reference::initial_state(programs.forward));
  EXPECT_EQ(result.gradients[1].data, (std::vector<double>{0, 0}));
  EXPECT_EQ(result.gradients[2].data, (std::vector<double>{0, 0, 0}));
}

TEST(TrainingPrograms, RejectsALossThatIsNotAFloatingScalar) {
  ProgramBuilder b("vector_loss");
  ValueId w = b.param("w", {3}, DType::kF32, ir::normal_init(1, 1));
  ValueId y = b.exp(w);
  b.output(y);
  ir::Program model = b.build();
  EXPECT_THROW(build_training_programs(model, y), ShapeError);
}

TEST(TrainingPrograms, RejectsDifferentiatingThroughAnOptimizerUpdate) {
  ProgramBuilder b("through_update");
  ValueId w = b.param("w", {3}, DType::kF32, ir::normal_init(1, 1));
  ValueId g = b.param("g", {3}, DType::kF32, ir::normal_init(1, 2));
  ValueId buffer = b.buffer("momentum", {3}, DType::kF32, ir::zeros_init());
  ValueId lr = b.input("lr", {});
  std::vector<ValueId> updated = b.sgd_momentum_update(w, g, buffer, lr, lr, lr, "update");
  ValueId loss = b.sum(updated[0], {});
  b.output(loss);
  ir::Program model = b.build();
  try {
    build_training_programs(model, loss);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("'update'"), std::string::npos) << message;
    EXPECT_NE(message.find("no gradient rule"), std::string::npos) << message;
  }
}

TEST(TrainingPrograms, RejectsABackwardThatReadsStateTheForwardOverwrites) {
  ProgramBuilder b("overwrites");
  ValueId w = b.param("w", {3}, DType::kF32, ir::normal_init(1, 1));
  ValueId state = b.buffer("state", {3}, DType::kF32, ir::normal_init(1, 2));
  ValueId loss = b.sum(b.mul(w, state), {});
  b.copy_into(state, w);
  b.output(loss);
  ir::Program model = b.build();
  try {
    build_training_programs(model, loss);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'state'"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace grove::compiler::autodiff
