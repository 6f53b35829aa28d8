// RequestReaper (Note [Answered requests freed off the worker]): every
// request handed over is freed, on the reaper's thread, by the time the
// reaper is gone.
#include "serving/request_reaper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
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
        request.promise.set_value(Response{});
      }
      reaper.hand(std::move(batch));
      if (b % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // let it sleep
    }
    reaper.hand({});  // nothing to free: no wake-up, no entry
  }
  EXPECT_EQ(freed.load(), kBatches * kRequests);
  EXPECT_EQ(freed_here.load(), 0) << "requests were freed on the handing thread";
}

}  // namespace
}  // namespace grove::serving
