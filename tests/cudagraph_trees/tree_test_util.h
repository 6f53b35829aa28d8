// Shared pieces of the tree manager tests: a device-parameterized fixture that
// owns a TreeManager, seeded random tensors, host references, and counted
// function bodies (to prove replays do not call the body).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cudagraph_trees/tree_introspection.h"
#include "runtime/device_context.h"
#include "runtime/logging.h"
#include "runtime/testing/test_kernels.h"
#include "tests/common/test_util.h"

namespace grove::testing {

using compiler::TensorList;
using cudagraph_trees::CompilationMode;
using cudagraph_trees::FunctionId;
using cudagraph_trees::FunctionSpec;
using cudagraph_trees::InputKind;
using cudagraph_trees::InvocationScope;
using cudagraph_trees::PathState;
using cudagraph_trees::TreeConfig;
using cudagraph_trees::TreeManager;
using cudagraph_trees::TreeNode;
using runtime::Tensor;

using Body = compiler::Callable;
using Floats = std::vector<float>;

class TreeTest : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (IsSkipped()) return;
    clear_recent_log();
  }
  void TearDown() override {
    if (manager_ != nullptr) manager_->shutdown();
  }
  TreeManager& make_manager(TreeConfig config = TreeConfig{}) {
    manager_ = std::make_unique<TreeManager>(device(), config);
    return *manager_;
  }
  Tensor random_tensor(std::mt19937& rng, const runtime::Shape& shape) {
    return Tensor::from_vector(random_floats(rng, static_cast<size_t>(runtime::shape_numel(shape))),
                               shape, device());
  }
  // A random tensor that stays alive until the test ends, so that no later
  // tensor gets its block (and its address) back.
  Tensor kept_random_tensor(std::mt19937& rng, const runtime::Shape& shape) {
    kept_.push_back(random_tensor(rng, shape));
    return kept_.back();
  }
  // The moved-input scenario of the binding tests: 2 x + w (double_plus_param)
  // warmed up on xs[0], recorded on xs[1] and replayed on xs[2], a new address
  // (`out`); view_at(k) is a [64] f32 view of a spare storage starting k
  // elements in, for sources off the placeholder's alignment.
  struct MovedInput {
    FunctionId f;
    Tensor w, spare;
    std::vector<Tensor> xs;
    TensorList out;
    Tensor view_at(int64_t offset) const {
      return Tensor(spare.storage(), {64}, {1}, offset, runtime::DType::kF32);
    }
  };
  MovedInput record_then_move_input(TreeManager& trees, std::mt19937& rng);
  runtime::PoolStats pool_stats() const {
    return runtime::device_context(device()).allocator().stats(manager_->pool());
  }

  std::unique_ptr<TreeManager> manager_;
  std::vector<Tensor> kept_;
};

// A body that counts its calls.
struct CountedBody {
  std::shared_ptr<int> calls = std::make_shared<int>(0);
  Body wrap(Body body) const {
    return [calls = calls, body = std::move(body)](const TensorList& inputs) {
      ++*calls;
      return body(inputs);
    };
  }
  int count() const { return *calls; }
};

inline FunctionSpec spec(std::string name, Body body, std::vector<size_t> static_inputs = {},
                         std::vector<size_t> mutated_inputs = {},
                         CompilationMode mode = CompilationMode::kInference) {
  FunctionSpec result;
  result.name = std::move(name);
  result.mode = mode;
  result.static_input_indices = std::move(static_inputs);
  result.mutated_input_indices = std::move(mutated_inputs);
  result.body = std::move(body);
  return result;
}

inline Floats host(const Tensor& tensor) { return tensor.to_vector<float>(); }

inline Floats host_add(const Floats& a, const Floats& b) {
  Floats out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

inline Floats host_scale(const Floats& a, float factor) {
  Floats out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] * factor;
  return out;
}

inline Floats host_add_scalar(const Floats& a, float value) {
  Floats out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + value;
  return out;
}

// Non-fatal (usable in lambdas that return values); reports the first mismatch only.
#define EXPECT_VALUES(tensor, expected)                                                   \
  do {                                                                                    \
    Floats actual_values = ::grove::testing::host(tensor);                                \
    const Floats& expected_values = (expected);                                           \
    EXPECT_EQ(actual_values.size(), expected_values.size());                              \
    for (size_t v = 0; v < std::min(actual_values.size(), expected_values.size()); ++v) { \
      if (std::abs(actual_values[v] - expected_values[v]) >                               \
          1e-5f * std::max(1.0f, std::abs(expected_values[v]))) {                         \
        ADD_FAILURE() << "value " << v << ": " << actual_values[v] << " != expected "     \
                      << expected_values[v];                                              \
        break;                                                                            \
      }                                                                                   \
    }                                                                                     \
  } while (false)

