// Tree shape: chains become children, branches become siblings that share
// pool memory, and liveness decides where a path ends.
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

class TreeShape : public TreeTest {};

TEST_P(TreeShape, ChainRecordsSecondFunctionAsChildAndFeedsOutputWithoutCopy) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  CountedBody f_body, g_body;
  FunctionId f = trees.register_function(spec(
      "f", f_body.wrap([](const TensorList& in) { return TensorList{add(in[0], in[1])}; }), {1}));
  FunctionId g = trees.register_function(
      spec("g", g_body.wrap([](const TensorList& in) { return TensorList{scale(in[0], 0.5f)}; })));
  Tensor w = random_tensor(rng, {128});
  for (int step = 0; step < 5; ++step) {
    InvocationScope call(trees);  // one compiled call with two segments
    Tensor x = random_tensor(rng, {128});
    TensorList a = trees.run(f, {x, w});
    TensorList b = trees.run(g, {a[0]});
    Floats sum = host_add(host(x), host(w));
    EXPECT_VALUES(a[0], sum);
    EXPECT_VALUES(b[0], host_scale(sum, 0.5f));
    trees.verify();
  }
  ASSERT_EQ(trees.roots(f).size(), 1u);
  EXPECT_TRUE(trees.roots(g).empty());
  const TreeNode* f_node = trees.roots(f)[0];
  ASSERT_EQ(f_node->children(g).size(), 1u);
  const TreeNode* g_node = f_node->children(g)[0];
  EXPECT_EQ(g_node->parent(), f_node);
  EXPECT_EQ(g_node->inputs().kinds(), std::vector<InputKind>{InputKind::kManaged});
  EXPECT_EQ(g_node->inputs().copied_count(), 0u);
  EXPECT_EQ(trees.counters().replays, 6u);
  EXPECT_EQ(f_body.count(), 2);
  EXPECT_EQ(g_body.count(), 2);
  EXPECT_EQ(trees.node_count(), 2u);
}

