// One function's lifecycle: warm-up, recording, replay; shapes; outputs.
#include "compiler/backends/backend_stats_json.h"
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

using cudagraph_trees::OutputKind;

class TreeLifecycle : public TreeTest {};

TEST_P(TreeLifecycle, WarmsUpThenRecordsThenReplaysWithoutCallingTheBody) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  CountedBody counted;
  FunctionId f = trees.register_function(spec("affine", counted.wrap([](const TensorList& in) {
    return TensorList{scale(add(in[0], in[1]), 2.0f)};
  }),
                                              {1}));
  Tensor w = random_tensor(rng, {64});
  for (int step = 0; step < 6; ++step) {
    Tensor x = random_tensor(rng, {64});
    TensorList out = trees.run(f, {x, w});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_VALUES(out[0], host_scale(host_add(host(x), host(w)), 2.0f));
    trees.verify();
    PathState expected = step == 0   ? PathState::kWarmup
                         : step == 1 ? PathState::kRecording
                                     : PathState::kExecution;
    EXPECT_EQ(trees.state(), expected) << "step " << step;
  }
  EXPECT_EQ(counted.count(), 2);  // warm-up and recording only
  EXPECT_EQ(trees.counters().warmups, 1u);
  EXPECT_EQ(trees.counters().recordings, 1u);
  EXPECT_EQ(trees.counters().replays, 4u);
  EXPECT_EQ(trees.counters().checkpoint_restores, 0u);
  ASSERT_EQ(trees.roots(f).size(), 1u);
  const TreeNode* root = trees.roots(f)[0];
  EXPECT_EQ(root->inputs().kinds(),
            (std::vector<InputKind>{InputKind::kCopied, InputKind::kStatic}));
  EXPECT_EQ(trees.node_count(), 1u);
  EXPECT_FALSE(root->kernel_free());
}

TEST_P(TreeLifecycle, TwoInputShapesMakeTwoRoots) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  CountedBody counted;
  FunctionId f = trees.register_function(spec(
      "triple", counted.wrap([](const TensorList& in) { return TensorList{scale(in[0], 3.0f)}; })));
  const std::vector<int64_t> sizes = {16, 16, 32, 32, 16, 32, 16, 32};
  for (int64_t size : sizes) {
    Tensor x = random_tensor(rng, {size});
    TensorList out = trees.run(f, {x});
    EXPECT_VALUES(out[0], host_scale(host(x), 3.0f));
    trees.verify();
  }
  ASSERT_EQ(trees.roots(f).size(), 2u);
  EXPECT_EQ(trees.roots(f)[0]->outputs().records()[0].shape, (runtime::Shape{16}));
  EXPECT_EQ(trees.roots(f)[1]->outputs().records()[0].shape, (runtime::Shape{32}));
  EXPECT_EQ(trees.counters().warmups, 2u);
  EXPECT_EQ(trees.counters().recordings, 2u);
  EXPECT_EQ(trees.counters().replays, 4u);
  EXPECT_EQ(counted.count(), 4);
  // A new shape is not an unexpected re-record: no fallback however many shapes.
  EXPECT_EQ(trees.counters().eager_calls, 0u);
}

