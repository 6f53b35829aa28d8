// Generations: forward/backward, pending backwards, mark_step_begin(), and
// the stale outputs a generation boundary leaves behind.
#include "runtime/external_storage.h"
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

class TreeGenerations : public TreeTest {
 protected:
  // forward(x, w) -> {loss = act/2, h = x + w, act = 2h}; backward(h, act, grad) -> h + act + grad.
  void RegisterTraining(TreeManager& trees) {
    forward_ = trees.register_function(spec(
        "net:forward",
        [](const TensorList& in) {
          Tensor h = add(in[0], in[1]);
          Tensor act = scale(h, 2.0f);
          return TensorList{scale(act, 0.5f), h, act};
        },
        {1}, {}, CompilationMode::kForward));
    backward_ = trees.register_function(spec(
        "net:backward",
        [](const TensorList& in) { return TensorList{add(add(in[0], in[1]), in[2])}; }, {}, {},
        CompilationMode::kBackward));
  }
  FunctionId forward_, backward_;

  // first(x) -> 2x; second(h) -> 4h: the first hands its output to the second.
  void RegisterHandOff(TreeManager& trees) {
    first_ = trees.register_function(
        spec("first", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
    second_ = trees.register_function(spec(
        "second", [](const TensorList& in) { return TensorList{add(in[0], scale(in[0], 3.0f))}; }));
  }
  FunctionId first_, second_;
};

TEST_P(TreeGenerations, BackwardIsRecordedAsChildOfForwardAndSavedActivationsDieInIt) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  RegisterTraining(trees);
  Tensor w = random_tensor(rng, {64});
  for (int step = 0; step < 5; ++step) {
    Tensor x = random_tensor(rng, {64});
    Tensor grad = random_tensor(rng, {64});
    TensorList forward_out = trees.run(forward_, {x, w});
    Tensor loss = forward_out[0];
    TensorList saved{forward_out[1], forward_out[2], grad};
    forward_out.clear();
    TensorList grads = trees.run(backward_, std::move(saved));
    Floats h = host_add(host(x), host(w));
    EXPECT_VALUES(loss, h);
    EXPECT_VALUES(grads[0], host_add(host_add(h, host_scale(h, 2.0f)), host(grad)));
    trees.verify();
    if (step == 1) {
      // Recording: the activations died inside the backward; loss and gradient remain.
      EXPECT_EQ(pool_stats().live_blocks, 2u);
    }
  }
  EXPECT_TRUE(trees.roots(backward_).empty());
  ASSERT_EQ(trees.roots(forward_).size(), 1u);
  const TreeNode* forward_node = trees.roots(forward_)[0];
  ASSERT_EQ(forward_node->children(backward_).size(), 1u);
  const TreeNode* backward_node = forward_node->children(backward_)[0];
  EXPECT_EQ(backward_node->inputs().kinds(),
            (std::vector<InputKind>{InputKind::kManaged, InputKind::kManaged, InputKind::kCopied}));
  EXPECT_EQ(backward_node->expected_dead_after().size(), 2u);
  EXPECT_EQ(forward_node->checkpoint().allocated_blocks(), 3u);
  EXPECT_EQ(backward_node->checkpoint().allocated_blocks(), 2u);
  EXPECT_EQ(trees.counters().recordings, 2u);
  EXPECT_EQ(trees.counters().replays, 6u);
}

// Note [Several backwards per step]: two forwards, then their two backwards
// (micro-batch gradient accumulation), no mark_step_begin(); the gradients
// summed over the micro-batches equal eager's, in warm-up, recording and replay.
TEST_P(TreeGenerations, TwoForwardsThenTwoBackwardsStayInOneGenerationAndMatchEager) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  RegisterTraining(trees);
  Tensor w = random_tensor(rng, {32});
  for (int step = 0; step < 5; ++step) {
    std::vector<TensorList> saved;
    Floats expected_sum(32, 0.0f);
    for (int micro = 0; micro < 2; ++micro) {
      Tensor x = random_tensor(rng, {32});
      Tensor grad = random_tensor(rng, {32});
      TensorList forward_out = trees.run(forward_, {x, w});
      Floats h = host_add(host(x), host(w));
      EXPECT_VALUES(forward_out[0], h);
      expected_sum = host_add(expected_sum, host_add(host_add(h, host_scale(h, 2.0f)), host(grad)));
      saved.push_back(TensorList{forward_out[1], forward_out[2], grad});
    }
    Floats sum(32, 0.0f);
    for (TensorList& inputs : saved) {
      TensorList grads;
      ASSERT_NO_THROW(grads = trees.run(backward_, std::move(inputs))) << "step " << step;
      sum = host_add(sum, host(grads[0]));
      trees.verify();
    }
    EXPECT_VALUES(Tensor::from_vector(sum, {32}, device()), expected_sum);
  }
  EXPECT_TRUE(trees.roots(backward_).empty());  // every backward is under the forwards
  EXPECT_EQ(trees.counters().eager_calls, 0u);
  EXPECT_EQ(trees.counters().outputs_poisoned, 0u);
  EXPECT_GT(trees.counters().replays, 0u);
  // The next forward ends the generation as before.
  Tensor x = random_tensor(rng, {32});
  trees.run(forward_, {x, w});
  EXPECT_EQ(trees.state(), PathState::kExecution);
  EXPECT_EQ(trees.current_node()->depth(), 0u);
}