TEST_P(TreeShape, NewBranchAfterReplayRecordsSiblingAfterTwoCheckpointRestores) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("f", [](const TensorList& in) { return TensorList{add(in[0], in[1])}; }, {1}));
  FunctionId g = trees.register_function(
      spec("g", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  FunctionId h = trees.register_function(
      spec("h", [](const TensorList& in) { return TensorList{scale(in[0], 3.0f)}; }));
  Tensor w = random_tensor(rng, {256});
  // Runs f then the branch; returns the pool's live blocks while both outputs are held.
  auto step = [&](FunctionId branch, float factor) {
    InvocationScope call(trees);
    Tensor x = random_tensor(rng, {256});
    TensorList a = trees.run(f, {x, w});
    TensorList out = trees.run(branch, {a[0]});
    EXPECT_VALUES(out[0], host_scale(host_add(host(x), host(w)), factor));
    trees.verify();
    return pool_stats().live_blocks;
  };
  EXPECT_EQ(step(g, 2.0f), 2u);  // warm-ups own their blocks
  EXPECT_EQ(step(g, 2.0f), 2u);  // recordings own their blocks
  EXPECT_EQ(step(g, 2.0f), 0u);  // replay outputs own nothing
  size_t reserved_after_g = pool_stats().reserved_bytes;
  EXPECT_EQ(trees.counters().checkpoint_restores, 0u);

  EXPECT_EQ(step(h, 3.0f), 2u);  // f replays, h warms up: f's output rebound + h's
  EXPECT_EQ(trees.counters().checkpoint_restores, 1u);
  EXPECT_EQ(step(h, 3.0f), 2u);  // f replays, h records as g's sibling
  EXPECT_EQ(trees.counters().checkpoint_restores, 2u);
  EXPECT_EQ(step(h, 3.0f), 0u);
  EXPECT_EQ(step(g, 2.0f), 0u);
  EXPECT_EQ(trees.counters().checkpoint_restores, 2u);

  ASSERT_EQ(trees.roots(f).size(), 1u);
  const TreeNode* f_node = trees.roots(f)[0];
  ASSERT_EQ(f_node->children(g).size(), 1u);
  ASSERT_EQ(f_node->children(h).size(), 1u);
  EXPECT_EQ(f_node->num_descendants(), 2u);
  // Siblings reuse the same pool memory: the pool's peak is a path's, not the sum.
  const TreeNode* g_node = f_node->children(g)[0];
  const TreeNode* h_node = f_node->children(h)[0];
  EXPECT_EQ(g_node->outputs().storages()[0].address, h_node->outputs().storages()[0].address);
  EXPECT_EQ(pool_stats().reserved_bytes, reserved_after_g);
  EXPECT_EQ(trees.counters().recordings, 3u);
  EXPECT_EQ(trees.counters().warmups, 3u);
}

TEST_P(TreeShape, LiveOutputsForceChildrenAndDeadOutputsLetThePathEnd) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  CountedBody counted;
  FunctionId f = trees.register_function(spec(
      "double", counted.wrap([](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; })));
  auto call = [&]() {
    Tensor x = random_tensor(rng, {64});
    TensorList out = trees.run(f, {x});
    EXPECT_VALUES(out[0], host_scale(host(x), 2.0f));
    trees.verify();
    return out;
  };
  trees.mark_step_begin();   // from now on only mark_step_begin() starts generations
  call();                    // warm-up; its output dies at once
  TensorList held = call();  // path ended (all dead): recorded as a root
  ASSERT_EQ(trees.roots(f).size(), 1u);
  const TreeNode* root = trees.roots(f)[0];
  TensorList child_out = call();  // the root's output is alive: recorded as its child
  ASSERT_EQ(root->children(f).size(), 1u);
  const TreeNode* child = root->children(f)[0];
  EXPECT_EQ(trees.current_node(), child);
  held.clear();
  child_out.clear();

  trees.mark_step_begin();
  TensorList first = call();  // replays the root
  EXPECT_EQ(trees.current_node(), root);
  TensorList second = call();  // root's output alive: replays the child
  EXPECT_EQ(trees.current_node(), child);
  first.clear();
  second.clear();
  call();  // all outputs dead: the path ends and the root replays
  EXPECT_EQ(trees.current_node(), root);
  EXPECT_EQ(trees.counters().recordings, 2u);
  EXPECT_EQ(trees.counters().replays, 3u);
  EXPECT_EQ(trees.node_count(), 2u);
  EXPECT_EQ(counted.count(), 3);
}

// The "distinct input shapes" warning names a function once, however many
// parents the function reaches the limit under.
TEST_P(TreeShape, DistinctShapesWarningIsGivenOncePerFunction) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.shape_warn_limit = 2;
  TreeManager& trees = make_manager(config);
  FunctionId parents[] = {
      trees.register_function(
          spec("p1", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; })),
      trees.register_function(
          spec("p2", [](const TensorList& in) { return TensorList{scale(in[0], 3.0f)}; }))};
  FunctionId g = trees.register_function(
      spec("g", [](const TensorList& in) { return TensorList{scale(in[1], 5.0f)}; }));
  for (FunctionId parent : parents) {
    for (int64_t size : {8, 16, 24, 32}) {
      for (int call = 0; call < 3; ++call) {  // warm-up, recording, replay
        InvocationScope scope(trees);
        Tensor p = trees.run(parent, {random_tensor(rng, {8})})[0];
        Tensor x = random_tensor(rng, {size});
        EXPECT_VALUES(trees.run(g, {p, x})[0], host_scale(host(x), 5.0f));
      }
    }
    EXPECT_EQ(trees.roots(parent)[0]->children(g).size(), 4u);
  }
  EXPECT_EQ(count_occurrences(recent_log(), "'g' (inference): recorded a graph for"), 1u)
      << recent_log();
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeShape);

}  // namespace
}  // namespace grove::testing
