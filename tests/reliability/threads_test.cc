// Compiled functions called from 8 threads at once, each thread on a stream
// of its own with its own compiled models (the per-thread tree managers and
// the device's capture lock keep them apart): "cudagraphs" bitwise equal
// to "eager" in every thread through warm-up, recording and replays.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"
#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"
#include "tests/common/test_util.h"

namespace grove::reliability {
namespace {

using compiler::TensorList;
using compiler::backends::compile;
using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::DType;
using runtime::Tensor;

// An MLP block with a buffer updated in place and a nonzero in the middle
// (captured, eager, captured segments).
compiler::ir::Program threaded_program(runtime::Device device, int variant) {
  ProgramBuilder b("threaded_" + std::to_string(variant), device);
  ValueId x = b.input("x", {4, 8});
  ValueId w = b.param("w", {8, 8}, DType::kF32, compiler::ir::normal_init(0.4, 10 + variant));
  ValueId bias = b.param("bias", {8}, DType::kF32, compiler::ir::normal_init(0.1, 20 + variant));
  ValueId state = b.buffer("running", {8}, DType::kF32, compiler::ir::uniform_init(-1, 1, variant));
  ValueId h = b.gelu(b.linear(x, w, bias));
  ValueId indices = b.nonzero(b.compare("gt", h, b.full(0.0)));
  ValueId updated = b.copy_into(state, b.add(state, b.mean(h, {0})));
  b.output(b.softmax(b.mul(h, updated)));
  b.output(indices);
  return b.build();
}

class Threads : public testing::DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    cudagraph_trees::backend::register_cudagraphs_backend();
  }
};

TEST_P(Threads, EightThreadsOnTheirOwnStreamsMatchEagerBitwise) {
  constexpr int kThreads = 8;
  constexpr int kCalls = 12;
  const runtime::Device device = GetParam();
  const uint64_t seed = testing::test_seed();
  std::atomic<int> ready{0};
  std::vector<std::string> failures(kThreads);
  std::vector<uint64_t> replays(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        runtime::StreamHandle stream = runtime::device_context(device).create_stream();
        runtime::StreamGuard guard(device, stream);
        compiler::ir::Program program = threaded_program(device, t % 3);
        auto eager = compile(program, {.backend = "eager"});
        auto graphs = compile(program, {.backend = "cudagraphs"});
        std::mt19937 rng(static_cast<uint32_t>(seed + t));
        ++ready;
        while (ready.load() < kThreads) std::this_thread::yield();
        for (int call = 0; call < kCalls && failures[t].empty(); ++call) {
          std::vector<float> values = testing::random_floats(rng, 32);
          TensorList eager_out = eager({Tensor::from_vector(values, {4, 8}, device)});
          TensorList graphs_out = graphs({Tensor::from_vector(values, {4, 8}, device)});
          for (size_t o = 0; o < eager_out.size(); ++o) {
            if (eager_out[o].shape() != graphs_out[o].shape() ||
                eager_out[o].to_host_bytes() != graphs_out[o].to_host_bytes()) {
              failures[t] = "call " + std::to_string(call) + " output " + std::to_string(o);
            }
          }
          if (eager.state("running").to_host_bytes() != graphs.state("running").to_host_bytes()) {
            failures[t] = "call " + std::to_string(call) + ": buffer 'running' differs";
          }
        }
        cudagraph_trees::TreeManager& trees = cudagraph_trees::tree_manager_for(device);
        trees.verify();
        replays[t] = trees.counters().replays;
        cudagraph_trees::reset_tree_managers();
      } catch (const std::exception& error) {
        failures[t] = std::string("threw: ") + error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(failures[t].empty())
        << "thread " << t << ": " << failures[t] << " (seed " << seed << ")";
    EXPECT_GE(replays[t], static_cast<uint64_t>(kCalls - 3)) << "thread " << t;
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(Threads);

}  // namespace
}  // namespace grove::reliability
