// The batching policy on its own (no model, no device): FIFO prefixes that fit
// max_batch, max_wait for partial batches, capacity and close.
#include "serving/request_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "serving/errors.h"
#include "serving/server_config.h"
#include "serving/server_stats.h"

namespace grove::serving {
namespace {

using std::chrono::milliseconds;

PendingRequest pending(int64_t rows, uint64_t id) {
  PendingRequest request;
  request.rows = rows;
  request.id = id;
  return request;
}

std::vector<uint64_t> ids(const std::vector<PendingRequest>& batch) {
  std::vector<uint64_t> result;
  for (const PendingRequest& request : batch) result.push_back(request.id);
  return result;
}

TEST(RequestQueue, TakesTheLongestFifoPrefixThatFitsMaxBatch) {
  RequestQueue queue(16, /*max_batch_rows=*/8, std::chrono::microseconds(0));
  const int64_t rows[] = {3, 4, 2, 5, 1, 8};
  for (uint64_t id = 0; id < 6; ++id) queue.push(pending(rows[id], id));
  // 3 + 4 fit; 2 would make 9: it waits for the next batch even though 1 would fit.
  EXPECT_EQ(ids(queue.take_batch()), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(ids(queue.take_batch()), (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(ids(queue.take_batch()), (std::vector<uint64_t>{5}));
  EXPECT_EQ(queue.size(), 0u);
}

TEST(RequestQueue, HoldsAPartialBatchUntilTheOldestRequestHasWaitedMaxWait) {
  const auto max_wait = milliseconds(60);
  RequestQueue queue(16, 8, max_wait);
  auto pushed = Clock::now();
  queue.push(pending(2, 0));
  queue.push(pending(3, 1));
  std::vector<PendingRequest> batch = queue.take_batch();
  auto waited = Clock::now() - pushed;
  EXPECT_EQ(ids(batch), (std::vector<uint64_t>{0, 1}));
  EXPECT_GE(waited, max_wait);
  EXPECT_LT(waited, std::chrono::seconds(30));
}

TEST(RequestQueue, RunsAFullBatchWithoutWaitingForMaxWait) {
  RequestQueue queue(16, 4, std::chrono::hours(1));
  for (uint64_t id = 0; id < 4; ++id) queue.push(pending(1, id));
  EXPECT_EQ(ids(queue.take_batch()), (std::vector<uint64_t>{0, 1, 2, 3}));
}

TEST(RequestQueue, WakesAWaitingWorkerWhenTheBatchFills) {
  RequestQueue queue(16, 4, std::chrono::hours(1));
  std::vector<PendingRequest> batch;
  std::thread worker([&] { batch = queue.take_batch(); });
  for (uint64_t id = 0; id < 4; ++id) {
    queue.push(pending(1, id));
    std::this_thread::sleep_for(milliseconds(5));
  }
  worker.join();
  EXPECT_EQ(ids(batch), (std::vector<uint64_t>{0, 1, 2, 3}));
}

TEST(RequestQueue, RejectsWhenFullAndAfterClose) {
  RequestQueue queue(2, 8, std::chrono::hours(1));
  queue.push(pending(1, 0));
  queue.push(pending(1, 1));
  try {
    queue.push(pending(1, 2));
    ADD_FAILURE() << "a third request fit in a queue of capacity 2";
  } catch (const QueueFullError& error) {
    EXPECT_NE(std::string(error.what()).find("queue_capacity"), std::string::npos) << error.what();
  }
  EXPECT_EQ(queue.size(), 2u);
  queue.close();
  EXPECT_THROW(queue.push(pending(1, 3)), ServerClosedError);
  // Closed: what is queued comes out at once, then an empty batch says stop.
  EXPECT_EQ(ids(queue.take_batch()), (std::vector<uint64_t>{0, 1}));
  EXPECT_TRUE(queue.take_batch().empty());
}

TEST(RequestQueue, CloseAndTakeAllEmptiesTheQueueAndStopsWorkers) {
  RequestQueue queue(8, 8, std::chrono::hours(1));
  std::vector<PendingRequest> batch;
  batch.push_back(pending(1, 99));
  std::thread worker([&] { batch = queue.take_batch(); });
  queue.push(pending(1, 0));
  queue.push(pending(2, 1));
  // 3 rows of 8 with an hour to wait: no batch is due, so close_and_take_all
  // gets both, and the worker (waiting or not yet started) gets none and stops.
  std::vector<PendingRequest> all = queue.close_and_take_all();
  worker.join();
  EXPECT_EQ(ids(all), (std::vector<uint64_t>{0, 1}));
  EXPECT_TRUE(batch.empty());
  EXPECT_TRUE(queue.take_batch().empty());
}

TEST(RequestQueue, RefusesRequestsThatCanNeverFitABatch) {
  RequestQueue queue(8, 4, std::chrono::hours(1));
  EXPECT_THROW(queue.push(pending(5, 0)), ShapeError);
  EXPECT_THROW(queue.push(pending(0, 1)), ShapeError);
}

TEST(ServerConfig, RejectsOutOfRangeValuesNamingTheField) {
  auto expect_field = [](const char* field, auto mutate) {
    ServerConfig config;
    config.devices = {runtime::kSimDevice};
    mutate(config);
    try {
      config.validate();
      ADD_FAILURE() << "no error for a bad " << field;
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find(field), std::string::npos) << error.what();
    }
  };
  expect_field("max_batch", [](ServerConfig& c) { c.max_batch = 0; });
  expect_field("max_batch", [](ServerConfig& c) { c.max_batch = 65; });
  expect_field("buckets", [](ServerConfig& c) { c.buckets = {}; });
  expect_field("buckets", [](ServerConfig& c) { c.buckets = {4, 2, 8}; });
  expect_field("buckets", [](ServerConfig& c) { c.buckets = {0, 64}; });
  expect_field("max_wait", [](ServerConfig& c) { c.max_wait = std::chrono::microseconds(-1); });
  expect_field("queue_capacity", [](ServerConfig& c) { c.queue_capacity = 0; });
  expect_field("backend", [](ServerConfig& c) { c.backend = "turbo"; });
  expect_field("warmup_calls", [](ServerConfig& c) { c.warmup_calls = 2; });
  expect_field("devices", [](ServerConfig& c) { c.devices = {runtime::kCpuDevice}; });
  expect_field("devices", [](ServerConfig& c) {
    c.devices = {runtime::kSimDevice, runtime::kSimDevice};
  });
  ServerConfig fine;
  fine.devices = {runtime::kSimDevice};
  EXPECT_NO_THROW(fine.validate());
  fine.backend = "eager";
  fine.warmup_calls = 0;
  EXPECT_NO_THROW(fine.validate());
}

TEST(ServerConfig, PicksTheSmallestBucketHoldingTheRows) {
  ServerConfig config;
  config.buckets = {1, 4, 16};
  config.max_batch = 16;
  EXPECT_EQ(config.bucket_for(1), 1);
  EXPECT_EQ(config.bucket_for(2), 4);
  EXPECT_EQ(config.bucket_for(4), 4);
  EXPECT_EQ(config.bucket_for(5), 16);
  EXPECT_EQ(config.bucket_for(16), 16);
}

// Note [Submissions counted without the lock]: submissions counted from
// many threads while batches are answered are all in the snapshot, refusals
// undone, and no snapshot counts more answered than submitted.
TEST(StatsRecorder, SubmissionsCountedFromManyThreads) {
  StatsRecorder stats;
  constexpr int kThreads = 8, kEach = 5000;
  std::atomic<bool> done{false};
  std::thread answering([&] {
    // Answers what it sees submitted until the fronts are done and all is answered.
    while (true) {
      const bool fronts_done = done;
      const ServerStats seen = stats.snapshot();
      EXPECT_GE(seen.submitted, seen.completed + seen.failed + seen.cancelled);
      if (seen.submitted > seen.completed) {
        stats.completed(1);
      } else if (fronts_done) {
        return;
      }
    }
  });
  std::vector<std::thread> fronts;
  for (int t = 0; t < kThreads; ++t) {
    fronts.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) stats.submitted();
    });
  }
  for (std::thread& front : fronts) front.join();
  done = true;
  answering.join();
  EXPECT_EQ(stats.snapshot().submitted, uint64_t{kThreads} * kEach);
  for (int i = 0; i < 10; ++i) {
    stats.submitted();
    stats.not_queued(/*queue_full=*/i % 2 == 0);
  }
  const ServerStats last = stats.snapshot();
  EXPECT_EQ(last.submitted, uint64_t{kThreads} * kEach);
  EXPECT_EQ(last.rejected, 5u);
  EXPECT_EQ(last.completed, last.submitted);
}

}  // namespace
}  // namespace grove::serving
