// The batching server end to end on each device (sim always, cuda when
// present), with a small two-input, two-output model: every request gets
// exactly its own rows, batches respect max_batch and max_wait, back-pressure,
// shutdown (drain and cancel), bad requests, and "cudagraphs" == "eager".
#include "serving/server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "tests/common/test_util.h"
#include "tests/serving/serving_test_util.h"

namespace grove::serving {
namespace {

using std::chrono::milliseconds;
using test_support::kShiftWidth;
using test_support::kXWidth;
using test_support::random_request;
using test_support::reference_outputs;
using test_support::tiny_model;
using test_support::WorkerGate;

// f32 rows computed at another batch size may round differently (GEMM
// blocking); another request's rows would differ by far more.
constexpr double kTolerance = 1e-4;

class ServerTest : public grove::testing::DeviceTest {
 protected:
  ServerConfig config(const std::string& backend = "cudagraphs") const {
    ServerConfig config;
    config.devices = {device()};
    config.backend = backend;
    config.buckets = {1, 2, 4, 8};
    config.max_batch = 8;
    config.max_wait = std::chrono::microseconds(2000);
    config.queue_capacity = 256;
    return config;
  }
};

TEST_P(ServerTest, ConcurrentSubmittersEachGetExactlyTheirOwnRows) {
  GROVE_SEEDED_RNG(rng);
  Server server(tiny_model(), config());
  constexpr int kSubmitters = 6;
  constexpr int kRequestsEach = 30;
  // Every request's rows are distinct random values; the reference is the
  // model run on that request alone.
  std::vector<std::vector<Request>> requests(kSubmitters);
  for (auto& mine : requests) {
    for (int i = 0; i < kRequestsEach; ++i) {
      mine.push_back(random_request(rng, std::uniform_int_distribution<int64_t>(1, 4)(rng)));
    }
  }
  std::vector<std::vector<std::future<Response>>> futures(kSubmitters);
  std::vector<std::thread> submitters;
  for (int s = 0; s < kSubmitters; ++s) {
    submitters.emplace_back([&, s] {
      for (const Request& request : requests[s]) futures[s].push_back(server.submit(request));
    });
  }
  for (std::thread& thread : submitters) thread.join();
  for (int s = 0; s < kSubmitters; ++s) {
    for (int i = 0; i < kRequestsEach; ++i) {
      Response response = futures[s][i].get();
      std::vector<HostRows> expected = reference_outputs(requests[s][i], device());
      ASSERT_LE(test_support::max_abs_difference(response.outputs, expected), kTolerance)
          << "submitter " << s << " request " << i;
      EXPECT_EQ(response.outputs[0].shape, (runtime::Shape{requests[s][i].inputs[0].rows(), 4}));
      EXPECT_EQ(response.timing.device, device());
      EXPECT_LE(response.timing.batch_rows, 8);
    }
  }
  server.shutdown();
  ServerStats stats = server.stats();
  EXPECT_EQ(stats.submitted, uint64_t{kSubmitters * kRequestsEach});
  EXPECT_EQ(stats.completed, stats.submitted);
  EXPECT_EQ(stats.pending(), 0u);
  EXPECT_LE(stats.largest_batch_rows, 8);
  EXPECT_EQ(stats.rows + stats.padded_rows, [&] {
    uint64_t bucket_rows = 0;
    for (const auto& [bucket, count] : stats.batches_by_bucket) bucket_rows += bucket * count;
    return bucket_rows;
  }());
}

TEST_P(ServerTest, BatchesFillToMaxBatchAndNeverExceedIt) {
  GROVE_SEEDED_RNG(rng);
  WorkerGate gate;
  ServerConfig settings = config();
  settings.max_wait = std::chrono::microseconds(0);
  settings.before_batch = gate.hook();
  Server server(tiny_model(), settings);
  std::vector<Request> requests;
  std::vector<std::future<Response>> futures;
  auto submit = [&](int64_t rows) {
    requests.push_back(random_request(rng, rows));
    futures.push_back(server.submit(requests.back()));
  };
  submit(1);
  gate.wait_for_entries(1);  // the worker now holds a batch of 1 row
  for (int i = 0; i < 20; ++i) submit(1);
  submit(3);
  submit(3);
  submit(3);
  gate.release();
  for (size_t i = 0; i < futures.size(); ++i) {
    Response response = futures[i].get();
    EXPECT_LE(test_support::max_abs_difference(response.outputs,
                                               reference_outputs(requests[i], device())),
              kTolerance)
        << "request " << i;
  }
  // Queued while the worker was held: 20 single rows then three of 3 rows.
  // FIFO prefixes of at most 8 rows: 8, 8, 4 + 3 (the next 3 would make 10), 3 + 3.
  EXPECT_EQ(gate.batch_rows(), (std::vector<int64_t>{1, 8, 8, 7, 6}));
  ServerStats stats = server.stats();
  EXPECT_EQ(stats.batches, 5u);
  EXPECT_EQ(stats.largest_batch_rows, 8);
  EXPECT_EQ(stats.padded_rows, 1u + 2u);  // 7 -> 8, 6 -> 8
}

TEST_P(ServerTest, APartialBatchRunsOnceItsOldestRequestHasWaitedMaxWait) {
  GROVE_SEEDED_RNG(rng);
  ServerConfig settings = config();
  settings.max_wait = std::chrono::microseconds(40000);
  Server server(tiny_model(), settings);
  Request request = random_request(rng, 3);
  Response response = server.submit(request).get();
  EXPECT_GE(response.timing.dispatched - response.timing.submitted, settings.max_wait);
  EXPECT_EQ(response.timing.batch_rows, 3);
  EXPECT_EQ(response.timing.bucket, 4);
  EXPECT_LE(
      test_support::max_abs_difference(response.outputs, reference_outputs(request, device())),
      kTolerance);
}

TEST_P(ServerTest, AFullQueueRejectsWithQueueFullErrorAndTheServerKeepsWorking) {
  GROVE_SEEDED_RNG(rng);
  WorkerGate gate;
  ServerConfig settings = config();
  settings.queue_capacity = 4;
  settings.max_wait = std::chrono::microseconds(0);
  settings.before_batch = gate.hook();
  Server server(tiny_model(), settings);
  std::vector<std::future<Response>> futures;
  futures.push_back(server.submit(random_request(rng, 1)));
  gate.wait_for_entries(1);
  for (int i = 0; i < 4; ++i) futures.push_back(server.submit(random_request(rng, 1)));
  bool rejected = false;
  try {
    server.submit(random_request(rng, 1));
  } catch (const QueueFullError& error) {
    rejected = true;
    EXPECT_NE(std::string(error.what()).find("capacity 4"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(rejected);
  gate.release();
  for (auto& future : futures) EXPECT_NO_THROW(future.get());
  Request later = random_request(rng, 2);
  Response response = server.submit(later).get();
  EXPECT_LE(test_support::max_abs_difference(response.outputs, reference_outputs(later, device())),
            kTolerance);
  ServerStats stats = server.stats();
  EXPECT_EQ(stats.rejected, 1u);
  EXPECT_EQ(stats.submitted, 6u);
  EXPECT_EQ(stats.completed, 6u);
}

TEST_P(ServerTest, DrainingShutdownAnswersEveryQueuedRequestWithoutWaitingForMaxWait) {
  GROVE_SEEDED_RNG(rng);
  WorkerGate gate;
  ServerConfig settings = config();
  settings.max_wait = std::chrono::microseconds(std::chrono::hours(1));
  settings.before_batch = gate.hook();
  Server server(tiny_model(), settings);
  std::vector<Request> requests;
  std::vector<std::future<Response>> futures;
  for (int64_t i = 0; i < 8; ++i) {  // 8 rows: a full batch, due at once
    requests.push_back(random_request(rng, 1));
    futures.push_back(server.submit(requests.back()));
  }
  gate.wait_for_entries(1);
  for (int64_t rows : {2, 3, 1, 4}) {  // 10 rows, an hour from due
    requests.push_back(random_request(rng, rows));
    futures.push_back(server.submit(requests.back()));
  }
  auto begin = Clock::now();
  std::thread stopper([&] { server.shutdown(ShutdownMode::kDrain); });
  gate.release();
  stopper.join();
  EXPECT_LT(Clock::now() - begin, std::chrono::seconds(60));
  for (size_t i = 0; i < futures.size(); ++i) {
    ASSERT_EQ(futures[i].wait_for(std::chrono::seconds(0)), std::future_status::ready) << i;
    EXPECT_LE(test_support::max_abs_difference(futures[i].get().outputs,
                                               reference_outputs(requests[i], device())),
              kTolerance)
        << "request " << i;
  }
  EXPECT_THROW(server.submit(random_request(rng, 1)), ServerClosedError);
  EXPECT_EQ(server.stats().completed, 12u);
  EXPECT_EQ(server.stats().pending(), 0u);
}

TEST_P(ServerTest, CancellingShutdownFailsQueuedRequestsAndFinishesTheRunningBatch) {
  GROVE_SEEDED_RNG(rng);
  WorkerGate gate;
  ServerConfig settings = config();
  settings.max_wait = std::chrono::microseconds(0);
  settings.before_batch = gate.hook();
  Server server(tiny_model(), settings);
  Request running = random_request(rng, 2);
  std::future<Response> running_future = server.submit(running);
  gate.wait_for_entries(1);
  std::vector<std::future<Response>> queued;
  for (int i = 0; i < 10; ++i) queued.push_back(server.submit(random_request(rng, 1)));
  std::thread stopper([&] { server.shutdown(ShutdownMode::kCancel); });
  // The cancel empties the queue before it waits for the worker.
  while (server.queue_size() != 0) std::this_thread::yield();
  gate.release();
  stopper.join();
  EXPECT_LE(test_support::max_abs_difference(running_future.get().outputs,
                                             reference_outputs(running, device())),
            kTolerance);
  for (auto& future : queued) {
    ASSERT_EQ(future.wait_for(std::chrono::seconds(0)), std::future_status::ready);
    try {
      future.get();
      ADD_FAILURE() << "a queued request ran after a cancelling shutdown";
    } catch (const RequestCancelledError& error) {
      EXPECT_NE(std::string(error.what()).find("cancelled"), std::string::npos);
    }
  }
  ServerStats stats = server.stats();
  EXPECT_EQ(stats.completed, 1u);
  EXPECT_EQ(stats.cancelled, 10u);
  EXPECT_EQ(stats.pending(), 0u);
  EXPECT_EQ(gate.batch_rows(), (std::vector<int64_t>{2}));
}

TEST_P(ServerTest, DestroyingTheServerAnswersEveryAcceptedRequest) {
  GROVE_SEEDED_RNG(rng);
  std::vector<Request> requests;
  std::vector<std::future<Response>> futures;
  {
    ServerConfig settings = config();
    settings.max_wait = std::chrono::microseconds(std::chrono::hours(1));
    Server server(tiny_model(), settings);
    for (int64_t rows : {1, 2, 3}) {
      requests.push_back(random_request(rng, rows));
      futures.push_back(server.submit(requests.back()));
    }
  }
  for (size_t i = 0; i < futures.size(); ++i) {
    EXPECT_LE(test_support::max_abs_difference(futures[i].get().outputs,
                                               reference_outputs(requests[i], device())),
              kTolerance);
  }
}

TEST_P(ServerTest, ABadRequestFailsAloneAtSubmitWhileOthersAreServed) {
  GROVE_SEEDED_RNG(rng);
  Server server(tiny_model(), config());
  std::vector<Request> good;
  for (int i = 0; i < 40; ++i) good.push_back(random_request(rng, 1 + i % 3));
  std::vector<std::future<Response>> futures;
  std::thread submitter([&] {
    for (const Request& request : good) futures.push_back(server.submit(request));
  });
  auto expect_refused = [&](Request request, const char* says, bool dtype) {
    try {
      server.submit(std::move(request));
      ADD_FAILURE() << "accepted a bad request (" << says << ")";
    } catch (const DTypeError& error) {
      EXPECT_TRUE(dtype) << error.what();
      EXPECT_NE(std::string(error.what()).find(says), std::string::npos) << error.what();
    } catch (const ShapeError& error) {
      EXPECT_FALSE(dtype) << error.what();
      EXPECT_NE(std::string(error.what()).find(says), std::string::npos) << error.what();
    }
  };
  Request wide = random_request(rng, 2);
  wide.inputs[0] = HostRows::from_values(std::vector<float>(2 * 9, 0.5f), {2, 9});
  expect_refused(wide, "[rows, 8]", false);
  Request wrong_dtype = random_request(rng, 1);
  wrong_dtype.inputs[1] = HostRows::from_values(std::vector<double>(4, 0.25), {1, 4});
  expect_refused(wrong_dtype, "'shift'", true);
  expect_refused(random_request(rng, 9), "max_batch", false);
  Request one_input = random_request(rng, 1);
  one_input.inputs.pop_back();
  expect_refused(one_input, "x, shift", false);
  Request mismatched = random_request(rng, 2);
  mismatched.inputs[1] = random_request(rng, 3).inputs[1];
  expect_refused(mismatched, "same rows", false);
  Request short_bytes = random_request(rng, 2);
  short_bytes.inputs[0].bytes.resize(7);
  expect_refused(short_bytes, "bytes", false);
  submitter.join();
  for (size_t i = 0; i < futures.size(); ++i) {
    EXPECT_LE(test_support::max_abs_difference(futures[i].get().outputs,
                                               reference_outputs(good[i], device())),
              kTolerance);
  }
  EXPECT_EQ(server.stats().invalid, 6u);
  EXPECT_EQ(server.stats().completed, good.size());
}

// Note [Requests checked once]: a request checked against the signature is
// served as is, and one that no check built is refused without being queued.
TEST_P(ServerTest, ACheckedRequestIsServedAndAnUncheckedOneRefused) {
  GROVE_SEEDED_RNG(rng);
  Server server(tiny_model(), config());
  const Request request = random_request(rng, 2);
  CheckedRequest checked = server.signature().check_request(request, server.max_batch());
  EXPECT_EQ(checked.rows(), 2);
  std::future<Response> answer = server.submit_then(std::move(checked), nullptr);
  EXPECT_LE(
      test_support::max_abs_difference(answer.get().outputs, reference_outputs(request, device())),
      kTolerance);
  try {
    server.submit_then(CheckedRequest(), nullptr);
    ADD_FAILURE() << "queued a CheckedRequest that no check built";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("check_request"), std::string::npos) << error.what();
  }
  EXPECT_EQ(server.stats().submitted, 1u);
  EXPECT_EQ(server.stats().completed, 1u);
}

// Note [Answers without a future]: a request submitted with an OnAnswer gets
// exactly its own rows through it, once, off the submitting thread, and a
// cancelling shutdown hands the queued ones RequestCancelledError the same way.
TEST_P(ServerTest, AnswersWithoutAFutureReachTheirCallback) {
  GROVE_SEEDED_RNG(rng);
  WorkerGate gate;
  ServerConfig settings = config();
  settings.max_wait = std::chrono::microseconds(0);
  settings.before_batch = gate.hook();
  Server server(tiny_model(), settings);
  constexpr size_t kAnswered = 12, kCancelled = 5;
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::optional<RequestAnswer>> answers(kAnswered + kCancelled);
  std::vector<int> calls(answers.size(), 0);
  const std::thread::id submitter = std::this_thread::get_id();
  bool on_submitter = false;
  std::vector<Request> requests;
  auto submit = [&](size_t i) {
    requests.push_back(random_request(rng, 1 + static_cast<int64_t>(i % 3)));
    server.submit_then_answer(server.signature().check_request(requests.back(), server.max_batch()),
                              [&, i](RequestAnswer answer) {
                                std::lock_guard<std::mutex> lock(mutex);
                                on_submitter =
                                    on_submitter || std::this_thread::get_id() == submitter;
                                ++calls[i];
                                answers[i] = std::move(answer);
                                arrived.notify_all();
                              });
  };
  // The first batch is held in the gate while the rest queue behind it.
  submit(0);
  gate.wait_for_entries(1);
  for (size_t i = 1; i < kAnswered; ++i) submit(i);
  gate.release();
  {
    std::unique_lock<std::mutex> lock(mutex);
    arrived.wait(lock, [&] {
      return std::all_of(answers.begin(), answers.begin() + kAnswered,
                         [](const auto& answer) { return answer.has_value(); });
    });
  }
  for (size_t i = 0; i < kAnswered; ++i) {
    const RequestAnswer& answer = *answers[i];
    ASSERT_FALSE(answer.error) << "request " << i;
    ASSERT_TRUE(answer.response.has_value()) << "request " << i;
    EXPECT_LE(test_support::max_abs_difference(answer.response->outputs,
                                               reference_outputs(requests[i], device())),
              kTolerance)
        << "request " << i;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_FALSE(on_submitter) << "an answer was handed on the submitting thread";
  }
  // Cancelled (on the thread that shuts down): queued when the shutdown empties the queue (no batch
  // is due for a closed queue before the cancel takes them, as the worker needs the queue's lock to
  // take one; either way each gets one answer).
  for (size_t i = kAnswered; i < answers.size(); ++i) submit(i);
  server.shutdown(ShutdownMode::kCancel);
  size_t cancelled = 0;
  for (size_t i = kAnswered; i < answers.size(); ++i) {
    ASSERT_TRUE(answers[i].has_value()) << "request " << i << " was never answered";
    const RequestAnswer& answer = *answers[i];
    if (answer.response) continue;  // taken by the worker before the cancel
    ++cancelled;
    try {
      std::rethrow_exception(answer.error);
    } catch (const RequestCancelledError&) {
    } catch (...) {
      ADD_FAILURE() << "request " << i << " failed with something else than cancellation";
    }
  }
  for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i], 1) << "request " << i;
  const ServerStats stats = server.stats();
  EXPECT_EQ(stats.cancelled, cancelled);
  EXPECT_EQ(stats.completed + stats.cancelled, answers.size());
}

// Note [Requests checked once]: one shape and dtype check per request, where
// it enters the server (Server::submit's, or the check that built a
// CheckedRequest), and none by the door for any batch: the worker's bucket
// inputs were bound once at warm-up. A second check anywhere on the path
// (the door's per batch, or the server's again) shows in these counts.
TEST_P(ServerTest, EachRequestIsCheckedOnce) {
  GROVE_SEEDED_RNG(rng);
  Server server(tiny_model(), config());
  EXPECT_EQ(server.stats().request_checks, 0u);
  EXPECT_EQ(server.stats().door_checks, 0u);
  constexpr int kRequests = 24;
  std::vector<Request> requests;
  std::vector<std::future<Response>> futures;
  for (int i = 0; i < kRequests; ++i) {
    requests.push_back(random_request(rng, 1 + i % 3));
    if (i % 2 == 0) {
      futures.push_back(server.submit(requests.back()));
    } else {  // checked first, as the protocol fronts do
      futures.push_back(server.submit_then(
          server.signature().check_request(requests.back(), server.max_batch()), nullptr));
    }
  }
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_LE(test_support::max_abs_difference(futures[i].get().outputs,
                                               reference_outputs(requests[i], device())),
              kTolerance);
  }
  ServerStats stats = server.stats();
  EXPECT_GT(stats.batches, 0u);
  EXPECT_EQ(stats.completed, uint64_t{kRequests});
  EXPECT_EQ(stats.request_checks, uint64_t{kRequests}) << "a request was checked twice";
  EXPECT_EQ(stats.door_checks, 0u) << "the door checked a batch again";
  EXPECT_EQ(stats.to_json()["request_checks"], kRequests);
}

// Note [Request bytes copied once]: a request's rows live in pinned memory
// from where they were written, and the worker copies them from there to the
// device, each byte once, with no host batch between (about one copy per run
// of adjacent requests, never more than one per request and input).
TEST_P(ServerTest, RequestBytesAreCopiedOnceToTheDevice) {
  GROVE_SEEDED_RNG(rng);
  Server server(tiny_model(), config());
  constexpr int kRequests = 30;
  std::vector<Request> requests;
  uint64_t request_bytes = 0;
  for (int i = 0; i < kRequests; ++i) {
    requests.push_back(random_request(rng, 1 + i % 4));
    for (const HostRows& rows : requests.back().inputs) {
      EXPECT_TRUE(PinnedRowPool::contains(rows.bytes.data())) << "request " << i;
      request_bytes += rows.bytes.size();
    }
  }
  std::vector<std::future<Response>> futures;
  for (const Request& request : requests) futures.push_back(server.submit(request));
  for (int i = 0; i < kRequests; ++i) {
    Response response = futures[i].get();
    EXPECT_LE(test_support::max_abs_difference(response.outputs,
                                               reference_outputs(requests[i], device())),
              kTolerance);
    for (const HostRows& rows : response.outputs) {
      EXPECT_TRUE(PinnedRowPool::contains(rows.bytes.data())) << "response " << i;
    }
  }
  ServerStats stats = server.stats();
  EXPECT_EQ(stats.request_bytes_to_device, request_bytes);
  // Note [One input copy per batch]: whether or not a batch's rows lie next
  // to each other, each of the two inputs takes one copy per batch.
  EXPECT_EQ(stats.request_copies_to_device, stats.batches * 2) << "two inputs per batch";
}

TEST_P(ServerTest, AFailingBatchFailsOnlyItsOwnRequests) {
  GROVE_SEEDED_RNG(rng);
  std::atomic<int> batches{0};
  ServerConfig settings = config();
  settings.max_wait = std::chrono::microseconds(0);
  settings.before_batch = [&](int64_t, runtime::Device) {
    if (batches++ == 0) throw DeviceError("injected device failure");
  };
  Server server(tiny_model(), settings);
  std::future<Response> first = server.submit(random_request(rng, 2));
  EXPECT_THROW(first.get(), DeviceError);
  Request second = random_request(rng, 2);
  EXPECT_LE(test_support::max_abs_difference(server.submit(second).get().outputs,
                                             reference_outputs(second, device())),
            kTolerance);
  EXPECT_EQ(server.stats().failed, 1u);
  EXPECT_EQ(server.stats().completed, 1u);
}

// Note [Two batches in flight]: with a batch due while another runs, the
// worker launches it before it answers the running one, so the host work of
// answering overlaps the device's work on the next batch.
TEST_P(ServerTest, TheNextDueBatchIsLaunchedBeforeThePreviousBatchIsAnswered) {
  GROVE_SEEDED_RNG(rng);
  ServerConfig settings = config();
  settings.max_wait = std::chrono::microseconds(0);
  std::promise<void> queued;
  std::shared_future<void> all_queued = queued.get_future().share();
  std::vector<std::shared_future<Response>> second_batch;  // written before all_queued
  std::atomic<int> batches{0};
  std::atomic<int> answered_at_third_launch{-1};
  settings.before_batch = [&](int64_t, runtime::Device) {
    const int index = batches.fetch_add(1);
    if (index == 0) all_queued.wait();
    if (index == 2) {
      int answered = 0;
      for (const std::shared_future<Response>& future : second_batch) {
        answered += future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      }
      answered_at_third_launch = answered;
    }
  };
  Server server(tiny_model(), settings);
  std::vector<Request> requests;
  std::vector<std::shared_future<Response>> futures;
  requests.push_back(random_request(rng, 1));
  futures.push_back(server.submit(requests.back()).share());
  while (batches.load() == 0) std::this_thread::yield();  // the worker holds request 0 alone
  for (int i = 0; i < 16; ++i) {
    requests.push_back(random_request(rng, 1));
    futures.push_back(server.submit(requests.back()).share());
  }
  second_batch.assign(futures.begin() + 1, futures.begin() + 9);
  queued.set_value();
  for (size_t i = 0; i < futures.size(); ++i) {
    EXPECT_LE(test_support::max_abs_difference(futures[i].get().outputs,
                                               reference_outputs(requests[i], device())),
              kTolerance)
        << "request " << i;
  }
  EXPECT_EQ(batches.load(), 3);  // 1 row, then two full batches of 8
  EXPECT_EQ(answered_at_third_launch.load(), 0)
      << "the second batch was answered before the third was launched";
  EXPECT_EQ(server.stats().completed, 17u);
}

TEST_P(ServerTest, GraphBackendAnswersAreBitwiseEqualToEagerAndComeFromReplays) {
  GROVE_SEEDED_RNG(rng);
  std::vector<Request> requests;
  for (int64_t rows = 1; rows <= 8; ++rows) {
    requests.push_back(random_request(rng, rows));
    requests.push_back(random_request(rng, 9 - rows));
  }
  std::vector<std::vector<HostRows>> answers[2];
  WorkerReport graph_report;
  for (int b = 0; b < 2; ++b) {
    ServerConfig settings = config(b == 0 ? "eager" : "cudagraphs");
    settings.max_wait = std::chrono::microseconds(0);
    Server server(tiny_model(), settings);
    // One at a time, so both servers run the same batches in the same buckets.
    for (const Request& request : requests)
      answers[b].push_back(server.submit(request).get().outputs);
    server.shutdown();
    if (b == 1) graph_report = server.worker_reports()[0];
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_TRUE(test_support::same_bits(answers[0][i], answers[1][i])) << "request " << i;
  }
  // Every bucket was recorded at warm-up; serving only replayed.
  ASSERT_TRUE(graph_report.tree_after_warmup && graph_report.tree_at_exit);
  const runtime::TreeCounters& warm = graph_report.tree_after_warmup->counters;
  const runtime::TreeCounters& exit = graph_report.tree_at_exit->counters;
  const std::string report = report_json(graph_report).dump();
  EXPECT_EQ(exit.recordings, warm.recordings) << report;
  EXPECT_GE(exit.replays - warm.replays, requests.size()) << report;
  EXPECT_GE(warm.recordings, 4u) << report;
}

TEST_P(ServerTest, RejectsAModelWhoseOutputIsNotBatched) {
  // The output sums over every row: not [batch, ...].
  ProgramFactory summed = test_support::tiny_model_with([](nlohmann::json& model) {
    model["nodes"].push_back({{"name", "total"}, {"op", "sum"}, {"inputs", {"out"}}});
    model["outputs"] = {"total"};
  });
  try {
    Server server(summed, config());
    ADD_FAILURE() << "served a model whose output is not [batch, ...]";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("'total'"), std::string::npos) << error.what();
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(ServerTest);

TEST(ServerOnTwoDevices, BothWorkersTakeBatchesFromTheOneQueue) {
  GROVE_SEEDED_RNG(rng);
  WorkerGate gate;
  ServerConfig settings;
  settings.devices = {runtime::Device::parse("sim:0"), runtime::Device::parse("sim:1")};
  settings.buckets = {1, 2, 4};
  settings.max_batch = 4;
  settings.max_wait = std::chrono::microseconds(0);
  settings.before_batch = gate.hook();
  Server server(tiny_model(), settings);
  std::vector<Request> requests;
  std::vector<std::future<Response>> futures;
  requests.push_back(random_request(rng, 1));
  futures.push_back(server.submit(requests.back()));
  gate.wait_for_entries(1);  // one worker is held: the other must serve the rest
  for (int i = 0; i < 12; ++i) {
    requests.push_back(random_request(rng, 1 + i % 2));
    futures.push_back(server.submit(requests.back()));
  }
  for (size_t i = 1; i < futures.size(); ++i) {
    Response response = futures[i].get();
    EXPECT_LE(test_support::max_abs_difference(response.outputs,
                                               reference_outputs(requests[i], runtime::kSimDevice)),
              kTolerance);
    EXPECT_NE(response.timing.device, gate.batch_devices().front());
  }
  gate.release();
  EXPECT_EQ(futures[0].get().timing.device, gate.batch_devices().front());
  EXPECT_EQ(server.worker_reports().size(), 2u);
}

}  // namespace
}  // namespace grove::serving
