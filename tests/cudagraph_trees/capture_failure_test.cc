// A capture that fails after the pool was restored to a replayed node's
// checkpoint leaves the tree, the path and the pool consistent.
#include "compiler/backends/backend_stats_json.h"
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

class TreeCaptureFailure : public TreeTest {};

// 2 * x, then (during capture only a violation) a host read of the result.
Body reads_on_host() {
  return [](const TensorList& in) {
    Tensor out = scale(in[0], 2.0f);
    float first = out.to_vector<float>()[0];  // forbidden during capture
    launch_add_scalar_in_place(out, first > 1e30f ? 1.0f : 0.0f);
    return TensorList{out};
  };
}

TEST_P(TreeCaptureFailure, FailureAfterACheckpointRestoreLeavesTheTreeConsistent) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  FunctionId g = trees.register_function(spec("reads_on_host", reads_on_host()));
  FunctionId h = trees.register_function(spec("add_one", [](const TensorList& in) {
    Tensor out = scale(in[0], 1.0f);
    launch_add_scalar_in_place(out, 1.0f);
    return TensorList{out};
  }));
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE(step);
    InvocationScope call(trees);
    Tensor x = random_tensor(rng, {64});
    TensorList a = trees.run(f, {x});
    if (step < 2) continue;  // f warms up, then records
    // step 2: g warms up after f's replay (restore 1); step 3: g's recording
    // fails after restore 2; later steps run g eagerly.
    TensorList b = trees.run(g, {a[0]});
    trees.verify();
    TensorList c = trees.run(h, {b[0]});
    EXPECT_VALUES(a[0], host_scale(host(x), 2.0f));
    EXPECT_VALUES(b[0], host_scale(host(x), 4.0f));
    EXPECT_VALUES(c[0], host_add_scalar(host_scale(host(x), 4.0f), 1.0f));
    trees.verify();
  }
  EXPECT_EQ(trees.counters().capture_failures, 1u);
  EXPECT_GE(trees.counters().checkpoint_restores, 2u);
  EXPECT_EQ(trees.counters().fallback_decisions.at("capture failure"), 1u);
  EXPECT_EQ(trees.counters().fallback_calls.at("capture failure"), 3u);
  EXPECT_EQ(trees.roots(f).size(), 1u);
  EXPECT_TRUE(trees.roots(f)[0]->children(g).empty());
  trees.verify();
  trees.shutdown();
  EXPECT_EQ(grove::compiler::backends::tree_json(trees.stats())["pool"]["live_blocks_at_shutdown"],
            0u);
}

// Outputs of 4 MiB need segments of their own, which a branch's checkpoint
// restore must keep (its sibling's graph still writes them).
TEST_P(TreeCaptureFailure, SegmentsOfASiblingBranchSurviveRestoresAndFailures) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  constexpr int64_t kBig = int64_t{1} << 20;  // floats
  FunctionId f = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  FunctionId g = trees.register_function(
      spec("triple_big", [](const TensorList& in) { return TensorList{scale(in[0], 3.0f)}; }));
  FunctionId k = trees.register_function(spec("fails_big", [](const TensorList& in) {
    Tensor scratch = scale(Tensor(in[0].storage(), {kBig / 2}, {1}, 0, runtime::DType::kF32), 1.0f);
    Tensor more = scale(in[0], 1.0f);
    Tensor out = scale(in[0], 5.0f);
    float first = out.to_vector<float>()[0];  // forbidden during capture
    launch_add_scalar_in_place(out, first > 1e30f ? 1.0f : 0.0f);
    return TensorList{out};
  }));
  FunctionId m = trees.register_function(spec("quadruple_big", [](const TensorList& in) {
    Tensor scratch = scale(Tensor(in[0].storage(), {kBig / 2}, {1}, 0, runtime::DType::kF32), 1.0f);
    Tensor more = scale(in[0], 1.0f);
    return TensorList{scale(in[0], 4.0f)};
  }));
  Tensor x = random_tensor(rng, {kBig});
  Floats x_host = host(x);
  // g on every step after f records; k and m alternate with it on later steps.
  for (int step = 0; step < 12; ++step) {
    SCOPED_TRACE(step);
    InvocationScope call(trees);
    TensorList a = trees.run(f, {x});
    if (step < 2) continue;
    FunctionId second = step < 5 ? g : (step % 3 == 0 ? g : (step % 3 == 1 ? k : m));
    float factor = second == g ? 3.0f : (second == k ? 5.0f : 4.0f);
    TensorList b = trees.run(second, {a[0]});
    Floats got = host(b[0]);
    for (size_t i = 0; i < got.size(); i += 4099) {
      ASSERT_FLOAT_EQ(got[i], x_host[i] * 2.0f * factor) << "element " << i;
    }
    trees.verify();
    // Every segment a recorded node's checkpoint names is still the pool's.
    runtime::PoolCheckpoint now =
        runtime::device_context(device()).allocator().checkpoint(trees.pool());
    for (FunctionId child : {g, m}) {
      for (const TreeNode* node : trees.roots(f)[0]->children(child)) {
        for (const runtime::SegmentState& segment : node->checkpoint().segments) {
          bool present = false;
          for (const runtime::SegmentState& kept : now.segments)
            present |= kept.base == segment.base;
          EXPECT_TRUE(present) << "graph node " << node->id() << "'s segment " << segment.base
                               << " was released";
        }
      }
    }
  }
  EXPECT_EQ(trees.counters().capture_failures, 1u);
  EXPECT_EQ(trees.roots(f)[0]->children(g).size(), 1u);
  EXPECT_EQ(trees.roots(f)[0]->children(m).size(), 1u);
  trees.shutdown();
  EXPECT_EQ(grove::compiler::backends::tree_json(trees.stats())["pool"]["live_blocks_at_shutdown"],
            0u);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeCaptureFailure);

}  // namespace
}  // namespace grove::testing
