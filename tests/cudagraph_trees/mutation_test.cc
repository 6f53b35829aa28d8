// Input mutation (docs/ARCHITECTURE.md, section 4) and the other eager fallbacks: cpu inputs,
// capture failures, strict mode.
#include "compiler/backends/backend_stats_json.h"
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

using cudagraph_trees::NotCapturedError;

class TreeMutation : public TreeTest {};

TEST_P(TreeMutation, MutatingAStaticInputIsCaptured) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(spec("bump_param",
                                              [](const TensorList& in) {
                                                launch_add_scalar_in_place(in[1], 1.0f);
                                                return TensorList{add(in[0], in[1])};
                                              },
                                              /*static*/ {1}, /*mutated*/ {1}));
  Tensor p = random_tensor(rng, {32});
  Floats expected_p = host(p);
  for (int step = 0; step < 5; ++step) {
    Tensor x = random_tensor(rng, {32});
    TensorList out = trees.run(f, {x, p});
    expected_p = host_add_scalar(expected_p, 1.0f);
    EXPECT_VALUES(p, expected_p);
    EXPECT_VALUES(out[0], host_add(host(x), expected_p));
    trees.verify();
  }
  EXPECT_EQ(trees.counters().eager_calls, 0u);
  EXPECT_EQ(trees.counters().recordings, 1u);
  EXPECT_EQ(trees.counters().replays, 3u);
  // Type (b): the graph writes the caller's tensor itself, counted per
  // recording; nothing is copied back.
  EXPECT_EQ(trees.counters().static_input_writes, 1u);
  EXPECT_EQ(trees.counters().managed_input_writes, 0u);
  EXPECT_EQ(trees.counters().copy_back_inputs, 0u);
  EXPECT_EQ(trees.counters().input_copy_backs, 0u);
}

// Note [Copied inputs aliasing written inputs]: a copied input that is a view
// of the static input the function writes must read the written values, as
// eager code does, not the snapshot a replay copies before the write (found
// by the differential fuzzer: an updated buffer fed back in).
TEST_P(TreeMutation, CopiedInputAliasingAWrittenStaticInputRunsEagerlyWithTheReason) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(spec("bump_then_read",
                                              [](const TensorList& in) {
                                                launch_add_scalar_in_place(in[1], 1.0f);
                                                return TensorList{add(in[0], in[0])};
                                              },
                                              /*static*/ {1}, /*mutated*/ {1}));
  Tensor p = random_tensor(rng, {32});
  Floats expected_p = host(p);
  for (int step = 0; step < 3; ++step) {  // warm-up, recording, replay
    Tensor x = random_tensor(rng, {32});
    TensorList out = trees.run(f, {x, p});
    expected_p = host_add_scalar(expected_p, 1.0f);
    EXPECT_VALUES(out[0], host_add(host(x), host(x)));
  }
  ASSERT_EQ(trees.counters().replays, 1u);
  // Now the copied input is p itself: eager reads p after the bump.
  for (int step = 0; step < 2; ++step) {
    TensorList out = trees.run(f, {p, p});
    expected_p = host_add_scalar(expected_p, 1.0f);
    EXPECT_VALUES(p, expected_p);
    EXPECT_VALUES(out[0], host_add(expected_p, expected_p));
    trees.verify();
  }
  EXPECT_EQ(trees.counters().replays, 1u);
  EXPECT_GE(trees.counters().eager_calls, 2u);
  EXPECT_EQ(grove::compiler::backends::tree_json(trees.stats())["fallback_calls"]["mutated inputs"],
            2)
      << grove::compiler::backends::tree_json(trees.stats()).dump();
}

TEST_P(TreeMutation, MutatingAPoolManagedInputIsCaptured) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  FunctionId g = trees.register_function(spec("bump_and_triple",
                                              [](const TensorList& in) {
                                                launch_add_scalar_in_place(in[0], 1.0f);
                                                return TensorList{scale(in[0], 3.0f)};
                                              },
                                              {}, /*mutated*/ {0}));
  for (int step = 0; step < 5; ++step) {
    InvocationScope call(trees);
    Tensor x = random_tensor(rng, {32});
    TensorList a = trees.run(f, {x});
    TensorList b = trees.run(g, {a[0]});
    Floats bumped = host_add_scalar(host_scale(host(x), 2.0f), 1.0f);
    EXPECT_VALUES(a[0], bumped);  // the caller sees the write
    EXPECT_VALUES(b[0], host_scale(bumped, 3.0f));
    trees.verify();
  }
  EXPECT_EQ(trees.counters().eager_calls, 0u);
  ASSERT_EQ(trees.roots(f).size(), 1u);
  EXPECT_EQ(trees.roots(f)[0]->children(g).size(), 1u);
  EXPECT_EQ(trees.counters().replays, 6u);
  // Type (c), counted per recording of g; no copy-back.
  EXPECT_EQ(trees.counters().managed_input_writes, 1u);
  EXPECT_EQ(trees.counters().copy_back_inputs, 0u);
}