TEST_P(TreeLifecycle, ReplayAllocatesNoDeviceMemory) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  CountedBody counted;
  FunctionId f = trees.register_function(spec("affine", counted.wrap([](const TensorList& in) {
    return TensorList{scale(add(in[0], in[1]), 2.0f)};
  }),
                                              {1}));
  Tensor w = random_tensor(rng, {256});
  std::vector<Tensor> xs;
  for (int i = 0; i < 12; ++i) xs.push_back(random_tensor(rng, {256}));
  trees.run(f, {xs[0], w});
  trees.run(f, {xs[1], w});
  runtime::CachingAllocator& allocator = runtime::device_context(device()).allocator();
  runtime::PoolStats pool_before = pool_stats();
  runtime::PoolStats default_before = allocator.stats(runtime::kDefaultPool);
  for (int i = 2; i < 12; ++i) {
    TensorList out = trees.run(f, {xs[i], w});
    EXPECT_VALUES(out[0], host_scale(host_add(host(xs[i]), host(w)), 2.0f));
  }
  runtime::PoolStats pool_after = pool_stats();
  runtime::PoolStats default_after = allocator.stats(runtime::kDefaultPool);
  EXPECT_EQ(pool_after.reserved_bytes, pool_before.reserved_bytes);
  EXPECT_EQ(pool_after.allocated_bytes, pool_before.allocated_bytes);
  EXPECT_EQ(pool_after.live_blocks, pool_before.live_blocks);
  EXPECT_EQ(default_after.reserved_bytes, default_before.reserved_bytes);
  EXPECT_EQ(default_after.allocated_bytes, default_before.allocated_bytes);
  EXPECT_EQ(default_after.live_blocks, default_before.live_blocks);
  EXPECT_EQ(trees.counters().replays, 10u);
  EXPECT_EQ(counted.count(), 2);
}

// Note [Kept replay outputs]: the output of replay 3, kept past replay 4,
// throws on access instead of silently showing replay 4's values.
TEST_P(TreeLifecycle, KeptReplayOutputThrowsOnceTheNextReplayOverwritesIt) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  trees.run(f, {random_tensor(rng, {32})});
  TensorList recorded = trees.run(f, {random_tensor(rng, {32})});
  Tensor x3 = random_tensor(rng, {32});
  Tensor x4 = random_tensor(rng, {32});
  TensorList out3 = trees.run(f, {x3});
  EXPECT_VALUES(out3[0], host_scale(host(x3), 2.0f));
  TensorList out4 = trees.run(f, {x4});
  EXPECT_EQ(out3[0].address(), out4[0].address());  // the same pool memory
  EXPECT_FALSE(out4[0].storage()->owns_memory());
  EXPECT_VALUES(out4[0], host_scale(host(x4), 2.0f));
  try {
    host(out3[0]);
    ADD_FAILURE() << "expected StaleTensorError";
  } catch (const StaleTensorError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("function 'double'"), std::string::npos) << message;
    EXPECT_NE(message.find("a later replay of the CUDA graph tree overwrote"), std::string::npos)
        << message;
  }
  EXPECT_EQ(trees.counters().outputs_overwritten, 1u);
  EXPECT_EQ(trees.counters().outputs_poisoned, 1u);  // only the recording's output
  EXPECT_THROW(host(recorded[0]), StaleTensorError);
  trees.verify();
  // A loop that keeps only the last call's outputs alternates between two sets
  // of storages: nothing is built after the second, and none throws.
  out3.clear();
  std::vector<const runtime::Storage*> storages;
  for (int call = 0; call < 6; ++call) {
    Tensor x = random_tensor(rng, {32});
    out4 = trees.run(f, {x});
    EXPECT_VALUES(out4[0], host_scale(host(x), 2.0f));
    storages.push_back(out4[0].storage().get());
  }
  for (size_t i = 2; i < storages.size(); ++i) EXPECT_EQ(storages[i], storages[i - 2]) << i;
  EXPECT_NE(storages[0], storages[1]);
}

// Note [Kept replay outputs]: a replay on another branch may reuse the pool
// memory of a kept output, so the outputs of a path are retired when it ends.
TEST_P(TreeLifecycle, KeptOutputOfAnotherBranchThrowsOnceItsPathEnds) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  FunctionId g = trees.register_function(
      spec("self_sum", [](const TensorList& in) { return TensorList{add(in[0], in[0])}; }));
  FunctionId h = trees.register_function(
      spec("triple", [](const TensorList& in) { return TensorList{scale(in[0], 3.0f)}; }));
  // Root f with two children, g and h, each warmed up, recorded and replayed.
  TensorList kept_g, kept_h;
  for (int step = 0; step < 6; ++step) {
    trees.mark_step_begin();
    Tensor x = random_tensor(rng, {64});
    TensorList y = trees.run(f, {x});
    FunctionId child = step % 2 == 0 ? g : h;
    TensorList z = trees.run(child, {y[0]});
    (step % 2 == 0 ? kept_g : kept_h) = z;
    Floats doubled = host_scale(host(x), 2.0f);
    EXPECT_VALUES(z[0], host_scale(doubled, step % 2 == 0 ? 2.0f : 3.0f));
  }
  ASSERT_GE(trees.counters().replays, 4u);
  // kept_g is the output of g's replay at step 4; steps since then replayed
  // f and h, whose output may sit where g's did. It must throw, not read h's values.
  EXPECT_THROW(host(kept_g[0]), StaleTensorError);
  trees.verify();
}

