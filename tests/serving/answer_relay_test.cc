// AnswerRelay (Note [Answers handed on by a relay]): hand-offs run on the
// relay's own thread, in the order posted from any thread, and every one
// posted before the relay is destroyed runs.
#include "serving/answer_relay.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace grove::serving {
namespace {

TEST(AnswerRelay, RunsHandOffsOnItsThreadInOrder) {
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  {
    AnswerRelay relay;
    for (int i = 0; i < 1000; ++i) {
      relay.post([&, i] {
        std::lock_guard<std::mutex> lock(mutex);
        order.push_back(i);
        threads.push_back(std::this_thread::get_id());
      });
    }
  }  // the destructor runs what is left
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  for (const std::thread::id& id : threads) {
    EXPECT_NE(id, std::this_thread::get_id());
    EXPECT_EQ(id, threads.front());
  }
}

TEST(AnswerRelay, EveryPostFromManyThreadsRunsOnce) {
  std::atomic<int> ran{0};
  std::vector<std::atomic<int>> seen(8 * 5000);
  {
    AnswerRelay relay;
    std::vector<std::thread> posters;
    for (int t = 0; t < 8; ++t) {
      posters.emplace_back([&, t] {
        for (int i = 0; i < 5000; ++i) {
          const int id = t * 5000 + i;
          relay.post([&, id] {
            seen[static_cast<size_t>(id)].fetch_add(1);
            ran.fetch_add(1);
          });
          if (i % 500 == 0) std::this_thread::yield();  // let the relay sleep and wake
        }
      });
    }
    for (std::thread& poster : posters) poster.join();
  }
  EXPECT_EQ(ran.load(), 8 * 5000);
  for (const std::atomic<int>& count : seen) ASSERT_EQ(count.load(), 1);
}

}  // namespace
}  // namespace grove::serving