// 2 * x + w (w static), and its host reference.
inline FunctionSpec double_plus_param() {
  return spec("double_plus",
              [](const TensorList& in) { return TensorList{add(scale(in[0], 2.0f), in[1])}; },
              /*static*/ {1});
}
inline Floats double_plus(const Floats& x, const Floats& w) {
  return host_add(host_scale(x, 2.0f), w);
}

inline TreeTest::MovedInput TreeTest::record_then_move_input(TreeManager& trees,
                                                             std::mt19937& rng) {
  MovedInput moved;
  moved.f = trees.register_function(double_plus_param());
  moved.w = random_tensor(rng, {64});
  moved.spare = random_tensor(rng, {80});
  for (int i = 0; i < 3; ++i) moved.xs.push_back(random_tensor(rng, {64}));
  trees.run(moved.f, {moved.xs[0], moved.w});
  trees.run(moved.f, {moved.xs[1], moved.w});
  moved.out = trees.run(moved.f, {moved.xs[2], moved.w});
  return moved;
}

// The input whose placeholder span in `node` holds `tensor`'s first element, or -1.
inline int placeholder_holding(const TreeNode& node, const Tensor& tensor) {
  auto address = reinterpret_cast<uintptr_t>(tensor.data_ptr());
  for (size_t i = 0; i < node.inputs().kinds().size(); ++i) {
    auto [start, bytes] = node.inputs().placeholder_span(i);
    auto low = reinterpret_cast<uintptr_t>(start);
    if (start != nullptr && low <= address && address < low + bytes) return static_cast<int>(i);
  }
  return -1;
}

// Note [Sources inside placeholders]: a placeholder returns to the pool after
// its recording, so a later node's output may live in it. Records
// f(a, b) = a + b at the root and g(y) = 3 y as its child and replays both
// once: g's replay output then lies in the block of one of f's placeholders
// (the pool hands the freed block out again; asserted). Returns g's output
// and which of f's inputs owns that placeholder. `keep` holds every input.
struct PlaceholderReuse {
  FunctionId f;
  FunctionId g;
  Tensor g_output;
  int holder = -1;
};
inline PlaceholderReuse reuse_a_placeholder(TreeManager& trees,
                                            const std::function<Tensor()>& fresh) {
  PlaceholderReuse reuse;
  reuse.f = trees.register_function(
      spec("add", [](const TensorList& in) { return TensorList{add(in[0], in[1])}; }));
  reuse.g = trees.register_function(
      spec("triple", [](const TensorList& in) { return TensorList{scale(in[0], 3.0f)}; }));
  const FunctionId g = reuse.g;
  for (int step = 0; step < 3; ++step) {  // warm-up, recording, replay
    trees.mark_step_begin();
    TensorList f_out = trees.run(reuse.f, {fresh(), fresh()});
    reuse.g_output = trees.run(g, {f_out[0]})[0];
  }
  EXPECT_EQ(trees.counters().recordings, 2u);
  EXPECT_EQ(trees.counters().replays, 2u);
  reuse.holder = placeholder_holding(*trees.roots(reuse.f)[0], reuse.g_output);
  return reuse;
}

// `rounds` new steps, each calling f with a fresh tensor as the input whose
// placeholder holds g's output and g's output as the other input: every
// replay must read g's output before it copies the fresh tensor over it.
// That copy overwrites g's output, so reading it afterwards throws (Note
// [Kept replay outputs]); g then runs on f's output for the next round.
inline void feed_back_into_a_placeholder(TreeManager& trees, const PlaceholderReuse& reuse,
                                         const std::function<Tensor()>& fresh, int rounds) {
  ASSERT_GE(reuse.holder, 0) << "g's output was expected in a block f's placeholder freed";
  Tensor source = reuse.g_output;
  for (int round = 0; round < rounds; ++round) {
    trees.mark_step_begin();
    Floats previous = host(source);
    Tensor x = fresh();
    TensorList inputs(2);
    inputs[static_cast<size_t>(reuse.holder)] = x;
    inputs[static_cast<size_t>(1 - reuse.holder)] = source;
    TensorList out = trees.run(reuse.f, inputs);
    EXPECT_VALUES(out[0], host_add(host(x), previous));
    EXPECT_THROW(host(source), StaleTensorError) << "round " << round;
    source = trees.run(reuse.g, {out[0]})[0];
    EXPECT_EQ(placeholder_holding(*trees.roots(reuse.f)[0], source), reuse.holder);
    EXPECT_VALUES(source, host_scale(host_add(host(x), previous), 3.0f));
    trees.verify();
  }
}

inline size_t count_occurrences(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

}  // namespace grove::testing
