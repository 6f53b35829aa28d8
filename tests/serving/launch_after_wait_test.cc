// Note [A batch due after the wait runs before the answers]
// (serving/device_worker.h), on an asynchronous sim device of its own, where
// the worker's wait for a batch is real: a request that falls due during
// that wait is launched before the waited batch is answered, and answered
// with its own rows; with ServerConfig::launch_after_wait off it waits for
// the next turn.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <nlohmann/json.hpp>

#include "runtime/device_context.h"
#include "runtime/sim/sim_platform.h"
#include "serving/server.h"
#include "tests/common/test_util.h"
#include "tests/serving/serving_test_util.h"

namespace grove::serving {
namespace {

using test_support::random_request;
using test_support::tiny_model_with;

// The tiny model with a chain of square GEMMs (one shared weight, scaled to
// keep values near 1) added to its output, so that a batch of 8 rows keeps an
// asynchronous sim stream busy for about 150 ms and one row for a fraction of that.
constexpr int kWide = 2048;
constexpr int kLayers = 64;

ProgramFactory slow_model() {
  return tiny_model_with([](nlohmann::json& model) {
    auto uniform = [](double bound, int seed) {
      return nlohmann::json{{"kind", "uniform"}, {"low", -bound}, {"high", bound}, {"seed", seed}};
    };
    model["params"].push_back(
        {{"name", "w_in"}, {"shape", {kWide, 8}}, {"dtype", "f32"}, {"init", uniform(0.3, 30)}});
    model["params"].push_back({{"name", "w_square"},
                               {"shape", {kWide, kWide}},
                               {"dtype", "f32"},
                               {"init", uniform(0.038, 31)}});
    model["params"].push_back(
        {{"name", "w_out"}, {"shape", {4, kWide}}, {"dtype", "f32"}, {"init", uniform(0.03, 32)}});
    std::string last = "wide0";
    model["nodes"].push_back({{"name", last}, {"op", "linear"}, {"inputs", {"x", "w_in"}}});
    for (int layer = 1; layer <= kLayers; ++layer) {
      const std::string next = "wide" + std::to_string(layer);
      model["nodes"].push_back({{"name", next}, {"op", "linear"}, {"inputs", {last, "w_square"}}});
      last = next;
    }
    model["nodes"].push_back({{"name", "narrow"}, {"op", "linear"}, {"inputs", {last, "w_out"}}});
    model["nodes"].push_back({{"name", "slow_out"}, {"op", "add"}, {"inputs", {"out", "narrow"}}});
    model["outputs"] = {"slow_out", "hidden"};
  });
}

// A sim device whose streams run on worker threads (Note [Asynchronous sim
// streams]); the index is this test's alone, so no other test's context is
// made asynchronous.
runtime::Device async_sim_device() {
  const runtime::Device device = runtime::Device::parse("sim:5");
  ::setenv("GROVE_SIM_ASYNC", "1", 1);
  runtime::device_context(device);
  ::unsetenv("GROVE_SIM_ASYNC");
  return device;
}

struct Outcome {
  ServerStats stats;
  std::vector<Response> answers;
  std::vector<Request> requests;
};

// A full batch (8 rows, due at once), then one row while the worker is still
// launching it: that row falls due (max_wait) while the worker waits for the
// full batch on the device.
Outcome serve_two_batches(runtime::Device device, bool launch_after_wait) {
  GROVE_SEEDED_RNG(rng);
  ServerConfig config;
  config.devices = {device};
  config.backend = "cudagraphs";
  config.buckets = {1, 8};
  config.max_batch = 8;
  config.max_wait = std::chrono::milliseconds(50);
  config.launch_after_wait = launch_after_wait;
  std::promise<void> second_queued;
  std::shared_future<void> queued = second_queued.get_future().share();
  int batches = 0;
  config.before_batch = [&](int64_t, runtime::Device) {
    if (batches++ == 0) queued.wait();
  };
  Server server(slow_model(), config);
  Outcome outcome;
  outcome.requests = {random_request(rng, 8), random_request(rng, 1)};
  std::future<Response> full = server.submit(outcome.requests[0]);
  while (server.stats().submitted < 1 || server.queue_size() > 0) std::this_thread::yield();
  std::future<Response> single = server.submit(outcome.requests[1]);
  second_queued.set_value();
  outcome.answers.push_back(full.get());
  outcome.answers.push_back(single.get());
  outcome.stats = server.stats();
  return outcome;
}

// What the eager model answers for `request` alone.
std::vector<HostRows> slow_reference(const Request& request, runtime::Device device) {
  ServerConfig config;
  config.devices = {device};
  config.backend = "eager";
  config.buckets = {request.inputs.front().rows()};
  config.max_batch = request.inputs.front().rows();
  config.max_wait = std::chrono::microseconds(0);
  config.warmup_calls = 0;
  Server server(slow_model(), config);
  return server.submit(request).get().outputs;
}

TEST(LaunchAfterWait, ABatchDueDuringTheWaitIsLaunchedBeforeTheAnswers) {
  const runtime::Device device = async_sim_device();
  ASSERT_TRUE(runtime::sim_is_async(runtime::device_context(device).platform()));
  const Outcome outcome = serve_two_batches(device, /*launch_after_wait=*/true);
  EXPECT_EQ(outcome.stats.batches, 2u);
  EXPECT_EQ(outcome.stats.launches_after_wait, 1u)
      << "the single row, due during the wait, was not launched before the answers (the worker "
         "waited "
      << outcome.stats.worker_wait_ns / 1000 << " us for the device)";
  for (size_t i = 0; i < outcome.requests.size(); ++i) {
    EXPECT_LE(test_support::max_abs_difference(outcome.answers[i].outputs,
                                               slow_reference(outcome.requests[i], device)),
              1e-4)
        << "request " << i;
  }
}

TEST(LaunchAfterWait, TurnedOffTheDueBatchWaitsForTheNextTurn) {
  const runtime::Device device = async_sim_device();
  const Outcome outcome = serve_two_batches(device, /*launch_after_wait=*/false);
  EXPECT_EQ(outcome.stats.batches, 2u);
  EXPECT_EQ(outcome.stats.launches_after_wait, 0u);
}

}  // namespace
}  // namespace grove::serving
