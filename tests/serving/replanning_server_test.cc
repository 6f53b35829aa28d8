// ReplanningServer (Note [Switching servers], Note [Bucket planning]): it
// switches to buckets that pad less for the traffic it saw, answers every
// request across a switch, keeps its counters monotonic, and declines plans
// that gain too little.
#include "serving/replanning_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/serving/serving_test_util.h"

namespace grove::serving {
namespace {

using test_support::max_abs_difference;
using test_support::random_request;
using test_support::reference_outputs;
using test_support::tiny_model;

ServerConfig eager_config() {
  ServerConfig config;
  config.backend = "eager";
  config.warmup_calls = 1;
  config.max_batch = 8;
  config.buckets = {1, 2, 4, 8};
  config.max_wait = std::chrono::microseconds(0);
  config.devices = {runtime::kSimDevice};
  return config;
}

ReplanConfig manual(uint64_t min_batches = 20) {
  ReplanConfig replan;
  replan.period = std::chrono::milliseconds(0);  // replan_now() only
  replan.min_batches = min_batches;
  return replan;
}

TEST(ReplanningServer, SwitchesToBucketsThatPadLessAndStillAnswersCorrectly) {
  std::string logged;
  ReplanConfig replan = manual();
  replan.on_switch = [&](const std::string& message) { logged = message; };
  ReplanningServer server(tiny_model(), eager_config(), replan);
  std::mt19937 rng(11);
  for (int i = 0; i < 25; ++i) server.submit(random_request(rng, 3)).get();  // one batch each
  EXPECT_EQ(server.stats().padded_rows, 25u);                                // 3 rows in bucket 4
  ASSERT_TRUE(server.replan_now());
  EXPECT_EQ(server.buckets(), (std::vector<int64_t>{3, 8}));
  EXPECT_EQ(server.switches(), 1u);
  EXPECT_NE(logged.find("1,2,4,8 -> 3,8"), std::string::npos) << logged;
  EXPECT_NE(logged.find("padded rows 25 -> 0"), std::string::npos) << logged;

  Request request = random_request(rng, 3);
  std::vector<HostRows> expected = reference_outputs(request, runtime::kSimDevice);
  Response response = server.submit(request).get();
  EXPECT_LT(max_abs_difference(response.outputs, expected), 1e-5);
  EXPECT_EQ(response.timing.bucket, 3);
  ServerStats stats = server.stats();
  EXPECT_EQ(stats.completed, 26u);  // the retired server's 25 and the new one's
  EXPECT_EQ(stats.padded_rows, 25u);
  EXPECT_EQ(stats.batches_by_rows.at(3), 26u);
  EXPECT_EQ(stats.batches_by_bucket.at(4), 25u);
  EXPECT_EQ(stats.batches_by_bucket.at(3), 1u);
}

TEST(ReplanningServer, RequestsSubmittedDuringASwitchAreAllAnswered) {
  ServerConfig config = eager_config();
  config.queue_capacity = 100000;
  ReplanningServer server(tiny_model(), config, manual(10));
  std::mt19937 warm(3);
  for (int i = 0; i < 12; ++i) server.submit(random_request(warm, 5)).get();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> answered{0}, submitted{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(100 + c);
      while (!stop) {
        Request request = random_request(rng, 5);
        std::vector<HostRows> expected = reference_outputs(request, runtime::kSimDevice);
        std::future<Response> answer = server.submit(std::move(request));
        ++submitted;
        Response response = answer.get();  // throws if a switch lost it
        EXPECT_LT(max_abs_difference(response.outputs, expected), 1e-5);
        ++answered;
      }
    });
  }
  while (submitted < 20) std::this_thread::yield();
  EXPECT_TRUE(server.replan_now());  // 5-row batches: 1,2,4,8 -> 5,8
  const uint64_t at_switch = submitted;
  while (submitted < at_switch + 20) std::this_thread::yield();
  stop = true;
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(answered.load(), submitted.load());
  EXPECT_EQ(server.buckets(), (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(server.stats().completed, submitted.load() + 12);
  EXPECT_EQ(server.stats().failed + server.stats().cancelled + server.stats().rejected, 0u);
}

TEST(ReplanningServer, DeclinesPlansWithTooFewBatchesOrTooLittleGain) {
  ReplanningServer server(tiny_model(), eager_config(), manual(20));
  std::mt19937 rng(5);
  for (int i = 0; i < 10; ++i) server.submit(random_request(rng, 3)).get();
  EXPECT_FALSE(server.replan_now()) << "10 batches are fewer than min_batches";
  // The window restarts only when a plan is made: 10 + 15 batches of 4 rows
  // and 3 rows; powers of two pad the 3-row ones by 1 each.
  for (int i = 0; i < 15; ++i) server.submit(random_request(rng, 4)).get();
  EXPECT_TRUE(server.replan_now());
  EXPECT_EQ(server.buckets(), (std::vector<int64_t>{3, 4, 8}));
  // 4-row batches only: {3, 4, 8} already pads nothing.
  for (int i = 0; i < 25; ++i) server.submit(random_request(rng, 4)).get();
  EXPECT_FALSE(server.replan_now());
  EXPECT_EQ(server.switches(), 1u);
  EXPECT_THROW(ReplanningServer(tiny_model(), eager_config(), {.min_gain = 0}), ConfigError);
}

TEST(ReplanningServer, GraphCountersNeverGoBackAcrossASwitch) {
  ServerConfig config = eager_config();
  config.backend = "cudagraphs";
  config.warmup_calls = 3;
  ReplanningServer server(tiny_model(), config, manual(10));
  std::mt19937 rng(21);
  for (int i = 0; i < 12; ++i) server.submit(random_request(rng, 3)).get();
  auto replays = [&] {
    std::vector<WorkerSnapshot> snapshots = server.backend_snapshots();
    return snapshots.at(0).tree.value().counters.replays;
  };
  // The worker refreshes its snapshot after batches, at most every 500 ms.
  const uint64_t before = replays();
  ASSERT_TRUE(server.replan_now());
  const uint64_t after = replays();
  EXPECT_GE(after, before) << "a switch made the replay counter go back";
  EXPECT_GE(after, 12u + 4u) << "the retired server's replays (warm-up and 12 batches) are kept";
}

TEST(ReplanningServer, NoSwitchWhenBothServersWouldPassTheMemoryBudget) {
  ServerConfig config = eager_config();
  config.backend = "cudagraphs";
  config.warmup_calls = 3;
  ReplanConfig replan = manual(10);
  replan.memory_budget_bytes = 1;  // below any pool
  std::string logged;
  replan.on_switch = [&](const std::string& message) { logged = message; };
  ReplanningServer server(tiny_model(), config, replan);
  std::mt19937 rng(23);
  for (int i = 0; i < 12; ++i) server.submit(random_request(rng, 3)).get();
  EXPECT_FALSE(server.replan_now());
  EXPECT_EQ(server.switches(), 0u);
  EXPECT_NE(logged.find("over the budget of 1"), std::string::npos) << logged;
}

TEST(ReplanningServer, PlannerThreadReplansOnItsOwn) {
  ReplanConfig replan;
  replan.period = std::chrono::milliseconds(50);
  replan.min_batches = 10;
  ReplanningServer server(tiny_model(), eager_config(), replan);
  std::mt19937 rng(9);
  for (int i = 0; i < 12; ++i) server.submit(random_request(rng, 6)).get();
  for (int wait = 0; wait < 200 && server.switches() == 0; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(server.switches(), 1u);
  EXPECT_EQ(server.buckets(), (std::vector<int64_t>{6, 8}));
  server.shutdown();
  EXPECT_THROW(server.submit(random_request(rng, 1)), ServerClosedError);
}

}  // namespace
}  // namespace grove::serving
