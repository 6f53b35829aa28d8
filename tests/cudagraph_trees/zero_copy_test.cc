// Zero-copy input binding (Note [Zero-copy inputs]): a copied input read only
// by grove kernels is bound by patching kernel-node pointers when its address
// changes; everything the patch cannot express is copied.
#include "compiler/backends/backend_stats_json.h"
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

class TreeZeroCopy : public TreeTest {};

TEST_P(TreeZeroCopy, ChangingAnInputAddressPatchesInsteadOfCopying) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(double_plus_param());
  Tensor w = random_tensor(rng, {64});
  std::vector<Tensor> xs;  // all kept alive: every call sees a new address
  for (int i = 0; i < 6; ++i) xs.push_back(random_tensor(rng, {64}));
  trees.run(f, {xs[0], w});  // warm-up
  trees.run(f, {xs[1], w});  // recording: the placeholder is filled once
  ASSERT_EQ(trees.counters().recordings, 1u);
  EXPECT_EQ(trees.counters().zero_copy_inputs, 1u);
  EXPECT_TRUE(trees.roots(f)[0]->inputs().zero_copied(0));
  for (int i = 2; i < 6; ++i) {
    TensorList out = trees.run(f, {xs[i], w});
    EXPECT_VALUES(out[0], double_plus(host(xs[i]), host(w)));
    EXPECT_EQ(trees.counters().input_patches, static_cast<uint64_t>(i - 1));
  }
  // The same address again: neither a copy nor a patch.
  TensorList out = trees.run(f, {xs[5], w});
  EXPECT_VALUES(out[0], double_plus(host(xs[5]), host(w)));
  EXPECT_EQ(trees.counters().input_patches, 4u);
  EXPECT_EQ(trees.counters().input_copies, 0u);
  EXPECT_EQ(trees.counters().replays, 5u);
  EXPECT_EQ(trees.counters().recordings, 1u);
  // Back to an earlier tensor whose contents changed: still right.
  launch_add_scalar_in_place(xs[2], 0.5f);
  out = trees.run(f, {xs[2], w});
  EXPECT_VALUES(out[0], double_plus(host(xs[2]), host(w)));
  EXPECT_EQ(grove::compiler::backends::tree_json(trees.stats())["input_patches"], 5u);
  trees.verify();
}

TEST_P(TreeZeroCopy, DisabledByConfigCopiesEveryReplay) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.zero_copy_inputs = false;
  TreeManager& trees = make_manager(config);
  FunctionId f = trees.register_function(double_plus_param());
  Tensor w = random_tensor(rng, {64});
  std::vector<Tensor> xs;
  for (int i = 0; i < 5; ++i) xs.push_back(random_tensor(rng, {64}));
  for (int i = 0; i < 5; ++i) {
    TensorList out = trees.run(f, {xs[i], w});
    EXPECT_VALUES(out[0], double_plus(host(xs[i]), host(w)));
  }
  EXPECT_EQ(trees.counters().input_copies, 3u);
  EXPECT_EQ(trees.counters().input_patches, 0u);
  EXPECT_EQ(trees.counters().zero_copy_inputs, 0u);
}

TEST_P(TreeZeroCopy, MisalignedAddressIsCopiedAndThePatchUndone) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  MovedInput moved = record_then_move_input(trees, rng);  // the replay is patched
  TensorList out = moved.out;
  EXPECT_EQ(trees.counters().input_patches, 1u);
  // 4 bytes off the placeholder's alignment: kernels specialised for aligned
  // access must not see it, so it is copied (and the slots point back).
  out = trees.run(moved.f, {moved.view_at(1), moved.w});
  EXPECT_VALUES(out[0], double_plus(host(moved.view_at(1)), host(moved.w)));
  EXPECT_EQ(trees.counters().zero_copy_refusals, 1u);
  EXPECT_EQ(trees.counters().input_copies, 1u);
  EXPECT_EQ(trees.counters().input_patches, 2u);          // back to the placeholder
  out = trees.run(moved.f, {moved.view_at(4), moved.w});  // 16 bytes: patched again
  EXPECT_VALUES(out[0], double_plus(host(moved.view_at(4)), host(moved.w)));
  EXPECT_EQ(trees.counters().input_patches, 3u);
  EXPECT_EQ(trees.counters().input_copies, 1u);
  trees.verify();
}

// Rule 3 holds by construction: the returned input is a view of the caller's
// tensor (Note [Views of copied inputs]), so the placeholder need not be
// filled and the input is patched like any other.
TEST_P(TreeZeroCopy, InputReturnedAsAnOutputIsPatchedAndReturnedAsTheCallersTensor) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  // Returns a view of its input next to a computed value.
  FunctionId f = trees.register_function(spec("passthrough", [](const TensorList& in) {
    return TensorList{in[0].view({4, 8}), scale(in[0], 3.0f)};
  }));
  std::vector<Tensor> xs;  // all kept alive: every call sees a new address
  for (int i = 0; i < 4; ++i) {
    xs.push_back(random_tensor(rng, {32}));
    const Tensor& x = xs.back();
    TensorList out = trees.run(f, {x});
    EXPECT_VALUES(out[0], host(x));
    EXPECT_EQ(out[0].storage().get(), x.storage().get());
    EXPECT_VALUES(out[1], host_scale(host(x), 3.0f));
  }
  EXPECT_EQ(trees.counters().zero_copy_inputs, 1u);
  EXPECT_EQ(trees.counters().input_copies, 0u);
  EXPECT_EQ(trees.counters().input_patches, 2u);
  trees.verify();
}

TEST_P(TreeZeroCopy, MutatedInputIsPatchedWhileNoInputAliasesItAndRunsEagerlyWhenOneDoes) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  // p += 1 (static, mutated); returns x + p.
  FunctionId f = trees.register_function(spec("bump_param_add",
                                              [](const TensorList& in) {
                                                launch_add_scalar_in_place(in[1], 1.0f);
                                                return TensorList{add(in[0], in[1])};
                                              },
                                              /*static*/ {1}, /*mutated*/ {1}));
  Tensor p = random_tensor(rng, {64});
  Floats expected_p = host(p);
  std::vector<Tensor> xs;
  for (int i = 0; i < 4; ++i) xs.push_back(random_tensor(rng, {64}));
  for (int i = 0; i < 4; ++i) {
    TensorList out = trees.run(f, {xs[i], p});
    expected_p = host_add_scalar(expected_p, 1.0f);
    EXPECT_VALUES(p, expected_p);
    EXPECT_VALUES(out[0], host_add(host(xs[i]), expected_p));
  }
  EXPECT_EQ(trees.counters().input_patches, 2u);  // the replays of xs[2] and xs[3]
  // x aliasing the written param: eager code reads p after the bump, which
  // neither a copy (a pre-write snapshot) nor a patch (the recording's order)
  // reproduces, so the call runs eagerly (Note [Copied inputs aliasing written
  // inputs]); the patched slots are not touched.
  Floats before = host(p);
  TensorList out = trees.run(f, {p, p});
  EXPECT_EQ(trees.counters().eager_calls, 1u);
  EXPECT_EQ(trees.counters().input_copies, 0u);
  EXPECT_EQ(trees.counters().input_patches, 2u);
  expected_p = host_add_scalar(before, 1.0f);
  EXPECT_VALUES(p, expected_p);
  EXPECT_VALUES(out[0], host_add(expected_p, expected_p));
  trees.verify();
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeZeroCopy);

}  // namespace
}  // namespace grove::testing