TEST_P(TreeLifecycle, CloneKeptOutputsKeepsEveryReplaysValues) {
  GROVE_SEEDED_RNG(rng);
  TreeConfig config;
  config.clone_kept_outputs = true;
  TreeManager& trees = make_manager(config);
  FunctionId f = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  std::vector<Tensor> kept;
  std::vector<Floats> expected;
  for (int call = 0; call < 6; ++call) {
    Tensor x = random_tensor(rng, {32});
    kept.push_back(trees.run(f, {x})[0]);
    expected.push_back(host_scale(host(x), 2.0f));
    trees.mark_step_begin();
  }
  // Warm-up and recording outputs end with their generation (Note [Stale outputs]).
  EXPECT_THROW(host(kept[0]), StaleTensorError);
  EXPECT_THROW(host(kept[1]), StaleTensorError);
  for (size_t i = 2; i < kept.size(); ++i) EXPECT_VALUES(kept[i], expected[i]);
  EXPECT_EQ(trees.counters().outputs_cloned, 3u);  // replays 4, 5 and 6 cloned 3, 4 and 5
  EXPECT_EQ(trees.counters().outputs_overwritten, 0u);
  trees.verify();
}

TEST_P(TreeLifecycle, KernelFreeFunctionReEmitsViewsWithoutAGraph) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  CountedBody counted;
  runtime::Device dev = device();
  FunctionId f = trees.register_function(spec("views", counted.wrap([dev](const TensorList& in) {
    return TensorList{in[1].view({4, 4}), in[0].slice(0, 2, 10),
                      Tensor::empty({0}, runtime::DType::kF32, dev)};
  }),
                                              {1}));
  Tensor w = random_tensor(rng, {16});
  for (int step = 0; step < 5; ++step) {
    Tensor x = random_tensor(rng, {12});
    TensorList out = trees.run(f, {x, w});
    ASSERT_EQ(out.size(), 3u);
    EXPECT_VALUES(out[0], host(w));
    Floats xs = host(x);
    EXPECT_VALUES(out[1], Floats(xs.begin() + 2, xs.begin() + 10));
    EXPECT_EQ(out[2].numel(), 0);
    EXPECT_EQ(out[0].storage().get(), w.storage().get());
    // Note [Views of copied inputs]: a view of the caller's x, as in eager code.
    EXPECT_EQ(out[1].storage().get(), x.storage().get());
    trees.verify();
  }
  ASSERT_EQ(trees.roots(f).size(), 1u);
  const TreeNode* node = trees.roots(f)[0];
  EXPECT_TRUE(node->kernel_free());
  const auto& records = node->outputs().records();
  EXPECT_EQ(records[0].kind, OutputKind::kAliasesInput);
  EXPECT_EQ(records[1].kind, OutputKind::kAliasesInput);  // of x, not of its placeholder
  EXPECT_EQ(records[2].kind, OutputKind::kFixed);
  EXPECT_EQ(trees.counters().replays, 3u);
  EXPECT_EQ(counted.count(), 2);
}

