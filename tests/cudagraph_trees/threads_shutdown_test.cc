// Managers per thread, the capture lock of each device, and shutdown.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "compiler/backends/backend_stats_json.h"
#include "tests/cudagraph_trees/tree_test_util.h"

namespace grove::testing {
namespace {

using cudagraph_trees::tree_manager_for;

class TreeThreadsShutdown : public TreeTest {};

TEST_P(TreeThreadsShutdown, ThreeThreadsWithTheirOwnManagersComputeCorrectly) {
  runtime::Device dev = device();
  uint64_t seed = test_seed();
  std::atomic<int> failures{0};
  std::atomic<int> ready{0};
  std::vector<const TreeManager*> managers(3, nullptr);
  std::vector<uint64_t> replays(3, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      try {
        std::mt19937 rng(static_cast<uint32_t>(seed + t));
        TreeManager& trees = tree_manager_for(dev);
        managers[t] = &trees;
        ++ready;  // all three managers exist at once, and the threads run concurrently
        while (ready.load() < 3) std::this_thread::yield();
        float factor = static_cast<float>(t + 2);
        FunctionId f = trees.register_function(spec(
            "per_thread",
            [factor](const TensorList& in) { return TensorList{scale(add(in[0], in[1]), factor)}; },
            {1}));
        Tensor w = Tensor::from_vector(random_floats(rng, 512), {512}, dev);
        for (int step = 0; step < 20; ++step) {
          Tensor x = Tensor::from_vector(random_floats(rng, 512), {512}, dev);
          TensorList out = trees.run(f, {x, w});
          Floats expected = host_scale(host_add(host(x), host(w)), factor);
          Floats actual = host(out[0]);
          for (size_t i = 0; i < actual.size(); ++i) {
            if (std::abs(actual[i] - expected[i]) > 1e-4f * std::max(1.0f, std::abs(expected[i]))) {
              ++failures;
              break;
            }
          }
        }
        trees.verify();
        replays[t] = trees.counters().replays;
        cudagraph_trees::reset_tree_managers();
      } catch (const std::exception& error) {
        ADD_FAILURE() << "thread " << t << ": " << error.what();
        ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_NE(managers[0], managers[1]);
  EXPECT_NE(managers[1], managers[2]);
  for (uint64_t count : replays) EXPECT_EQ(count, 18u);
}

// Note [Trees of another thread]: each step's backward runs on a thread of
// its own (as autograd's device thread runs it) inside a ThreadTreesScope of
// the forward's trees. It lands in the forward's tree as the forward's child
// and ends its pending backward, so the next forward starts a new generation
// and, from the third step on, both replay; gradients match eager throughout.
TEST_P(TreeThreadsShutdown, BackwardOnAnotherThreadJoinsTheForwardsTreeAndReplays) {
  GROVE_SEEDED_RNG(rng);
  const runtime::Device dev = device();
  cudagraph_trees::reset_tree_manager(dev);
  TreeManager& trees = tree_manager_for(dev);
  const FunctionId forward = trees.register_function(spec(
      "net:forward",
      [](const TensorList& in) {
        Tensor h = add(in[0], in[1]);
        return TensorList{scale(h, 0.5f), h};
      },
      {1}, {}, CompilationMode::kForward));
  const FunctionId backward = trees.register_function(spec(
      "net:backward", [](const TensorList& in) { return TensorList{add(in[0], in[1])}; }, {}, {},
      CompilationMode::kBackward));
  std::shared_ptr<cudagraph_trees::ThreadTrees> forward_trees =
      cudagraph_trees::current_thread_trees();
  Tensor w = random_tensor(rng, {64});
  for (int step = 0; step < 5; ++step) {
    Tensor x = random_tensor(rng, {64});
    Tensor grad = random_tensor(rng, {64});
    TensorList saved = trees.run(forward, {x, w});
    Floats h = host_add(host(x), host(w));
    EXPECT_VALUES(saved[0], host_scale(h, 0.5f));
    TensorList inputs{saved[1], grad};
    saved.clear();
    TensorList grads;
    bool same_manager = false;
    bool own_manager_after = false;
    std::thread autograd_thread([&] {
      {
        cudagraph_trees::ThreadTreesScope scope(forward_trees);
        TreeManager& used = tree_manager_for(dev);
        same_manager = &used == &trees;
        grads = used.run(backward, std::move(inputs));
        // The gradients are read on the main thread's stream: like PyTorch's
        // autograd engine, finish the backward's stream before handing them
        // over (async sim's hazard checker reports the read otherwise).
        runtime::DeviceContext& context = runtime::device_context(dev);
        context.platform().synchronize_stream(context.current_stream());
      }
      own_manager_after = &tree_manager_for(dev) != &trees;
    });
    autograd_thread.join();
    EXPECT_TRUE(same_manager) << "step " << step;
    EXPECT_TRUE(own_manager_after) << "step " << step;
    ASSERT_EQ(grads.size(), 1u);
    EXPECT_VALUES(grads[0], host_add(h, host(grad)));
    EXPECT_FALSE(trees.forward_waits_for_backward()) << "step " << step;
    trees.verify();
  }
  EXPECT_EQ(trees.counters().recordings, 2u);
  EXPECT_EQ(trees.counters().replays, 6u);
  EXPECT_EQ(trees.counters().eager_calls, 0u);
  ASSERT_EQ(trees.roots(forward).size(), 1u);
  EXPECT_EQ(trees.roots(forward)[0]->children(backward).size(), 1u);
  cudagraph_trees::reset_tree_manager(dev);
}

TEST_P(TreeThreadsShutdown, ShutdownInvalidatesOutputsAndReleasesThePool) {
  GROVE_SEEDED_RNG(rng);
  TreeManager& trees = make_manager();
  FunctionId f = trees.register_function(
      spec("f", [](const TensorList& in) { return TensorList{add(in[0], in[1])}; }, {1}));
  FunctionId g = trees.register_function(
      spec("g", [](const TensorList& in) { return TensorList{scale(in[0], 2.0f)}; }));
  Tensor w = random_tensor(rng, {64});
  TensorList replayed, recorded;
  for (int step = 0; step < 4; ++step) {
    InvocationScope call(trees);
    TensorList a = trees.run(f, {random_tensor(rng, {64}), w});
    TensorList b = trees.run(g, {a[0]});
    if (step == 3) replayed = b;
  }
  {
    InvocationScope call(trees);
    recorded = trees.run(g, {random_tensor(rng, {64})});  // a new root, recorded... after warm-up
  }
  runtime::PoolId pool = trees.pool();
  runtime::CachingAllocator& allocator = runtime::device_context(device()).allocator();
  EXPECT_GT(allocator.stats(pool).segments, 0u);
  trees.shutdown();
  nlohmann::json stats = grove::compiler::backends::tree_json(trees.stats());
  EXPECT_EQ(stats["pool"]["live_blocks_at_shutdown"], 0);
  EXPECT_EQ(stats["pool"]["segments"], 0);
  EXPECT_EQ(stats["nodes"], 0);
  EXPECT_THROW(allocator.stats(pool), Error);  // the pool is gone
  // The warm-up of the new root retired the kept replay output (Note [Kept
  // replay outputs]); the warm-up's own output dies with the tree.
  auto message_of = [](const Tensor& tensor) {
    try {
      host(tensor);
    } catch (const StaleTensorError& error) {
      return std::string(error.what());
    }
    return std::string("no StaleTensorError");
  };
  EXPECT_NE(message_of(replayed[0]).find("overwrote"), std::string::npos)
      << message_of(replayed[0]);
  EXPECT_NE(message_of(recorded[0]).find("shut down"), std::string::npos)
      << message_of(recorded[0]);
  EXPECT_THROW(trees.run(f, {random_tensor(rng, {64}), w}), Error);
  trees.shutdown();  // idempotent
}

// Note [One capture lock per device]: the warm-ups of two managers on two
// devices run at the same time. Each warm-up body waits (up to 20 s) for the
// other one to have started; under one lock for the whole process the second
// warm-up could start only after the first gave up, as data-parallel ranks
// waiting for each other's all-reduce under the lock deadlocked on cuda.
TEST_P(TreeThreadsShutdown, WarmupsOfDifferentDevicesRunAtTheSameTime) {
  const runtime::Device first = device();
  const runtime::Device second{first.type, first.index + 1};
  if (first.is_cuda() && runtime::cuda_device_count() < 2) {
    GTEST_SKIP() << "needs a second CUDA device";
  }
  std::mutex mutex;
  std::condition_variable changed;
  int started = 0;
  std::vector<int> met(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    const runtime::Device dev = t == 0 ? first : second;
    threads.emplace_back([&, t, dev] {
      try {
        cudagraph_trees::reset_tree_manager(dev);
        TreeManager& trees = tree_manager_for(dev);
        const FunctionId f =
            trees.register_function(spec("meets_the_other_device", [&, t](const TensorList& in) {
              std::unique_lock<std::mutex> lock(mutex);
              ++started;
              changed.notify_all();
              met[t] =
                  changed.wait_for(lock, std::chrono::seconds(20), [&] { return started == 2; });
              return TensorList{add(in[0], in[0])};
            }));
        Tensor x = Tensor::from_vector(std::vector<float>(64, 1.5f), {64}, dev);
        EXPECT_EQ(host(trees.run(f, {x})[0]), Floats(64, 3.0f));
        cudagraph_trees::reset_tree_manager(dev);
      } catch (const std::exception& error) {
        ADD_FAILURE() << "thread " << t << ": " << error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(met, std::vector<int>({1, 1}))
      << "a warm-up on " << first.str() << " kept the other device's warm-up waiting";
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(TreeThreadsShutdown);

}  // namespace
}  // namespace grove::testing