TEST_P(TreeGenerations, ForwardsWithoutBackwardWarnAndDoNotStartGenerations) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  RegisterTraining(trees);
  Tensor w = random_tensor(rng, {16});
  std::vector<Tensor> kept;
  std::vector<Floats> expected;
  for (int step = 0; step < 3; ++step) {
    Tensor x = random_tensor(rng, {16});
    kept.push_back(trees.run(forward_, {x, w})[1]);
    expected.push_back(host_add(host(x), host(w)));
    trees.verify();
  }
  EXPECT_EQ(trees.state(), PathState::kWarmup);  // one growing path of warm-ups
  EXPECT_EQ(trees.current_node()->depth(), 2u);
  EXPECT_EQ(trees.counters().pending_backward_blocks, 2u);
  EXPECT_EQ(count_occurrences(recent_log(), "outputs from a previous step still require backward"),
            1u);
  EXPECT_NE(recent_log().find("mark_step_begin()"), std::string::npos);
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_VALUES(kept[i], expected[i]);

  trees.mark_step_begin();  // overrides the pending backward: a new generation
  Tensor x = random_tensor(rng, {16});
  TensorList out = trees.run(forward_, {x, w});
  EXPECT_VALUES(out[1], host_add(host(x), host(w)));
  EXPECT_EQ(trees.state(), PathState::kRecording);
  EXPECT_EQ(trees.roots(forward_).size(), 1u);
  EXPECT_GE(trees.counters().outputs_poisoned, 3u);
  for (const Tensor& stale : kept) EXPECT_THROW(host(stale), StaleTensorError);
  trees.verify();
}

TEST_P(TreeGenerations, StaleWarmupAndRecordingOutputsThrowThroughAnyView) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  TensorList warmup_out = trees.run(f, {random_tensor(rng, {32})});
  Tensor warmup_view = warmup_out[0].slice(0, 4, 12);
  TensorList recording_out = trees.run(f, {random_tensor(rng, {32})});
  for (const Tensor& stale : {warmup_out[0], warmup_view}) {
    try {
      host(stale);
      ADD_FAILURE() << "expected StaleTensorError";
    } catch (const StaleTensorError& error) {
      std::string message = error.what();
      EXPECT_NE(message.find("output 0 of function 'double' (warm-up run -1"), std::string::npos)
          << message;
      EXPECT_NE(message.find("clone"), std::string::npos);
      EXPECT_NE(message.find("mark_step_begin()"), std::string::npos);
    }
  }
  EXPECT_THROW(warmup_view.data_ptr(), StaleTensorError);
  Tensor x3 = random_tensor(rng, {32});
  TensorList replay_out = trees.run(f, {x3});
  try {
    host(recording_out[0].view({4, 8}));
    ADD_FAILURE() << "expected StaleTensorError";
  } catch (const StaleTensorError& error) {
    EXPECT_NE(std::string(error.what()).find("(recording, graph node 0"), std::string::npos)
        << error.what();
  }
  Tensor x4 = random_tensor(rng, {32});
  TensorList replay_again = trees.run(f, {x4});
  EXPECT_VALUES(replay_again[0], host_scale(host(x4), 2.0f));
  // Overwritten by the later replay of the same graph (Note [Kept replay outputs]).
  EXPECT_THROW(host(replay_out[0]), StaleTensorError);
  EXPECT_EQ(trees.counters().outputs_poisoned, 2u);
}

