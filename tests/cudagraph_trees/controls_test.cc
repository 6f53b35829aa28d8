// The controls a user has over the tree (Note [Function controls]): never
// capture a function (spec or GROVE_CUDAGRAPHS_SKIP), record only some sizes
// of a dynamic dimension, skip the warm-up, reserve the pool up front, and
// run eagerly instead of copying a managed input that keeps moving. Their
// environment variables are read in config_test.cc.
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

using cudagraph_trees::CaptureSizes;
using cudagraph_trees::ManagedInputPolicy;
using cudagraph_trees::NotCapturedError;

class TreeControls : public TreeTest {};

FunctionSpec triple(CountedBody& calls) {
  return spec("triple",
              calls.wrap([](const TensorList& in) { return TensorList{scale(in[0], 3.0f)}; }));
}

TEST_P(TreeControls, NeverCaptureInTheSpecRunsEagerlyEvenInStrictMode) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.strict = true;
  TreeManager& trees = make_manager(config);
  CountedBody calls;
  FunctionSpec skipped = triple(calls);
  skipped.never_capture = true;
  FunctionId f = trees.register_function(skipped);
  for (int i = 0; i < 4; ++i) {
    Tensor x = random_tensor(rng, {32});
    TensorList out = trees.run(f, {x});
    EXPECT_VALUES(out[0], host_scale(host(x), 3.0f));
  }
  EXPECT_EQ(calls.count(), 4);
  EXPECT_EQ(trees.counters().recordings, 0u);
  EXPECT_EQ(trees.counters().eager_calls, 4u);
  EXPECT_EQ(trees.counters().fallback_calls.at("skipped"), 4u);
  EXPECT_EQ(trees.node_count(), 0u);
}

TEST_P(TreeControls, SkipListNamesFunctionsExactlyOrByPrefix) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.skip_functions = {"mlp:segment1", "attention*"};
  TreeManager& trees = make_manager(config);
  auto body = [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; };
  FunctionId exact = trees.register_function(spec("mlp:segment1", body));
  FunctionId other = trees.register_function(spec("mlp:segment10", body));
  FunctionId prefixed = trees.register_function(spec("attention:block3", body));
  for (int step = 0; step < 3; ++step) {
    trees.mark_step_begin();
    for (FunctionId f : {exact, other, prefixed}) {
      Tensor x = random_tensor(rng, {16});
      EXPECT_VALUES(trees.run(f, {x})[0], host_scale(host(x), 2.0f));
    }
  }
  EXPECT_TRUE(trees.function(exact).eager.has_value());
  EXPECT_NE(trees.function(exact).eager->message.find("'mlp:segment1'"), std::string::npos);
  EXPECT_TRUE(trees.function(prefixed).eager.has_value());
  EXPECT_FALSE(trees.function(other).eager.has_value());  // not a prefix entry
  EXPECT_EQ(trees.roots(other).size(), 1u);
  EXPECT_EQ(trees.counters().fallback_calls.at("skipped"), 6u);
}

TEST_P(TreeControls, OnlyTheCaptureSizesAreRecordedOtherSizesRunEagerly) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  CountedBody calls;
  FunctionSpec sized = triple(calls);
  sized.capture_sizes = CaptureSizes{0, 0, {8, 16}};
  FunctionId f = trees.register_function(sized);
  auto call = [&](int64_t rows) {
    trees.mark_step_begin();
    Tensor x = random_tensor(rng, {rows, 4});
    TensorList out = trees.run(f, {x});
    EXPECT_VALUES(out[0], host_scale(host(x), 3.0f));
  };
  for (int i = 0; i < 3; ++i) call(8);   // warm-up, recording, replay
  for (int i = 0; i < 3; ++i) call(5);   // eager each time
  for (int i = 0; i < 3; ++i) call(16);  // warm-up, recording, replay
  EXPECT_EQ(trees.roots(f).size(), 2u);
  EXPECT_EQ(trees.counters().recordings, 2u);
  EXPECT_EQ(trees.counters().replays, 2u);
  EXPECT_EQ(trees.counters().fallback_calls.at("uncaptured size"), 3u);
  EXPECT_FALSE(trees.function(f).eager.has_value());  // decided per call, not for good
  trees.verify();
}

