// Input copies inside the graph (Note [Input copies inside the graph]): a
// copied input that is not zero-copied is copied by a span copy kernel at the
// head of the recorded graph, re-pointed when the input moves, and disarmed
// when a replay must stage its inputs outside the graph.
#include "compiler/backends/backend_stats_json.h"
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

class TreeGraphCopies : public TreeTest {
 protected:
  // Zero-copy off, so that every copied input is copied (the head kernels are
  // what is under test; zero-copy has its own suite).
  TreeManager& make_copying_manager(bool graph_input_copies = true) {
    TreeConfig config;
    config.zero_copy_inputs = false;
    config.graph_input_copies = graph_input_copies;
    return make_manager(config);
  }
};

size_t head_copy_nodes(const TreeNode& node) {
  size_t count = 0;
  for (const runtime::KernelNodeInfo& info : node.graph()->kernel_nodes()) {
    if (info.kernel_name == "grove_copy_span") ++count;
  }
  return count;
}

TEST_P(TreeGraphCopies, ReplaysCopyInsideTheGraphAndSeeNewContents) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_copying_manager();
  FunctionId f = trees.register_function(double_plus_param());
  Tensor w = random_tensor(rng, {64});
  Tensor x = random_tensor(rng, {64});
  trees.run(f, {x, w});  // warm-up
  trees.run(f, {x, w});  // recording
  ASSERT_EQ(trees.counters().recordings, 1u);
  EXPECT_EQ(trees.counters().graph_copy_inputs, 1u);
  const TreeNode& node = *trees.roots(f)[0];
  EXPECT_TRUE(node.inputs().copied_in_graph(0));
  EXPECT_FALSE(node.inputs().copied_in_graph(1));  // static: never copied
  EXPECT_EQ(head_copy_nodes(node), 1u);
  for (int i = 0; i < 4; ++i) {
    // New contents at the same address: the head kernel reads them.
    launch_add_scalar_in_place(x, 0.25f);
    TensorList out = trees.run(f, {x, w});
    EXPECT_VALUES(out[0], double_plus(host(x), host(w)));
  }
  EXPECT_EQ(trees.counters().replays, 4u);
  EXPECT_EQ(trees.counters().input_copies, 4u);
  EXPECT_EQ(trees.counters().input_copies_in_graph, 4u);
  EXPECT_EQ(trees.counters().copy_source_patches, 0u);
  EXPECT_EQ(grove::compiler::backends::tree_json(trees.stats())["input_copies_in_graph"], 4u);
  trees.verify();
}

TEST_P(TreeGraphCopies, MovedInputsRepointTheHeadCopyAtAnyAlignment) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_copying_manager();
  MovedInput moved = record_then_move_input(trees, rng);  // recorded reading xs[1]
  TensorList out = moved.out;
  EXPECT_VALUES(out[0], double_plus(host(moved.xs[2]), host(moved.w)));
  EXPECT_EQ(trees.counters().copy_source_patches, 1u);
  // 4 and 12 bytes off any 16-byte boundary: the kernel copies bytewise.
  for (int64_t offset : {1, 3, 4, 16}) {
    out = trees.run(moved.f, {moved.view_at(offset), moved.w});
    EXPECT_VALUES(out[0], double_plus(host(moved.view_at(offset)), host(moved.w)));
  }
  EXPECT_EQ(trees.counters().copy_source_patches, 5u);
  // The same address again: no patch.
  out = trees.run(moved.f, {moved.view_at(16), moved.w});
  EXPECT_VALUES(out[0], double_plus(host(moved.view_at(16)), host(moved.w)));
  EXPECT_EQ(trees.counters().copy_source_patches, 5u);
  EXPECT_EQ(trees.counters().input_copies_in_graph, 6u);
  EXPECT_EQ(trees.counters().recordings, 1u);
  EXPECT_EQ(trees.counters().input_patches, 0u);  // zero-copy is off
  trees.verify();
}

TEST_P(TreeGraphCopies, DisabledByConfigCopiesBeforeEachLaunch) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_copying_manager(/*graph_input_copies=*/false);
  FunctionId f = trees.register_function(double_plus_param());
  Tensor w = random_tensor(rng, {64});
  for (int i = 0; i < 5; ++i) {
    Tensor x = random_tensor(rng, {64});
    TensorList out = trees.run(f, {x, w});
    EXPECT_VALUES(out[0], double_plus(host(x), host(w)));
  }
  EXPECT_EQ(trees.counters().graph_copy_inputs, 0u);
  EXPECT_EQ(head_copy_nodes(*trees.roots(f)[0]), 0u);
  EXPECT_EQ(trees.counters().input_copies, 3u);
  EXPECT_EQ(trees.counters().input_copies_in_graph, 0u);
}

// A mutated copied input: copied in by the head kernel, copied back after.
TEST_P(TreeGraphCopies, MutatedInputIsCopiedInInsideAndBackOutside) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_copying_manager();
  FunctionId f = trees.register_function(spec("bump_and_double",
                                              [](const TensorList& in) {
                                                launch_add_scalar_in_place(in[0], 1.0f);
                                                return TensorList{scale(in[0], 2.0f)};
                                              },
                                              /*static*/ {}, /*mutated*/ {0}));
  std::vector<Tensor> xs;
  for (int i = 0; i < 5; ++i) xs.push_back(random_tensor(rng, {32}));
  for (int i = 0; i < 5; ++i) {
    Floats expected = host_add_scalar(host(xs[i]), 1.0f);
    TensorList out = trees.run(f, {xs[i]});
    EXPECT_VALUES(xs[i], expected);
    EXPECT_VALUES(out[0], host_scale(expected, 2.0f));
  }
  EXPECT_EQ(trees.counters().input_copies_in_graph, 3u);
  EXPECT_EQ(trees.counters().input_copy_backs, 4u);  // the recording's and 3 replays'
  trees.verify();
}

// Note [Sources inside placeholders] with head copies: the staged replay
// copies outside the graph, so the head copies must copy nothing then (an
// armed one would copy its old source over the staged values), and copy
// again on the next ordinary replay.
TEST_P(TreeGraphCopies, StagedReplaysDisarmTheHeadCopiesAndLaterReplaysRearmThem) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_copying_manager();
  // Every input stays alive, so no input reuses a block an earlier one had
  // (a head copy left pointing at an old input would read its old values).
  auto fresh = [&] { return kept_random_tensor(rng, {64}); };
  PlaceholderReuse reuse = reuse_a_placeholder(trees, fresh);
  EXPECT_EQ(trees.counters().graph_copy_inputs, 2u);  // f's two inputs
  feed_back_into_a_placeholder(trees, reuse, fresh, 2);
  EXPECT_EQ(trees.counters().staged_input_copies, 2u);
  const uint64_t in_graph_before = trees.counters().input_copies_in_graph;
  // Ordinary inputs again: the head copies are re-armed and re-pointed.
  for (int round = 0; round < 2; ++round) {
    trees.mark_step_begin();
    Tensor a = fresh();
    Tensor b = fresh();
    TensorList out = trees.run(reuse.f, {a, b});
    EXPECT_VALUES(out[0], host_add(host(a), host(b)));
  }
  EXPECT_EQ(trees.counters().staged_input_copies, 2u);
  EXPECT_EQ(trees.counters().input_copies_in_graph, in_graph_before + 4u);
  EXPECT_EQ(trees.counters().recordings, 2u);
  trees.verify();
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeGraphCopies);

}  // namespace
}  // namespace grove::testing
