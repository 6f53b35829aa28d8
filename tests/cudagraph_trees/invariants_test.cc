// Invariant checks before replay: static and managed addresses, re-record
// accounting, demotion of moving managed inputs, and the re-record limit.
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

class TreeInvariants : public TreeTest {
 protected:
  // make(x) -> 8 outputs x*(k+1); consume(a) -> a*10, called on output `pick`.
  void SetUpMakeConsume(TreeManager& trees) {
    make_ = trees.register_function(spec("make", [](const TensorList& in) {
      TensorList out;
      for (int k = 0; k < 8; ++k) out.push_back(scale(in[0], static_cast<float>(k + 1)));
      return out;
    }));
    consume_ = trees.register_function(spec(
        "consume",
        consume_calls_.wrap([](const TensorList& in) { return TensorList{scale(in[0], 10.0f)}; })));
  }
  void RunMakeConsume(TreeManager& trees, std::mt19937& rng, int pick) {
    InvocationScope call(trees);
    Tensor x = random_tensor(rng, {32});
    TensorList made = trees.run(make_, {x});
    TensorList out = trees.run(consume_, {made[pick]});
    EXPECT_VALUES(out[0], host_scale(host(x), 10.0f * static_cast<float>(pick + 1)));
    trees.verify();
  }
  FunctionId make_, consume_;
  CountedBody consume_calls_;
};

TEST_P(TreeInvariants, ChangedParameterAddressRecordsSiblingNotCountedTowardLimit) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.rerecord_limit = 1;
  TreeManager& trees = make_manager(config);
  FunctionId f = trees.register_function(
      spec("affine", [](const TensorList& in) { return TensorList{add(in[0], in[1])}; }, {1}));
  std::vector<Tensor> params;
  for (int i = 0; i < 4; ++i) params.push_back(random_tensor(rng, {64}));
  for (int index : {0, 0, 1, 2, 3, 0, 1, 3}) {
    Tensor x = random_tensor(rng, {64});
    TensorList out = trees.run(f, {x, params[index]});
    EXPECT_VALUES(out[0], host_add(host(x), host(params[index])));
    trees.verify();
  }
  EXPECT_EQ(trees.roots(f).size(), 4u);
  EXPECT_EQ(trees.counters().rerecords, 3u);
  EXPECT_EQ(trees.counters().rerecord_reasons.at("static input address changed"), 3u);
  EXPECT_EQ(trees.counters().eager_calls, 0u);
  EXPECT_EQ(trees.counters().replays, 3u);
}

TEST_P(TreeInvariants, ManagedInputThatKeepsMovingIsDemotedAfterFiveChangesThenReplays) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  SetUpMakeConsume(trees);
  for (int step = 0; step <= 6; ++step) RunMakeConsume(trees, rng, step % 8);
  // Step 1 recorded with output 1; steps 2..6 each moved the managed input.
  EXPECT_EQ(trees.counters().demoted_inputs, 1u);
  const TreeNode* make_node = trees.roots(make_)[0];
  const auto& children = make_node->children(consume_);
  ASSERT_EQ(children.size(), 6u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(children[i]->inputs().kinds()[0], InputKind::kManaged) << i;
  }
  EXPECT_EQ(children[5]->inputs().kinds()[0], InputKind::kCopied);
  int calls = consume_calls_.count();
  uint64_t replays = trees.counters().replays;
  for (int pick : {7, 0, 3}) RunMakeConsume(trees, rng, pick);
  EXPECT_EQ(consume_calls_.count(), calls);  // the demoted recording replays for any output
  EXPECT_EQ(trees.counters().replays, replays + 6);
  EXPECT_EQ(make_node->children(consume_).size(), 6u);
  EXPECT_EQ(trees.counters().eager_calls, 0u);
}

TEST_P(TreeInvariants, ReRecordLimitFallsBackToEagerAndSaysWhy) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.rerecord_limit = 3;
  config.managed_input_move_limit = 100;
  TreeManager& trees = make_manager(config);
  SetUpMakeConsume(trees);
  for (int step = 0; step <= 4; ++step) RunMakeConsume(trees, rng, step);
  const TreeNode* make_node = trees.roots(make_)[0];
  EXPECT_EQ(make_node->children(consume_).size(), 4u);
  EXPECT_EQ(trees.counters().eager_calls, 0u);
  RunMakeConsume(trees, rng, 5);  // the 4th unexpected re-record: over the limit
  EXPECT_EQ(trees.counters().eager_calls, 1u);
  EXPECT_EQ(trees.counters().fallback_calls.at("re-record limit"), 1u);
  EXPECT_NE(recent_log().find("exceeded the re-record limit (3)"), std::string::npos)
      << recent_log();
  EXPECT_NE(recent_log().find("pool-managed input address changed"), std::string::npos);
  RunMakeConsume(trees, rng, 1);  // decided for (make node, consume): eager from now on
  RunMakeConsume(trees, rng, 6);
  EXPECT_EQ(trees.counters().eager_calls, 3u);
  EXPECT_EQ(make_node->children(consume_).size(), 4u);
  EXPECT_EQ(trees.counters().fallback_decisions.at("re-record limit"), 1u);
}