TEST_P(TreeControls, CaptureSizesMustIncrease) {
  TreeManager& trees = make_manager();
  CountedBody calls;
  FunctionSpec sized = triple(calls);
  sized.capture_sizes = CaptureSizes{0, 0, {16, 8}};
  try {
    trees.register_function(sized);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("increasing"), std::string::npos) << error.what();
  }
}

TEST_P(TreeControls, SkipWarmupRecordsOnTheFirstCall) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  CountedBody calls;
  FunctionSpec safe = triple(calls);
  safe.skip_warmup = true;
  FunctionId f = trees.register_function(safe);
  Tensor x = random_tensor(rng, {32});
  TensorList first = trees.run(f, {x});
  EXPECT_VALUES(first[0], host_scale(host(x), 3.0f));
  EXPECT_EQ(trees.counters().warmups, 0u);
  EXPECT_EQ(trees.counters().recordings, 1u);
  trees.mark_step_begin();
  Tensor y = random_tensor(rng, {32});
  EXPECT_VALUES(trees.run(f, {y})[0], host_scale(host(y), 3.0f));
  EXPECT_EQ(trees.counters().replays, 1u);
  EXPECT_EQ(calls.count(), 1);  // the recording only
  trees.verify();
}

TEST_P(TreeControls, InitialPoolBytesAreReservedAndServeTheRecordings) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.initial_pool_bytes = size_t{64} << 20;
  TreeManager& trees = make_manager(config);
  runtime::PoolStats before = pool_stats();
  EXPECT_GE(before.reserved_bytes, size_t{64} << 20);
  EXPECT_EQ(before.allocated_bytes, 0u);
  CountedBody calls;
  FunctionId f = trees.register_function(triple(calls));
  for (int step = 0; step < 3; ++step) {
    trees.mark_step_begin();
    Tensor x = random_tensor(rng, {1024});
    EXPECT_VALUES(trees.run(f, {x})[0], host_scale(host(x), 3.0f));
  }
  EXPECT_EQ(trees.counters().recordings, 1u);
  EXPECT_EQ(pool_stats().reserved_bytes, before.reserved_bytes);  // no new segment
  trees.verify();
}

TEST_P(TreeControls, ManagedInputPolicyEagerRunsTheMovingConsumerEagerly) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.managed_input_move_limit = 2;
  config.managed_input_policy = ManagedInputPolicy::kEager;
  TreeManager& trees = make_manager(config);
  FunctionId make = trees.register_function(spec("make", [](const TensorList& in) {
    TensorList out;
    for (int k = 0; k < 4; ++k) out.push_back(scale(in[0], static_cast<float>(k + 1)));
    return out;
  }));
  CountedBody calls;
  FunctionId consume = trees.register_function(triple(calls));
  for (int step = 0; step < 6; ++step) {
    trees.mark_step_begin();
    Tensor x = random_tensor(rng, {32});
    TensorList made = trees.run(make, {x});
    int pick = step % 4;
    TensorList out = trees.run(consume, {made[pick]});
    EXPECT_VALUES(out[0], host_scale(host(x), 3.0f * static_cast<float>(pick + 1)));
  }
  EXPECT_EQ(trees.counters().demoted_inputs, 0u);
  EXPECT_GE(trees.counters().fallback_calls.at("moving managed input"), 1u);
  const TreeNode* make_node = trees.roots(make)[0];
  EXPECT_LE(make_node->children(consume).size(), 2u);  // no copied-input recording
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeControls);

}  // namespace
}  // namespace grove::testing