TEST_P(TreeLifecycle, AliasedOutputsShareOneStorageAndAreFreedOnce) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f =
      trees.register_function(spec("views_of_sum",
                                   [](const TensorList& in) {
                                     Tensor y = add(in[0], in[1]);
                                     return TensorList{y, y.view({8, 8}), y.slice(0, 0, 32)};
                                   },
                                   {1}));
  Tensor w = random_tensor(rng, {64});
  trees.run(f, {random_tensor(rng, {64}), w});
  Tensor x = random_tensor(rng, {64});
  TensorList recorded = trees.run(f, {x, w});
  EXPECT_EQ(pool_stats().live_blocks, 1u);  // one block for three outputs; placeholder freed
  trees.verify();
  const TreeNode* node = trees.roots(f)[0];
  EXPECT_EQ(node->outputs().storages().size(), 1u);
  EXPECT_EQ(node->outputs().records()[1].kind, OutputKind::kAliasesOutput);
  EXPECT_EQ(node->outputs().records()[2].kind, OutputKind::kAliasesOutput);
  uint64_t poisoned_before = trees.counters().outputs_poisoned;
  Tensor x2 = random_tensor(rng, {64});
  TensorList replayed = trees.run(f, {x2, w});  // new generation: the recording's outputs go
  EXPECT_EQ(trees.counters().outputs_poisoned, poisoned_before + 1);
  EXPECT_EQ(pool_stats().live_blocks, 0u);
  EXPECT_THROW(host(recorded[1]), StaleTensorError);
  EXPECT_EQ(replayed[0].storage().get(), replayed[1].storage().get());
  EXPECT_EQ(replayed[0].storage().get(), replayed[2].storage().get());
  Floats sum = host_add(host(x2), host(w));
  EXPECT_VALUES(replayed[1], sum);
  EXPECT_VALUES(replayed[2], Floats(sum.begin(), sum.begin() + 32));
  trees.verify();
}

TEST_P(TreeLifecycle, StatsAndDotDescribeTheTree) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("affine", [](const TensorList& in) { return TensorList{add(in[0], in[1])}; }, {1}));
  Tensor w = random_tensor(rng, {8});
  for (int i = 0; i < 4; ++i) trees.run(f, {random_tensor(rng, {8}), w});
  nlohmann::json stats = grove::compiler::backends::tree_json(trees.stats());
  EXPECT_EQ(stats["warmups"], 1);
  EXPECT_EQ(stats["recordings"], 1);
  EXPECT_EQ(stats["replays"], 2);
  EXPECT_EQ(stats["nodes"], 1);
  EXPECT_EQ(stats["checkpoint_restores"], 0);
  EXPECT_EQ(stats["functions"][0]["name"], "affine");
  EXPECT_EQ(stats["functions"][0]["mode"], "inference");
  EXPECT_EQ(stats["state"], "execution");
  EXPECT_GT(stats["pool"]["reserved_bytes"].get<size_t>(), 0u);
  EXPECT_GT(stats["pool"]["peak_allocated_bytes"].get<size_t>(), 0u);
  EXPECT_TRUE(stats["pool"].contains("live_blocks"));
  EXPECT_TRUE(stats["fallback_calls"].empty());
  std::string dot = trees.dot();
  EXPECT_NE(dot.find("digraph"), std::string::npos);
  EXPECT_NE(dot.find("affine\\ngraph 0\\ninference\\n1 outputs"), std::string::npos) << dot;
}

