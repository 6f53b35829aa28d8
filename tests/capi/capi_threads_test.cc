// The C API from many threads on sim: one model called from 8 threads at once
// gives every thread its own results (cudagraphs bitwise equal to eager), and
// grove_model_destroy waits for the calls in flight and refuses calls that
// start meanwhile (Note [Destroying a model in use], capi/grove.cc).
// tools/sanitize.sh tsan runs it under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "capi/grove.h"

namespace {

// x [4, 8] -> linear(w [16, 8], b [16]) -> gelu -> linear(v [4, 16]).
const char* kProgram = R"({
  "name": "capi_threads", "dims": {},
  "inputs": [{"name": "x", "shape": [4, 8], "dtype": "f32"}],
  "params": [
    {"name": "w", "shape": [16, 8], "dtype": "f32", "init": {"kind": "normal", "std": 0.3, "seed": 1}},
    {"name": "b", "shape": [16], "dtype": "f32", "init": {"kind": "uniform", "low": -0.1, "high": 0.1, "seed": 2}},
    {"name": "v", "shape": [4, 16], "dtype": "f32", "init": {"kind": "normal", "std": 0.3, "seed": 3}}],
  "nodes": [
    {"name": "h", "op": "linear", "inputs": ["x", "w", "b"]},
    {"name": "a", "op": "gelu", "inputs": ["h"]},
    {"name": "y", "op": "linear", "inputs": ["a", "v"]}],
  "outputs": ["y", "a"]
})";

constexpr int kThreads = 8;
const int64_t kShape[2] = {4, 8};

grove_model* compile_or_null(const char* backend) {
  std::string options = std::string(R"({"device": "sim:0", "backend": ")") + backend + "\"}";
  grove_model* model = nullptr;
  EXPECT_EQ(grove_compile(kProgram, options.c_str(), nullptr, 0, &model), GROVE_OK)
      << grove_last_error();
  return model;
}

grove_tensor_desc describe(float* data, void (*release)(void*) = nullptr, void* context = nullptr) {
  grove_tensor_desc desc{};
  desc.data = data;
  desc.dtype = GROVE_F32;
  desc.device_type = GROVE_DEVICE_SIM;
  desc.rank = 2;
  desc.shape = kShape;
  desc.release = release;
  desc.release_context = context;
  return desc;
}

// The outputs of one call as host bytes; empty (and a message) on failure.
std::vector<std::vector<float>> run_once(grove_model* model, float* x, std::string& failure) {
  grove_tensor_desc input = describe(x);
  grove_tensor* outputs[2] = {nullptr, nullptr};
  size_t count = 0;
  std::vector<std::vector<float>> values;
  if (grove_model_run(model, &input, 1, nullptr, outputs, 2, &count) != GROVE_OK) {
    failure = grove_last_error();
    return values;
  }
  for (size_t o = 0; o < count; ++o) {
    int64_t shape[2] = {0, 0};
    grove_tensor_shape(outputs[o], shape);
    std::vector<float> host(static_cast<size_t>(shape[0] * shape[1]));
    if (grove_tensor_copy_to_host(outputs[o], host.data(), host.size() * sizeof(float)) !=
        GROVE_OK) {
      failure = grove_last_error();
    }
    values.push_back(std::move(host));
    grove_tensor_destroy(outputs[o]);
  }
  return values;
}

TEST(CApiThreads, EightThreadsCallingOneModelEachGetTheirOwnResults) {
  grove_model* eager = compile_or_null("eager");
  grove_model* graphs = compile_or_null("cudagraphs");
  ASSERT_NE(eager, nullptr);
  ASSERT_NE(graphs, nullptr);
  const uint32_t seed = std::random_device{}();
  constexpr int kCalls = 250;
  std::vector<std::string> failures(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(seed + static_cast<uint32_t>(t));
      std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
      ++ready;
      while (ready.load() < kThreads) std::this_thread::yield();
      for (int call = 0; call < kCalls && failures[t].empty(); ++call) {
        std::vector<float> x(32);
        for (float& value : x) value = dist(rng);
        std::string failure;
        auto expected = run_once(eager, x.data(), failure);
        auto got = run_once(graphs, x.data(), failure);
        if (!failure.empty()) {
          failures[t] = "call " + std::to_string(call) + ": " + failure;
        } else if (expected.size() != 2 || got != expected) {
          failures[t] = "call " + std::to_string(call) + ": cudagraphs differs from eager";
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(failures[t].empty())
        << "thread " << t << ": " << failures[t] << " (seed " << seed << ")";
  }
  grove_model_destroy(graphs);
  grove_model_destroy(eager);
}

// Holds every call inside grove (in its input's release callback) until opened.
struct Latch {
  std::mutex mutex;
  std::condition_variable changed;
  int inside = 0;
  bool open = false;
  static void hold(void* context) {
    auto* latch = static_cast<Latch*>(context);
    std::unique_lock<std::mutex> lock(latch->mutex);
    ++latch->inside;
    latch->changed.notify_all();
    latch->changed.wait(lock, [&] { return latch->open; });
  }
};

TEST(CApiThreads, DestroyWaitsForTheCallsInFlight) {
  grove_model* model = compile_or_null("cudagraphs");
  ASSERT_NE(model, nullptr);
  Latch latch;
  std::vector<grove_status> statuses(kThreads, GROVE_ERROR_INTERNAL);
  std::vector<std::vector<float>> inputs(kThreads, std::vector<float>(32, 0.5f));
  std::vector<std::thread> callers;
  for (int t = 0; t < kThreads; ++t) {
    callers.emplace_back([&, t] {
      grove_tensor_desc input = describe(inputs[t].data(), &Latch::hold, &latch);
      grove_tensor* outputs[2] = {nullptr, nullptr};
      size_t count = 0;
      statuses[t] = grove_model_run(model, &input, 1, nullptr, outputs, 2, &count);
      for (size_t o = 0; o < count; ++o) grove_tensor_destroy(outputs[o]);
    });
  }
  {
    std::unique_lock<std::mutex> lock(latch.mutex);
    latch.changed.wait(lock, [&] { return latch.inside == kThreads; });
  }
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    grove_model_destroy(model);
    destroyed = true;
  });
  // A call that starts while the destroy waits is refused, naming why (the
  // model is still alive: 8 calls are in flight).
  size_t count = 0;
  grove_status refused = GROVE_OK;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (refused == GROVE_OK && std::chrono::steady_clock::now() < deadline) {
    refused = grove_model_output_count(model, &count);
    std::this_thread::yield();
  }
  EXPECT_EQ(refused, GROVE_ERROR_INVALID_ARGUMENT) << "no call was refused while destroying";
  EXPECT_NE(std::strstr(grove_last_error(), "being destroyed"), nullptr) << grove_last_error();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(destroyed.load()) << "grove_model_destroy returned with 8 calls in flight";
  {
    std::lock_guard<std::mutex> lock(latch.mutex);
    latch.open = true;
  }
  latch.changed.notify_all();
  for (std::thread& caller : callers) caller.join();
  destroyer.join();
  EXPECT_TRUE(destroyed.load());
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(statuses[t], GROVE_OK) << "thread " << t;
}

}  // namespace
