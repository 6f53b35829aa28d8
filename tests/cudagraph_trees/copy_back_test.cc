// Type-(d) input mutation under the copy-back policy (Note [Copy-back of
// mutated inputs]): the caller sees the write at every lifecycle stage, and a
// mutated input that shares memory with another input runs eagerly with why.
#include "compiler/backends/backend_stats_json.h"
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

using cudagraph_trees::InvariantStatus;

class TreeCopyBack : public TreeTest {};

// x += 1; returns 2 * x.
Body bump_then_double() {
  return [](const TensorList& in) {
    launch_add_scalar_in_place(in[0], 1.0f);
    return TensorList{scale(in[0], 2.0f)};
  };
}

void expect_caller_sees_mutation_at_every_stage(TreeTest& test, TreeManager& trees,
                                                std::mt19937& rng) {
  CountedBody counted;
  FunctionId f = trees.register_function(spec("bump", counted.wrap(bump_then_double()), {}, {0}));
  const char* stages[] = {"warm-up", "recording", "replay", "replay", "replay"};
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE(stages[step]);
    Tensor x = Tensor::from_vector(random_floats(rng, 48), {48}, test.GetParam());
    Floats bumped = host_add_scalar(host(x), 1.0f);
    TensorList out = trees.run(f, {x});
    EXPECT_VALUES(x, bumped);
    EXPECT_VALUES(out[0], host_scale(bumped, 2.0f));
    trees.verify();
  }
  EXPECT_EQ(counted.count(), 2);  // warm-up and recording; replays do not call the body
  EXPECT_EQ(trees.counters().warmups, 1u);
  EXPECT_EQ(trees.counters().recordings, 1u);
  EXPECT_EQ(trees.counters().replays, 3u);
  EXPECT_EQ(trees.counters().eager_calls, 0u);
  EXPECT_EQ(trees.counters().copy_back_inputs, 1u);
  EXPECT_EQ(trees.counters().static_input_writes, 0u);
}

TEST_P(TreeCopyBack, CallerSeesTheMutationAtEveryStageWithCopies) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.zero_copy_inputs = false;
  TreeManager& trees = make_manager(config);
  expect_caller_sees_mutation_at_every_stage(*this, trees, rng);
  // One copy-back after the recording's first replay, one per replay.
  EXPECT_EQ(trees.counters().input_copy_backs, 4u);
  EXPECT_EQ(trees.counters().input_copies, 3u);
}

TEST_P(TreeCopyBack, CallerSeesTheMutationAtEveryStageWithZeroCopy) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  expect_caller_sees_mutation_at_every_stage(*this, trees, rng);
  if (device().is_sim()) {
    // sim graphs hold only grove kernels: replays write the caller's tensor directly.
    EXPECT_EQ(trees.counters().zero_copy_inputs, 1u);
    EXPECT_EQ(trees.counters().zero_copy_refusals, 0u);
    EXPECT_EQ(trees.counters().input_copies, 0u);
    EXPECT_EQ(trees.counters().input_copy_backs, 1u);  // only after the recording
  }
}

TEST_P(TreeCopyBack, MutatedInputAliasingAnotherInputFallsBackWithReason) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  // x += 1; returns x + y.
  FunctionId f = trees.register_function(spec("bump_and_add",
                                              [](const TensorList& in) {
                                                launch_add_scalar_in_place(in[0], 1.0f);
                                                return TensorList{add(in[0], in[1])};
                                              },
                                              {}, {0}));
  for (int step = 0; step < 3; ++step) {
    Tensor storage = random_tensor(rng, {32});
    Tensor x(storage.storage(), {16}, {1}, 0, runtime::DType::kF32);
    Tensor y(storage.storage(), {16}, {1}, 8, runtime::DType::kF32);  // overlaps x's second half
    Floats all = host_add_scalar(host(storage), 0.0f);
    for (int i = 0; i < 16; ++i) all[i] += 1.0f;  // eager: the write, then the read through y
    Floats expected(16);
    for (int i = 0; i < 16; ++i) expected[i] = all[i] + all[8 + i];
    TensorList out = trees.run(f, {x, y});
    EXPECT_VALUES(out[0], expected);
    trees.verify();
  }
  EXPECT_EQ(trees.counters().eager_calls, 3u);
  EXPECT_EQ(trees.counters().fallback_decisions.at("mutated inputs"), 1u);
  EXPECT_EQ(trees.node_count(), 0u);
  EXPECT_NE(recent_log().find("mutated input 0 shares memory with input 1"), std::string::npos)
      << recent_log();
}