// Note [Trees follow their functions].
TEST_P(TreeLifecycle, LastLeaseShutsTheTreeDownUnlessAFunctionIsUnleased) {
  GROVE_SEEDED_RNG(rng);
  {
    TreeManager& trees = make_manager();
    FunctionId f = trees.register_function(
        spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
    std::shared_ptr<cudagraph_trees::TreeLease> first = trees.lease_functions(1);
    std::shared_ptr<cudagraph_trees::TreeLease> second = trees.lease_functions(0);
    TensorList out;
    for (int call = 0; call < 3; ++call) out = trees.run(f, {random_tensor(rng, {32})});
    EXPECT_GT(pool_stats().reserved_bytes, 0u);
    first.reset();
    EXPECT_FALSE(trees.is_shut_down());
    second.reset();
    EXPECT_TRUE(trees.is_shut_down());
    EXPECT_THROW(host(out[0]), StaleTensorError);
    EXPECT_FALSE(runtime::device_context(device())
                     .allocator()
                     .pool_containing(out[0].address())
                     .has_value());
  }
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("double", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  std::shared_ptr<cudagraph_trees::TreeLease> lease = trees.lease_functions(1);
  trees.register_function(
      spec("unleased", [](const TensorList& in) { return TensorList{scale(in[0], 3.0f)}; }));
  trees.run(f, {random_tensor(rng, {32})});
  lease.reset();
  EXPECT_FALSE(trees.is_shut_down());
  Tensor x = random_tensor(rng, {32});
  EXPECT_VALUES(trees.run(f, {x})[0], host_scale(host(x), 2.0f));
}

// Note [Foreign blocks in the pool]: the body caches a pool tensor (a
// workspace) that it allocated while its graph was captured; the recording
// fails and says so (its graph writes that memory: it cannot move).
TEST_P(TreeLifecycle, ABlockKeptAfterARecordingFailsNamingTheFunctionAndSize) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  auto workspace = std::make_shared<Tensor>();
  auto calls = std::make_shared<int>(0);
  FunctionId f = trees.register_function(spec("keeper", [workspace, calls](const TensorList& in) {
    if (++*calls == 2) *workspace = scale(in[0], 1.0f);  // the recording's call
    return TensorList{scale(in[0], 2.0f)};
  }));
  trees.run(f, {random_tensor(rng, {256})});  // warm-up: keeps nothing
  try {
    trees.run(f, {random_tensor(rng, {256})});
    ADD_FAILURE() << "expected an error about the kept pool block";
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("'keeper'"), std::string::npos) << message;
    EXPECT_NE(message.find("keeps a block of "), std::string::npos) << message;
    EXPECT_NE(message.find(str_cat(workspace->storage()->nbytes())), std::string::npos) << message;
    EXPECT_NE(message.find("recording"), std::string::npos) << message;
  }
  workspace.reset();
}

// Note [State created inside a function]: a cache the body builds on its
// first call (the warm-up) and keeps, as Hugging Face's static KV cache is
// made inside the compiled forward: it moves out of the pool with its values,
// is logged and counted, and later recordings and replays read it right.
TEST_P(TreeLifecycle, StateAWarmupCreatesMovesOutOfThePoolAndKeepsItsValues) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  auto cache = std::make_shared<Tensor>();
  Tensor first = random_tensor(rng, {1024});
  FunctionId f = trees.register_function(spec("with_cache", [cache](const TensorList& in) {
    if (!cache->defined()) *cache = scale(in[0], 3.0f);  // built on the first call
    return TensorList{add(in[0], *cache)};
  }));
  Floats cached = host_scale(host(first), 3.0f);
  EXPECT_VALUES(trees.run(f, {first})[0], host_add(host(first), cached));
  ASSERT_TRUE(cache->defined());
  std::optional<runtime::PoolId> where =
      runtime::device_context(device()).allocator().pool_containing(cache->data_ptr());
  ASSERT_TRUE(where.has_value());
  EXPECT_TRUE(where->is_default()) << "the cache left the tree's pool";
  EXPECT_EQ(trees.counters().state_tensors_moved, 1u);
  EXPECT_NE(recent_log().find("'with_cache'"), std::string::npos) << recent_log();
  EXPECT_NE(recent_log().find("4096 bytes"), std::string::npos) << recent_log();
  for (int call = 0; call < 4; ++call) {  // recording, then replays
    Tensor x = random_tensor(rng, {1024});
    SCOPED_TRACE(call);
    EXPECT_VALUES(trees.run(f, {x})[0], host_add(host(x), cached));
    EXPECT_VALUES(*cache, cached);
    trees.verify();
  }
  EXPECT_GT(trees.counters().replays, 0u);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeLifecycle);

}  // namespace
}  // namespace grove::testing
