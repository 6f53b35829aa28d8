#include "benchmarks/serve_http/tail_timeline.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

namespace grove::benchmarks {
namespace {

TEST(TailTimeline, OneStallPutsTheTailInAFewBins) {
  const uint64_t seed = 35;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> fast(300, 700);
  std::vector<double> arrivals, latencies;
  for (int i = 0; i < 7000; ++i) {
    const double at = 0.1 * i;  // 700 ms
    arrivals.push_back(at);
    // A stall from 312 to 324 ms: what arrives in it waits for its end.
    latencies.push_back(at >= 312 && at < 324 ? (324 - at) * 1000 + 1000 : fast(rng));
  }
  const TailTimeline tail = tail_timeline(arrivals, latencies, 1000);
  EXPECT_EQ(tail.count, 120u) << "seed " << seed;
  EXPECT_DOUBLE_EQ(tail.first_ms, 312);
  EXPECT_NEAR(tail.last_ms, 323.9, 1e-9);
  EXPECT_EQ(tail.bins, 2u);
  EXPECT_DOUBLE_EQ(tail.busiest_bin_ms, 310);  // 312-320 ms: 80 of the 120
  EXPECT_NEAR(tail.busiest_share, 80.0 / 120, 1e-12);
  EXPECT_NEAR(tail.max_us, 13000, 1e-6);
  EXPECT_NE(describe(tail).find(
                "120 >= 1000 us: arrived 312-323 ms in 2 bins of 10 ms, 67% in 310-320 ms"),
            std::string::npos)
      << describe(tail);
}

TEST(TailTimeline, ASlowFrontSpreadsTheTail) {
  const uint64_t seed = 36;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> latency(300, 5000);
  std::vector<double> arrivals, latencies;
  for (int i = 0; i < 7000; ++i) {
    arrivals.push_back(0.1 * i);
    latencies.push_back(latency(rng));
  }
  const TailTimeline tail = tail_timeline(arrivals, latencies, 4900);
  EXPECT_GT(tail.bins, 40u) << "seed " << seed;
  EXPECT_LT(tail.busiest_share, 0.1) << "seed " << seed;
}

TEST(TailTimeline, MismatchedOrEmptyInputsGiveNoTail) {
  EXPECT_EQ(tail_timeline({1, 2}, {5}, 1).count, 0u);
  EXPECT_EQ(tail_timeline({}, {}, 1).count, 0u);
  EXPECT_EQ(describe(tail_timeline({}, {}, 1)), "no tail (no arrival times)");
}

TEST(StallProbe, StopsWithinAPeriodAndSaysWhatItSaw) {
  StallProbe probe;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const auto asked = std::chrono::steady_clock::now();
  const StallProbe::Report report = probe.stop();
  // It sleeps 1 ms at a time, so it stops within a few ms (a loaded CI host: 200 ms).
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::milliseconds(200));
  EXPECT_GE(report.max_late_us, 0);
  EXPECT_LE(report.late_over_5ms, report.late_over_1ms);
  const std::string text = describe(report, asked);
  EXPECT_EQ(text.rfind("host wake-ups: latest ", 0), 0u) << text;
  EXPECT_NE(text.find(" over 5 ms"), std::string::npos) << text;
}

}  // namespace
}  // namespace grove::benchmarks