TEST_P(TreeInvariants, RecordedDeadOutputAliveAtReplayRecordsSibling) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(spec("pair", [](const TensorList& in) {
    return TensorList{scale(in[0], 2.0f), scale(in[0], 3.0f)};
  }));
  FunctionId g = trees.register_function(
      spec("g", [](const TensorList& in) { return TensorList{scale(in[0], 5.0f)}; }));
  // keep_second: whether the caller holds f's second output while g runs.
  auto step = [&](bool keep_second) {
    InvocationScope call(trees);
    Tensor x = random_tensor(rng, {16});
    TensorList a = trees.run(f, {x});
    Tensor second = keep_second ? a[1] : Tensor();
    Tensor first = a[0];
    a.clear();
    TensorList out = trees.run(g, {first});
    EXPECT_VALUES(out[0], host_scale(host(x), 10.0f));
    if (keep_second) EXPECT_VALUES(second, host_scale(host(x), 3.0f));
    trees.verify();
  };
  step(false);
  step(false);  // records g with f's second output dead
  step(false);
  const TreeNode* f_node = trees.roots(f)[0];
  ASSERT_EQ(f_node->children(g).size(), 1u);
  EXPECT_EQ(f_node->children(g)[0]->expected_dead_before().size(), 1u);
  step(true);  // second output alive: the recording's memory plan no longer holds
  ASSERT_EQ(f_node->children(g).size(), 2u);
  EXPECT_EQ(trees.counters().rerecord_reasons.at("an output that was dead at recording is alive"),
            1u);
  step(true);   // replays the new sibling
  step(false);  // replays the first child again
  EXPECT_EQ(f_node->children(g).size(), 2u);
}

// Note [Layouts of checked inputs]: w is static; base[0:32] and base[0:64]
// start at the same address.
TEST_P(TreeInvariants, StaticInputWithANewShapeAtTheSameAddressRecordsANewGraph) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("double_w", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }, {0}));
  Tensor base = random_tensor(rng, {64});
  for (int64_t rows : {32, 32, 32, 64, 64, 64, 32, 64}) {
    Tensor w = base.slice(0, 0, rows);
    TensorList out = trees.run(f, {w});
    ASSERT_EQ(out[0].shape(), runtime::Shape({rows}));
    EXPECT_VALUES(out[0], host_scale(host(w), 2.0f));
    trees.verify();
  }
  EXPECT_EQ(trees.roots(f).size(), 2u);
  EXPECT_EQ(trees.counters().recordings, 2u);
  EXPECT_EQ(trees.counters().replays, 4u);
  EXPECT_EQ(trees.counters().rerecord_reasons.at(cudagraph_trees::invariant_status_text(
                cudagraph_trees::InvariantStatus::kCheckedInputLayoutChanged)),
            1u);
}

// A pool output [4, 8] passed as itself, then transposed ([8, 4], strides
// [1, 8]) at the same address: the graph of the first layout must not replay.
TEST_P(TreeInvariants, ManagedInputTransposedAtTheSameAddressRecordsANewGraph) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId make = trees.register_function(
      spec("make", [](const TensorList& in) { return TensorList{scale(in[0], 3.0f)}; }));
  // 2 m in m's own layout: transposed inputs go through the contiguous kernel.
  FunctionId twice = trees.register_function(spec("twice", [](const TensorList& in) {
    const Tensor& m = in[0];
    if (m.is_contiguous()) return TensorList{scale(m, 2.0f)};
    return TensorList{scale(m.transpose(0, 1), 2.0f).transpose(0, 1)};
  }));
  for (bool transposed : {false, false, false, true, true, true, false, true}) {
    InvocationScope call(trees);
    Tensor x = random_tensor(rng, {4, 8});
    Tensor m = trees.run(make, {x})[0];
    Tensor input = transposed ? m.transpose(0, 1) : m;
    TensorList out = trees.run(twice, {input});
    ASSERT_EQ(out[0].shape(), input.shape());
    EXPECT_VALUES(out[0], host_scale(host(input), 2.0f));
    trees.verify();
  }
  const TreeNode* make_node = trees.roots(make)[0];
  ASSERT_EQ(make_node->children(twice).size(), 2u);
  for (const TreeNode* child : make_node->children(twice)) {
    EXPECT_EQ(child->inputs().kinds()[0], InputKind::kManaged);
  }
  EXPECT_EQ(trees.counters().eager_calls, 0u);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeInvariants);

}  // namespace
}  // namespace grove::testing
