// RequestReaper (Note [Answered requests freed off the worker]): every
// request handed over is freed, on the reaper's thread, by the time the
// reaper is gone.
#include "serving/request_reaper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace grove::serving {
namespace {

// Counts its destructions and the threads they ran on.
struct FreedOn {
  std::atomic<int>* freed;
  std::atomic<int>* freed_here;
  std::thread::id here;
  ~FreedOn() {
    ++*freed;
    if (std::this_thread::get_id() == here) ++*freed_here;
  }
};

TEST(RequestReaper, FreesEveryRequestItIsHanded) {
  std::atomic<int> freed{0}, freed_here{0};
  constexpr int kBatches = 50, kRequests = 16;
  {
    RequestReaper reaper;
    for (int b = 0; b < kBatches; ++b) {
      std::vector<PendingRequest> batch(kRequests);
      for (PendingRequest& request : batch) {
        std::shared_ptr<FreedOn> owned(
            new FreedOn{&freed, &freed_here, std::this_thread::get_id()});
        request.on_ready = [owned] {};
        request.request.inputs.push_back(HostRows::from_values<float>({1.f, 2.f}, {1, 2}));
        request.promise.emplace().set_value(Response{});
      }
      reaper.hand(std::move(batch));
      if (b % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // let it sleep
    }
    reaper.hand({});  // nothing to free: no wake-up, no entry
  }
  EXPECT_EQ(freed.load(), kBatches * kRequests);
  EXPECT_EQ(freed_here.load(), 0) << "requests were freed on the handing thread";
}

// Each request's future is set and its on_ready called on the reaper's
// thread, in the order handed over, the future set before on_ready runs
// (Note [Answers delivered off the worker]).
TEST(RequestReaper, DeliversEachAnswerInOrderOffTheHandingThread) {
  constexpr int kBatches = 20, kRequests = 16;
  std::vector<std::future<Response>> futures;
  futures.reserve(kBatches * kRequests);  // no reallocation while on_readys read them
  std::vector<int> order;  // on_ready calls, by request number (the reaper's thread only)
  std::atomic<int> on_handing_thread{0}, not_ready{0};
  const std::thread::id handing = std::this_thread::get_id();
  {
    RequestReaper reaper;
    for (int b = 0; b < kBatches; ++b) {
      std::vector<PendingRequest> batch(kRequests);
      for (int r = 0; r < kRequests; ++r) {
        PendingRequest& request = batch[static_cast<size_t>(r)];
        const int number = b * kRequests + r;
        futures.push_back(request.promise.emplace().get_future());
        auto* future = &futures.back();
        request.on_ready = [&, number, future] {
          if (std::this_thread::get_id() == handing) ++on_handing_thread;
          if (future->wait_for(std::chrono::seconds(0)) != std::future_status::ready) ++not_ready;
          order.push_back(number);
        };
        if (number % 7 == 3) {
          request.error = std::make_exception_ptr(std::runtime_error("batch failed"));
        } else {
          Response response;
          response.timing.batch_rows = number;
          request.response = std::move(response);
        }
      }
      reaper.hand(std::move(batch));
    }
  }
  ASSERT_EQ(order.size(), static_cast<size_t>(kBatches * kRequests));
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int>(i));
  EXPECT_EQ(on_handing_thread.load(), 0);
  EXPECT_EQ(not_ready.load(), 0);
  for (int number = 0; number < kBatches * kRequests; ++number) {
    std::future<Response>& future = futures[static_cast<size_t>(number)];
    if (number % 7 == 3) {
      EXPECT_THROW(future.get(), std::runtime_error) << number;
    } else {
      EXPECT_EQ(future.get().timing.batch_rows, number);
    }
  }
}

}  // namespace
}  // namespace grove::serving