TEST_P(TreeCopyBack, AliasingThatAppearsAfterRecordingFallsBackOnReplay) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(spec("bump_and_add",
                                              [](const TensorList& in) {
                                                launch_add_scalar_in_place(in[0], 1.0f);
                                                return TensorList{add(in[0], in[1])};
                                              },
                                              {}, {0}));
  for (int step = 0; step < 3; ++step) {  // warm-up, record, replay with separate tensors
    Tensor x = random_tensor(rng, {16});
    Tensor y = random_tensor(rng, {16});
    Floats bumped = host_add_scalar(host(x), 1.0f);
    TensorList out = trees.run(f, {x, y});
    EXPECT_VALUES(out[0], host_add(bumped, host(y)));
    EXPECT_VALUES(x, bumped);
  }
  ASSERT_EQ(trees.counters().replays, 1u);
  Tensor x = random_tensor(rng, {16});
  Floats bumped = host_add_scalar(host(x), 1.0f);
  ASSERT_EQ(trees.roots(f)[0]->check({x, x}), InvariantStatus::kMutatedInputAliased);
  TensorList out = trees.run(f, {x, x});  // eager: both reads see the write
  EXPECT_VALUES(out[0], host_scale(bumped, 2.0f));
  EXPECT_EQ(trees.counters().eager_calls, 1u);
  EXPECT_EQ(trees.counters().fallback_decisions.at("mutated inputs"), 1u);
  trees.verify();
}

// Note [Copy-back into the pool]: the mutated
// input is the previous replay's output, fed back after a new step; this
// replay writes its output into that same block, and a copy-back would then
// overwrite the output with the mutated input. It runs eagerly with why.
TEST_P(TreeCopyBack, MutatedInputInTheTreesPoolFallsBackWithReason) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(spec("bump_x_double_y",
                                              [](const TensorList& in) {
                                                launch_add_scalar_in_place(in[0], 1.0f);
                                                return TensorList{scale(in[1], 2.0f)};
                                              },
                                              {}, /*mutated*/ {0}));
  TensorList last;
  for (int step = 0; step < 3; ++step) {  // warm-up, recording, replay
    trees.mark_step_begin();
    last = trees.run(f, {random_tensor(rng, {32}), random_tensor(rng, {32})});
  }
  ASSERT_EQ(trees.counters().replays, 1u);
  for (int step = 0; step < 2; ++step) {
    trees.mark_step_begin();
    Tensor y = random_tensor(rng, {32});
    Floats bumped = host_add_scalar(host(last[0]), 1.0f);
    Tensor x = last[0];
    TensorList out = trees.run(f, {x, y});
    EXPECT_VALUES(out[0], host_scale(host(y), 2.0f));
    EXPECT_VALUES(x, bumped);
    trees.verify();
    last = out;
  }
  EXPECT_EQ(trees.counters().replays, 1u);
  EXPECT_EQ(grove::compiler::backends::tree_json(trees.stats())["fallback_calls"]["mutated inputs"],
            2)
      << grove::compiler::backends::tree_json(trees.stats()).dump();
  EXPECT_EQ(grove::compiler::backends::tree_json(trees.stats())["rerecord_reasons"].size(), 0u)
      << grove::compiler::backends::tree_json(trees.stats()).dump();
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeCopyBack);

}  // namespace
}  // namespace grove::testing
