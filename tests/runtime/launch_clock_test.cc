// Note [The launch clock] (runtime/launch_clock.h).
#include "runtime/launch_clock.h"

#include <gtest/gtest.h>

#include <thread>

namespace grove::runtime {
namespace {

TEST(LaunchClock, CountsOnlyWhileRunningAndOnlyItsThread) {
  EXPECT_FALSE(launch_clock::running());
  launch_clock::add(5);  // stopped: not counted
  launch_clock::start();
  EXPECT_TRUE(launch_clock::running());
  launch_clock::add(7);
  std::thread other([] {
    EXPECT_FALSE(launch_clock::running());
    launch_clock::start();
    launch_clock::add(100);
    EXPECT_EQ(launch_clock::stop(), 100);
  });
  other.join();
  launch_clock::add(11);
  EXPECT_EQ(launch_clock::stop(), 18);
  EXPECT_FALSE(launch_clock::running());
  launch_clock::add(3);
  launch_clock::start();
  EXPECT_EQ(launch_clock::stop(), 0) << "start() zeroes the clock";
}

}  // namespace
}  // namespace grove::runtime
