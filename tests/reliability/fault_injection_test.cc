// Faults injected into the tree manager's warm-up and recording: a capture
// violation, an allocation failure in the pool (warm-up and recording), and a
// function body that throws during warm-up. After each, verify() holds (tree,
// path, pool blocks and live storages agree), no pool block leaks, and the
// next calls give correct results.
#include "compiler/backends/backend_stats_json.h"
#include "runtime/error.h"
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

class FaultInjection : public TreeTest {
 protected:
  runtime::CachingAllocator& allocator() { return runtime::device_context(device()).allocator(); }
  // Runs f (2 * x + w) `calls` times with new inputs, checking every result.
  void expect_correct_calls(TreeManager& trees, FunctionId f, const Tensor& w, std::mt19937& rng,
                            int calls) {
    for (int call = 0; call < calls; ++call) {
      SCOPED_TRACE(::testing::Message() << "call " << call << " after the fault");
      Tensor x = random_tensor(rng, {64});
      TensorList out = trees.run(f, {x, w});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_VALUES(out[0], host_add(host_scale(host(x), 2.0f), host(w)));
      trees.verify();
    }
  }
  // After shutdown every pool block was owned by a tracked output.
  void expect_no_leak(TreeManager& trees) {
    trees.verify();
    trees.shutdown();
    EXPECT_EQ(
        grove::compiler::backends::tree_json(trees.stats())["pool"]["live_blocks_at_shutdown"], 0u)
        << grove::compiler::backends::tree_json(trees.stats()).dump();
  }
};

Body two_x_plus_w() {
  return [](const TensorList& in) { return TensorList{add(scale(in[0], 2.0f), in[1])}; };
}

TEST_P(FaultInjection, CaptureViolationDuringRecordingFallsBackAndLaterCallsAreCorrect) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  // The recording call (the second) reads device memory on the host.
  auto calls = std::make_shared<int>(0);
  FunctionId f = trees.register_function(spec("reads_while_recording",
                                              [calls](const TensorList& in) {
                                                Tensor out = add(scale(in[0], 2.0f), in[1]);
                                                if (++*calls == 2) (void)out.to_vector<float>();
                                                return TensorList{out};
                                              },
                                              {1}));
  Tensor w = random_tensor(rng, {64});
  expect_correct_calls(trees, f, w, rng, 1);
  size_t live_before = pool_stats().live_blocks;
  expect_correct_calls(trees, f, w, rng, 4);
  EXPECT_EQ(trees.counters().capture_failures, 1u);
  EXPECT_LE(pool_stats().live_blocks, live_before + 1);
  expect_no_leak(trees);
}

TEST_P(FaultInjection, AllocationFailureDuringWarmupLeavesNoTraceAndTheNextCallWarmsUp) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(spec("two_x_plus_w", two_x_plus_w(), {1}));
  Tensor w = random_tensor(rng, {64});
  Tensor x = random_tensor(rng, {64});
  allocator().inject_allocation_failures(1);  // the pool is empty: its first segment fails
  EXPECT_THROW(trees.run(f, {x, w}), OutOfMemoryError);
  allocator().inject_allocation_failures(0);
  trees.verify();
  EXPECT_EQ(pool_stats().live_blocks, 0u);
  EXPECT_EQ(trees.counters().warmups, 0u);
  expect_correct_calls(trees, f, w, rng, 5);  // warm-up, recording, replays
  EXPECT_EQ(trees.counters().recordings, 1u);
  EXPECT_GE(trees.counters().replays, 3u);
  expect_no_leak(trees);
}

TEST_P(FaultInjection, AllocationFailureDuringRecordingLeavesTheTreeConsistent) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  // The recording call (the second) needs a 4 MiB temporary: a new segment.
  auto calls = std::make_shared<int>(0);
  FunctionId f = trees.register_function(
      spec("big_temporary_when_recording",
           [calls](const TensorList& in) {
             if (++*calls == 2) {
               Tensor big = Tensor::empty({1 << 20}, runtime::DType::kF32, in[0].device());
               launch_fill(big, 1.0f);
             }
             return TensorList{add(scale(in[0], 2.0f), in[1])};
           },
           {1}));
  Tensor w = random_tensor(rng, {64});
  expect_correct_calls(trees, f, w, rng, 1);  // warm-up
  Tensor x = random_tensor(rng, {64});
  allocator().inject_allocation_failures(1);
  EXPECT_THROW(trees.run(f, {x, w}), OutOfMemoryError);
  allocator().inject_allocation_failures(0);
  trees.verify();
  EXPECT_EQ(trees.counters().recordings, 0u);
  expect_correct_calls(trees, f, w, rng, 4);  // records (no big temporary now), replays
  EXPECT_EQ(trees.counters().recordings, 1u);
  EXPECT_GE(trees.counters().replays, 2u);
  expect_no_leak(trees);
}

TEST_P(FaultInjection, BodyThrowingDuringWarmupPropagatesAndTheNextCallsAreCorrect) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  auto calls = std::make_shared<int>(0);
  FunctionId f =
      trees.register_function(spec("throws_once",
                                   [calls](const TensorList& in) {
                                     Tensor partial =
                                         scale(in[0], 2.0f);  // pool memory in use when it throws
                                     if (++*calls == 1)
                                       throw ShapeError("throws_once: injected failure");
                                     return TensorList{add(partial, in[1])};
                                   },
                                   {1}));
  Tensor w = random_tensor(rng, {64});
  try {
    trees.run(f, {random_tensor(rng, {64}), w});
    ADD_FAILURE() << "the body's error did not propagate";
  } catch (const ShapeError& error) {
    EXPECT_NE(std::string(error.what()).find("injected failure"), std::string::npos);
  }
  trees.verify();
  EXPECT_EQ(pool_stats().live_blocks, 0u);
  expect_correct_calls(trees, f, w, rng, 5);
  EXPECT_EQ(trees.counters().recordings, 1u);
  expect_no_leak(trees);
}

TEST_P(FaultInjection, BodyThrowingAfterAReplayedParentKeepsTheParentsOutputs) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(spec("two_x_plus_w", two_x_plus_w(), {1}));
  auto fail = std::make_shared<bool>(false);
  FunctionId g = trees.register_function(spec("maybe_throws", [fail](const TensorList& in) {
    Tensor out = scale(in[0], 3.0f);
    if (*fail) throw Error("maybe_throws: injected failure");
    return TensorList{out};
  }));
  Tensor w = random_tensor(rng, {64});
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE(step);
    trees.mark_step_begin();
    Tensor x = random_tensor(rng, {64});
    TensorList a = trees.run(f, {x, w});
    Floats expected_a = host_add(host_scale(host(x), 2.0f), host(w));
    if (step < 2) continue;          // f warms up and records first
    *fail = step == 2 || step == 4;  // g's warm-up after a replay of f, twice
    if (*fail) {
      EXPECT_THROW(trees.run(g, {a[0]}), Error);
      trees.verify();
      EXPECT_VALUES(a[0], expected_a);
      continue;
    }
    TensorList b = trees.run(g, {a[0]});
    EXPECT_VALUES(a[0], expected_a);
    EXPECT_VALUES(b[0], host_scale(expected_a, 3.0f));
    trees.verify();
  }
  expect_no_leak(trees);
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(FaultInjection);

}  // namespace
}  // namespace grove::testing