TEST_P(TreeMutation, UnderTheEagerPolicyMutatingACopiedInputFallsBackWithReason) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.mutation_policy = cudagraph_trees::MutationPolicy::kEager;
  TreeManager& trees = make_manager(config);
  CountedBody counted;
  FunctionId f = trees.register_function(spec("bump_input", counted.wrap([](const TensorList& in) {
    launch_add_scalar_in_place(in[0], 1.0f);
    return TensorList{scale(in[0], 2.0f)};
  }),
                                              {}, /*mutated*/ {0}));
  for (int step = 0; step < 4; ++step) {
    Tensor x = random_tensor(rng, {32});
    Floats bumped = host_add_scalar(host(x), 1.0f);
    TensorList out = trees.run(f, {x});
    EXPECT_VALUES(x, bumped);  // eager semantics: the caller's tensor is written
    EXPECT_VALUES(out[0], host_scale(bumped, 2.0f));
    trees.verify();
  }
  EXPECT_EQ(counted.count(), 4);
  EXPECT_EQ(trees.counters().eager_calls, 4u);
  EXPECT_EQ(trees.counters().fallback_calls.at("mutated inputs"), 4u);
  EXPECT_EQ(trees.counters().fallback_decisions.at("mutated inputs"), 1u);
  EXPECT_EQ(trees.counters().warmups + trees.counters().recordings, 0u);
  EXPECT_NE(recent_log().find("not captured: function 0 'bump_input'"), std::string::npos);
  EXPECT_NE(recent_log().find("input 0"), std::string::npos);
}

TEST_P(TreeMutation, StrictModeThrowsInsteadOfFallingBack) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.strict = true;
  config.mutation_policy = cudagraph_trees::MutationPolicy::kEager;
  TreeManager& trees = make_manager(config);
  FunctionId f = trees.register_function(spec("bump_input",
                                              [](const TensorList& in) {
                                                launch_add_scalar_in_place(in[0], 1.0f);
                                                return TensorList{in[0]};
                                              },
                                              {}, {0}));
  Tensor x = random_tensor(rng, {8});
  Floats before = host(x);
  try {
    trees.run(f, {x});
    FAIL() << "expected NotCapturedError";
  } catch (const NotCapturedError& error) {
    EXPECT_NE(std::string(error.what()).find("mutated inputs"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("strict"), std::string::npos);
  }
  EXPECT_VALUES(x, before);  // nothing ran
}

TEST_P(TreeMutation, CpuInputsRunEagerly) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  for (int step = 0; step < 3; ++step) {
    Tensor x = Tensor::from_vector(random_floats(rng, 16), {16}, runtime::kCpuDevice);
    TensorList out = trees.run(f, {x});
    EXPECT_TRUE(out[0].device().is_cpu());
    EXPECT_VALUES(out[0], host_scale(host(x), 2.0f));
  }
  EXPECT_EQ(trees.counters().fallback_calls.at("cpu tensors"), 3u);
  EXPECT_EQ(trees.node_count(), 0u);
  EXPECT_EQ(grove::compiler::backends::tree_json(trees.stats())["functions"][0]["eager_reason"],
            "input 0 is on cpu");
}

TEST_P(TreeMutation, CaptureFailureFallsBackToEagerAndLeavesThePoolClean) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(spec("reads_on_host", [](const TensorList& in) {
    Tensor out = scale(in[0], 2.0f);
    float first = out.to_vector<float>()[0];  // a host read: forbidden during capture
    launch_add_scalar_in_place(out, first > 1e30f ? 1.0f : 0.0f);
    return TensorList{out};
  }));
  for (int step = 0; step < 4; ++step) {
    Tensor x = random_tensor(rng, {16});
    TensorList out = trees.run(f, {x});
    EXPECT_VALUES(out[0], host_scale(host(x), 2.0f));
    trees.verify();
  }
  EXPECT_EQ(trees.counters().capture_failures, 1u);
  EXPECT_EQ(trees.counters().recordings, 0u);
  EXPECT_EQ(trees.counters().fallback_calls.at("capture failure"), 3u);
  EXPECT_NE(recent_log().find("capture failed"), std::string::npos);
  EXPECT_EQ(pool_stats().live_blocks, 0u);
}

TEST_P(TreeMutation, UnknownFunctionAndBadSpecsAreRejected) {
  TreeManager& trees = make_manager();
  EXPECT_THROW(trees.run(FunctionId{7}, {}), Error);
  EXPECT_THROW(trees.register_function(spec("", [](const TensorList& in) { return in; })), Error);
  EXPECT_THROW(trees.register_function(spec("no_body", nullptr)), Error);
  EXPECT_THROW(
      trees.register_function(spec("twice", [](const TensorList& in) { return in; }, {1, 1})),
      Error);
  FunctionId f = trees.register_function(
      spec("static_out_of_range", [](const TensorList& in) { return in; }, {3}));
  try {
    trees.run(f, {});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("static input index 3"), std::string::npos);
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeMutation);

}  // namespace
}  // namespace grove::testing
