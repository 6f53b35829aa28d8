// What the tree's nodes hold on the host grows linearly with the nodes: a
// path of N piecewise segments (one function each, as the graph backend
// registers them) once held N^2 / 2 child slots (Note [Child slots by
// function], cudagraph_trees/tree_node.h; issue 35, case 13).
#include "compiler/backends/backend_stats_json.h"
#include "cudagraph_trees/tree_introspection.h"
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

class Bookkeeping : public TreeTest {
 protected:
  // Records a chain of `length` functions (warm-up, recording, replay) and
  // returns the manager's "bookkeeping" stats after the replay.
  nlohmann::json chain_bookkeeping(size_t length, std::mt19937& rng) {
    TreeManager& trees = make_manager();
    std::vector<FunctionId> chain;
    for (size_t i = 0; i < length; ++i) {
      const float factor = i % 2 == 0 ? 2.0f : 0.5f;
      chain.push_back(trees.register_function(
          spec("segment" + std::to_string(i),
               [factor](const TensorList& in) { return TensorList{scale(in[0], factor)}; })));
    }
    for (int step = 0; step < 3; ++step) {
      InvocationScope call(trees);
      Tensor x = random_tensor(rng, {64});
      Tensor value = x;
      for (FunctionId f : chain) value = trees.run(f, {value})[0];
      EXPECT_VALUES(value, host_scale(host(x), length % 2 == 0 ? 1.0f : 2.0f));
    }
    trees.verify();
    EXPECT_EQ(trees.node_count(), length);
    EXPECT_EQ(trees.counters().replays, length);
    nlohmann::json bookkeeping = grove::compiler::backends::tree_json(trees.stats())["bookkeeping"];
    trees.shutdown();
    manager_.reset();
    return bookkeeping;
  }
};

TEST_P(Bookkeeping, PiecewisePathsCostLinearHostMemory) {
  GROVE_SEEDED_RNG(rng);
  const size_t length = 200;
  nlohmann::json one = chain_bookkeeping(length, rng);
  nlohmann::json two = chain_bookkeeping(2 * length, rng);
  // One slot per node (its child's function) and one root slot.
  EXPECT_LE(one["child_slots"].get<size_t>(), length + 1) << one.dump();
  EXPECT_LE(two["child_slots"].get<size_t>(), 2 * length + 1) << two.dump();
  for (const char* key : {"checkpoint_blocks", "path_list_entries", "estimated_host_bytes"}) {
    // Twice the nodes: about twice the bookkeeping (four times if quadratic).
    EXPECT_LE(two[key].get<double>(), 2.5 * one[key].get<double>())
        << key << ": " << one.dump() << " then " << two.dump();
  }
  EXPECT_LE(two["estimated_host_bytes"].get<size_t>(), 2 * length * size_t{4096}) << two.dump();
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(Bookkeeping);

}  // namespace
}  // namespace grove::testing
