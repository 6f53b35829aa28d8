// The Trainer with backend "cudagraphs" (forward, backward and optimizer step
// recorded into the tree) gives bitwise the losses and params of "eager".
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "compiler/backends/backend_stats_json.h"
#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"
#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/philox_generator.h"
#include "training/losses.h"
#include "training/trainer.h"

namespace grove::cudagraph_trees::backend {
namespace {

using compiler::TensorList;
using compiler::ir::DType;
using compiler::ir::ValueId;
using runtime::kSimDevice;
using runtime::Tensor;
using training::Hyperparameters;
using training::OptimizerKind;
using training::Trainer;

compiler::ir::Program small_mlp(ValueId* loss) {
  compiler::ir::ProgramBuilder b("small_mlp", kSimDevice);
  ValueId x = b.input("x", {4, 6});
  ValueId w1 = b.param("fc1.weight", {8, 6}, DType::kF32, compiler::ir::normal_init(0.5, 1));
  ValueId b1 = b.param("fc1.bias", {8}, DType::kF32, compiler::ir::normal_init(0.1, 2));
  ValueId w2 = b.param("fc2.weight", {3, 8}, DType::kF32, compiler::ir::normal_init(0.5, 3));
  b.output(b.linear(b.gelu(b.linear(x, w1, b1, "fc1")), w2, compiler::ir::kNoValue, "fc2"));
  compiler::ir::Program model = b.build();
  *loss = training::add_mse_loss(model, model.outputs()[0]);
  return model;
}

// The small MLP under the eager and the cudagraphs Trainer with `optimizer`,
// on fresh trees (the backend registered, every tree manager reset first).
struct EagerAndGraphs {
  explicit EagerAndGraphs(OptimizerKind optimizer)
      : model(fresh_small_mlp(&loss)),
        eager(model, loss, {.backend = "eager", .optimizer = optimizer}),
        graphs(model, loss, {.backend = "cudagraphs", .optimizer = optimizer}) {}
  static compiler::ir::Program fresh_small_mlp(ValueId* loss) {
    register_cudagraphs_backend();
    reset_tree_managers();
    return small_mlp(loss);
  }
  ValueId loss;
  compiler::ir::Program model;
  Trainer eager;
  Trainer graphs;
};

Tensor random_tensor(const runtime::Shape& shape, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> values(static_cast<size_t>(runtime::shape_numel(shape)));
  for (float& v : values) v = normal(rng);
  return Tensor::from_vector(values, shape, kSimDevice);
}

// State tensor `name` of both trainers, equal bit for bit (f32) or by value.
void expect_same_state(const Trainer& eager, const Trainer& graphs, const std::string& name,
                       size_t step) {
  const Tensor& a = eager.state(name);
  const Tensor& b = graphs.state(name);
  if (a.dtype() != runtime::DType::kF32) {
    EXPECT_EQ(b.to_doubles(), a.to_doubles()) << name << " at step " << step;
    return;
  }
  std::vector<float> av = a.to_vector<float>();
  std::vector<float> bv = b.to_vector<float>();
  ASSERT_EQ(av.size(), bv.size()) << name;
  EXPECT_EQ(std::memcmp(av.data(), bv.data(), av.size() * sizeof(float)), 0)
      << name << " at step " << step;
}

TEST(CudagraphsTraining, SmallMlpAdamWMatchesEagerBitwiseOverFiveSteps) {
  EagerAndGraphs mlp(OptimizerKind::kAdamW);
  Trainer& eager = mlp.eager;
  Trainer& graphs = mlp.graphs;
  Hyperparameters hyper;
  hyper.lr = 0.01;
  hyper.weight_decay = 0.01;
  std::mt19937_64 rng(21);
  for (int step = 0; step < 5; ++step) {
    TensorList inputs = {random_tensor({4, 6}, rng), random_tensor({4, 3}, rng)};
    std::vector<double> expected = eager.step(inputs, hyper).to_doubles();
    std::vector<double> got = graphs.step(inputs, hyper).to_doubles();
    EXPECT_EQ(got, expected) << "loss at step " << step;
    for (const std::string& name : eager.state_names()) {
      expect_same_state(eager, graphs, name, static_cast<size_t>(step));
    }
  }
  nlohmann::json stats = grove::compiler::backends::tree_json(tree_manager_for(kSimDevice).stats());
  EXPECT_GE(stats["recordings"].get<int64_t>(), 3) << stats.dump();
  EXPECT_GE(stats["replays"].get<int64_t>(), 3) << stats.dump();
  reset_tree_managers();
}

// Note [Implicit generator]: a forward drawing dropout masks from the device's
// generator trains bitwise like eager under the same seeds (the backward
// reuses the forward's saved offsets), and each step draws a new mask.
// Micro-batches: two forwards, then their two backwards (in both orders), and
// an ordinary step between rounds; the second forward must not end the
// first's generation (its saved activations stay readable), and every loss
// and gradient equals eager's.
TEST(CudagraphsTraining, MicroBatchForwardsThenBackwardsMatchEagerBitwise) {
  EagerAndGraphs mlp(OptimizerKind::kAdamW);
  Trainer& eager = mlp.eager;
  Trainer& graphs = mlp.graphs;
  Hyperparameters hyper;
  hyper.lr = 0.01;
  std::mt19937_64 rng(5);
  for (int round = 0; round < 6; ++round) {
    TensorList first = {random_tensor({4, 6}, rng), random_tensor({4, 3}, rng)};
    TensorList second = {random_tensor({4, 6}, rng), random_tensor({4, 3}, rng)};
    std::vector<std::vector<double>> losses[2];
    for (Trainer* trainer : {&eager, &graphs}) {
      Trainer::PendingBackward a = trainer->forward(first);
      Trainer::PendingBackward b = trainer->forward(second);
      trainer->backward(round % 2 == 0 ? a : b);
      trainer->backward(round % 2 == 0 ? b : a);
      losses[trainer == &graphs].push_back(a.loss.to_doubles());
      losses[trainer == &graphs].push_back(b.loss.to_doubles());
    }
    EXPECT_EQ(losses[1], losses[0]) << "micro-batch losses in round " << round;
    for (const std::string& name : eager.state_names()) {
      expect_same_state(eager, graphs, name, static_cast<size_t>(round));
    }
    TensorList inputs = {random_tensor({4, 6}, rng), random_tensor({4, 3}, rng)};
    EXPECT_EQ(graphs.step(inputs, hyper).to_doubles(), eager.step(inputs, hyper).to_doubles())
        << "step after round " << round;
  }
  EXPECT_GT(tree_manager_for(kSimDevice).counters().replays, 0u);
  reset_tree_managers();
}

// Note [A training step begins with its named invocation]
// (cudagraph_trees/generations.h): a model that needs no gradient feeds the
// trainer's forward inside one named invocation (dynamo's graphs around a
// graph break). The forward must not begin a step there, which would reclaim
// the output it reads; every loss and gradient equals eager's, and the tree
// stops growing (each round replays). First rounds without a key let the
// forwards mark steps, so the keyed rounds also show that a named invocation
// then begins the step.
TEST(CudagraphsTraining, AForwardFedInsideItsNamedInvocationMatchesEagerAndReplays) {
  EagerAndGraphs mlp(OptimizerKind::kAdamW);
  Trainer& eager = mlp.eager;
  Trainer& graphs = mlp.graphs;
  compiler::ir::ProgramBuilder b("feed", kSimDevice);
  b.output(b.gelu(b.input("x", {4, 6})));
  compiler::ir::Program feed_program = b.build();
  compiler::backends::CompiledModel feed_eager =
      compiler::backends::compile(feed_program, {.backend = "eager"});
  compiler::backends::CompiledModel feed_graphs =
      compiler::backends::compile(feed_program, {.backend = "cudagraphs"});
  std::mt19937_64 rng(17);
  const TreeManager& trees = tree_manager_for(kSimDevice);
  uint64_t recordings_after_warm_rounds = 0;
  // Each round's loss outlives its round, so a path ends only where a
  // generation does (not because every output died).
  Tensor held_loss[2];
  for (int round = 0; round < 9; ++round) {
    TensorList inputs = {random_tensor({4, 6}, rng), random_tensor({4, 3}, rng)};
    const bool keyed = round >= 2;
    std::vector<double> losses[2];
    for (Trainer* trainer : {&eager, &graphs}) {
      const compiler::backends::CompiledModel& feed = trainer == &graphs ? feed_graphs : feed_eager;
      // Unkeyed rounds train on the batch itself: separate top-level calls
      // would end the feed's generation (the caller's to avoid).
      if (keyed) OuterInvocation::begin(1000 + static_cast<uint64_t>(round));
      Tensor fed = keyed ? feed(TensorList{inputs[0]})[0] : inputs[0];
      Trainer::PendingBackward pending;
      ASSERT_NO_THROW(pending = trainer->forward({fed, inputs[1]}))
          << "round " << round << (trainer == &graphs ? " (cudagraphs)" : " (eager)");
      if (keyed) OuterInvocation::end();
      trainer->backward(pending);
      losses[trainer == &graphs] = pending.loss.to_doubles();
      held_loss[trainer == &graphs] = pending.loss;  // a caller that logs it
    }
    EXPECT_EQ(losses[1], losses[0]) << "loss in round " << round;
    for (const std::string& name : eager.state_names()) {
      expect_same_state(eager, graphs, name, static_cast<size_t>(round));
    }
    if (round == 5) recordings_after_warm_rounds = trees.counters().recordings;
  }
  EXPECT_EQ(trees.counters().recordings, recordings_after_warm_rounds)
      << "the keyed rounds kept recording: each round's path grew under the last";
  EXPECT_GE(trees.counters().replays, 6u);
  reset_tree_managers();
}

TEST(CudagraphsTraining, ImplicitDropoutMatchesEagerBitwiseAndDrawsANewMaskEachStep) {
  register_cudagraphs_backend();
  reset_tree_managers();
  compiler::ir::ProgramBuilder b("dropout_mlp", kSimDevice);
  ValueId x = b.input("x", {4, 6});
  ValueId w1 = b.param("fc1.weight", {8, 6}, DType::kF32, compiler::ir::normal_init(0.5, 1));
  ValueId w2 = b.param("fc2.weight", {3, 8}, DType::kF32, compiler::ir::normal_init(0.5, 3));
  ValueId hidden = b.dropout(b.gelu(b.linear(x, w1, compiler::ir::kNoValue, "fc1")), 0.5, "drop");
  b.output(b.linear(hidden, w2, compiler::ir::kNoValue, "fc2"));
  compiler::ir::Program model = b.build();
  ValueId loss = training::add_mse_loss(model, model.outputs()[0]);
  Trainer eager(model, loss, {.backend = "eager", .optimizer = OptimizerKind::kSgdMomentum});
  Trainer graphs(model, loss, {.backend = "cudagraphs", .optimizer = OptimizerKind::kSgdMomentum});
  Hyperparameters hyper;
  hyper.lr = 0.05;
  std::mt19937_64 rng(33);
  TensorList inputs = {random_tensor({4, 6}, rng), random_tensor({4, 3}, rng)};
  std::vector<double> losses;
  for (int step = 0; step < 5; ++step) {
    runtime::default_generator(kSimDevice).manual_seed(1000 + static_cast<uint64_t>(step % 2));
    std::vector<double> expected = eager.step(inputs, hyper).to_doubles();
    runtime::default_generator(kSimDevice).manual_seed(1000 + static_cast<uint64_t>(step % 2));
    std::vector<double> got = graphs.step(inputs, hyper).to_doubles();
    EXPECT_EQ(got, expected) << "loss at step " << step;
    for (std::string name : {"fc1.weight", "fc2.weight"}) {
      expect_same_state(eager, graphs, name, static_cast<size_t>(step));
    }
    losses.push_back(expected[0]);
  }
  // Same inputs, alternating seeds: the masks (and so the losses) differ
  // between consecutive steps beyond what one SGD step explains.
  EXPECT_NE(losses[0], losses[1]);
  nlohmann::json stats = grove::compiler::backends::tree_json(tree_manager_for(kSimDevice).stats());
  EXPECT_GE(stats["replays"].get<int64_t>(), 3) << stats.dump();
  reset_tree_managers();
}

// A learning-rate schedule under "cudagraphs": the optimizer's hyper-parameter
// scalars keep their addresses (Note [Hyperparameters on the device]), so
// each step replays the recorded optimizer graph with that step's values, and
// the params equal eager's bit for bit after every step.
TEST(CudagraphsTraining, SgdMomentumWithALearningRateScheduleMatchesEagerBitwise) {
  EagerAndGraphs mlp(OptimizerKind::kSgdMomentum);
  Trainer& eager = mlp.eager;
  Trainer& graphs = mlp.graphs;
  const std::vector<double> schedule = {0.1, 0.1, 0.1, 0.05, 0.02, 0.2, 0.01, 0.3, 0.07, 0.07};
  std::mt19937_64 rng(34);
  for (size_t step = 0; step < schedule.size(); ++step) {
    Hyperparameters hyper;
    hyper.lr = schedule[step];
    TensorList inputs = {random_tensor({4, 6}, rng), random_tensor({4, 3}, rng)};
    EXPECT_EQ(graphs.step(inputs, hyper).to_doubles(), eager.step(inputs, hyper).to_doubles())
        << "loss at step " << step;
    for (const std::string& name : eager.state_names()) {
      expect_same_state(eager, graphs, name, step);
    }
  }
  EXPECT_EQ(graphs.hyperparameter_copies(), 7u);
  nlohmann::json stats = grove::compiler::backends::tree_json(tree_manager_for(kSimDevice).stats());
  EXPECT_GE(stats["replays"].get<int64_t>(), 20) << stats.dump();
  EXPECT_EQ(stats["eager_calls"].get<int64_t>(), 0) << stats.dump();
  reset_tree_managers();
}

}  // namespace
}  // namespace grove::cudagraph_trees::backend