// Note [A replay that throws] (tree_manager.h); the fuzzer's seed 26608.
TEST_P(TreeGenerations, StaleInputThatFailsAReplayLeavesThePathWhereItWas) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  trees.run(f, {random_tensor(rng, {32})});  // warm-up
  trees.mark_step_begin();
  TensorList recorded = trees.run(f, {random_tensor(rng, {32})});
  ASSERT_EQ(trees.node_count(), 1u);
  // A new step invalidates the recording's output; feeding it back throws
  // while node 0 binds its inputs.
  trees.mark_step_begin();
  EXPECT_THROW(trees.run(f, {recorded[0]}), StaleTensorError);
  trees.verify();
  EXPECT_EQ(trees.counters().replays, 0u);
  // The same step goes on with a fresh input: node 0 replays (no child of a
  // node that never ran), and no pool block is left to the poisoned tensor.
  Tensor x = random_tensor(rng, {32});
  TensorList out = trees.run(f, {x});
  EXPECT_VALUES(out[0], host_scale(host(x), 2.0f));
  EXPECT_EQ(trees.node_count(), 1u);
  EXPECT_EQ(trees.counters().replays, 1u);
  trees.verify();
  EXPECT_TRUE(recorded[0].storage()->is_poisoned());
}

TEST_P(TreeGenerations, StaleGradientsGetTheGradientAccumulationMessage) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  RegisterTraining(trees);
  TensorList first = trees.run(
      backward_, {random_tensor(rng, {8}), random_tensor(rng, {8}), random_tensor(rng, {8})});
  trees.run(backward_, {random_tensor(rng, {8}), random_tensor(rng, {8}), random_tensor(rng, {8})});
  try {
    host(first[0]);
    ADD_FAILURE() << "expected StaleTensorError";
  } catch (const StaleTensorError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("gradient output 0 of function 'net:backward'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("gradient accumulation"), std::string::npos);
  }
}

TEST_P(TreeGenerations, InvocationScopesNestAndMustBalance) {
  TreeManager& trees = make_manager();
  int64_t before = trees.generation();
  {
    InvocationScope outer(trees);
    InvocationScope inner(trees);
    EXPECT_EQ(trees.generation(), before + 1);
  }
  EXPECT_THROW(trees.end_invocation(), Error);
}

// Note [Stale inputs throw first] (fuzz seed 111): the function writes a
// static input before it reads input 0, and runs eagerly (input 0 aliased the
// written input once). A stale input 0 must throw before the write, so that a
// retry with a fresh tensor does not apply it twice.
TEST_P(TreeGenerations, StaleInputThrowsBeforeAnEagerFallbackWritesAnything) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(spec("bump_then_read",
                                              [](const TensorList& in) {
                                                launch_add_scalar_in_place(in[1], 1.0f);
                                                return TensorList{add(in[0], in[0])};
                                              },
                                              /*static*/ {1}, /*mutated*/ {1}));
  FunctionId g = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  Tensor p = random_tensor(rng, {32});
  Floats expected_p = host_add_scalar(host(p), 1.0f);
  trees.run(f, {p, p});  // decides eager: input 0 aliases the written input 1
  ASSERT_EQ(trees.counters().eager_calls, 1u);
  TensorList warm = trees.run(g, {random_tensor(rng, {32})});  // a warm-up output
  trees.mark_step_begin();
  EXPECT_THROW(trees.run(f, {warm[0], p}), StaleTensorError);
  EXPECT_VALUES(p, expected_p);  // not bumped by the call that threw
  Tensor x = random_tensor(rng, {32});
  TensorList out = trees.run(f, {x, p});  // the retry
  EXPECT_VALUES(p, host_add_scalar(expected_p, 1.0f));
  EXPECT_VALUES(out[0], host_add(host(x), host(x)));
  trees.verify();
}

// Note [Sources inside placeholders] (fuzz seed 1611): an input that lives in
// the block of another input's placeholder must be read before the replay
// copies that other input over it. (Seed 1611 reached it through an output
// that viewed a placeholder; outputs now view the caller's tensor, Note
// [Views of copied inputs], and a placeholder block reused by a later node's
// output is the way left.)
TEST_P(TreeGenerations, ASourceInsideAnotherInputsPlaceholderIsStaged) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  auto fresh = [&] { return kept_random_tensor(rng, {64}); };
  PlaceholderReuse reuse = reuse_a_placeholder(trees, fresh);
  feed_back_into_a_placeholder(trees, reuse, fresh, 3);
  EXPECT_EQ(trees.counters().staged_input_copies, 3u);
}

// Note [Invocations of several models]: two functions that hand an output to
// each other, called as separate top-level calls (the torch door's segments
// around an op PyTorch runs). Without an outer invocation the second call
// starts a generation and reclaims the first one's output while it is read;
// under one, both calls are one generation: the second is recorded under the
// first and replays, with the values of every phase right.
TEST_P(TreeGenerations, CallsUnderOneOuterInvocationShareAGeneration) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  RegisterHandOff(trees);
  const FunctionId first = first_, second = second_;
  {
    // Without the invocation: the second call ends the generation and the
    // output it was handed is stale.
    Tensor x = random_tensor(rng, {256});
    Tensor h = trees.run(first, {x})[0];
    EXPECT_THROW(trees.run(second, {h}), StaleTensorError);
  }
  const size_t poisoned = trees.counters().outputs_poisoned;
  for (int call = 0; call < 5; ++call) {
    Tensor x = random_tensor(rng, {256});
    cudagraph_trees::OuterInvocation::begin(0);
    Tensor h = trees.run(first, {x})[0];
    Tensor y;
    ASSERT_NO_THROW(y = trees.run(second, {h})[0]) << "call " << call;
    cudagraph_trees::OuterInvocation::end();
    Floats expected_h = host_scale(host(x), 2.0f);
    EXPECT_VALUES(h, expected_h);
    EXPECT_VALUES(y, host_scale(expected_h, 4.0f));
    trees.verify();
  }
  EXPECT_TRUE(trees.roots(second).empty());  // always under `first`, never a root
  ASSERT_EQ(trees.roots(first).size(), 1u);
  EXPECT_EQ(trees.roots(first)[0]->children(second).size(), 1u);
  EXPECT_EQ(trees.counters().outputs_poisoned, poisoned);
  EXPECT_GE(trees.counters().replays, 4u);
}

// Keys: calls under the same caller key in successive invocations continue
// one generation (a graph break's two dynamo graphs); a new key starts one.
TEST_P(TreeGenerations, AnOuterInvocationKeyContinuesItsGenerationAcrossInvocations) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId double_it = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  Tensor x = random_tensor(rng, {64});
  cudagraph_trees::OuterInvocation::begin(7);
  Tensor a = trees.run(double_it, {x})[0];
  cudagraph_trees::OuterInvocation::end();
  cudagraph_trees::OuterInvocation::begin(7);
  Tensor b = trees.run(double_it, {a})[0];  // reads `a`: still valid under key 7
  cudagraph_trees::OuterInvocation::end();
  EXPECT_VALUES(b, host_scale(host(x), 4.0f));
  EXPECT_EQ(trees.counters().outputs_poisoned, 0u);
  cudagraph_trees::OuterInvocation::begin(8);
  trees.run(double_it, {x});
  cudagraph_trees::OuterInvocation::end();
  EXPECT_THROW(host(a), StaleTensorError);  // key 8 began a new generation
  EXPECT_THROW(cudagraph_trees::OuterInvocation::end(), Error);
}

// Note [Inputs in reclaimed pool memory]: an output of an ended generation
// that comes back as a bare pointer (DLPack gives PyTorch one; grove sees a
// new external storage, not its poisoned one) throws instead of being read
// while the body allocates over it.
TEST_P(TreeGenerations, AnInputInReclaimedPoolMemoryThrows) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  RegisterHandOff(trees);
  const FunctionId first = first_, second = second_;
  Tensor x = random_tensor(rng, {256});
  Tensor h = trees.run(first, {x})[0];
  Tensor bare = runtime::external_tensor(h.data_ptr(), h.shape(), {}, h.dtype(), device(), {});
  try {
    trees.run(second, {bare});
    FAIL() << "expected StaleTensorError";
  } catch (const StaleTensorError& error) {
    EXPECT_NE(std::string(error.what()).find("input 0"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("grove.invocation()"), std::string::npos);
  }
  // A pool input a live output owns is accepted.
  cudagraph_trees::OuterInvocation::begin(0);
  Tensor live = trees.run(first, {x})[0];
  Tensor view =
      runtime::external_tensor(live.data_ptr(), live.shape(), {}, live.dtype(), device(), {});
  EXPECT_VALUES(trees.run(second, {view})[0], host_scale(host(x), 8.0f));
  cudagraph_trees::OuterInvocation::end();
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeGenerations);

}  // namespace
}  // namespace grove::testing
