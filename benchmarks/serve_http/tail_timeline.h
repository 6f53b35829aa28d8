// Where in a run its slowest requests arrived, and whether the host itself
// stalled meanwhile: what serve_http prints under each held-connections
// comparison, so that a p99 that moves between runs can be read as one
// stall (a few milliseconds of arrivals all late together) or as a spread
// of slow answers (Note [Where the tail arrived]).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace grove::benchmarks {

// Note [Where the tail arrived]
// At 32,000 requests/s a p99 is the slowest 1%: over a 700 ms run, 224
// requests. One stall of 10 ms anywhere (the host, the front's loops, the
// worker) delays the 320 requests that arrive in it, so a single stall sets
// the p99 by itself, and p99 then jumps between runs as stalls come and go
// (session 20: 0.5-0.7 ms alone against 9-12 ms held on one host, 4-7 ms
// alone on another). TailTimeline groups the requests at or above the p99 by
// their scheduled arrival in 10 ms bins: one stall puts them in a few
// adjacent bins, a slow front spreads them over the run. Test:
// tail_timeline_test.cc.
struct TailTimeline {
  double threshold_us = 0;           // the p99 the tail is measured from
  size_t count = 0;                  // requests at or above it
  double first_ms = 0, last_ms = 0;  // their earliest and latest arrival, from the run's start
  size_t bins = 0;                   // 10 ms bins holding at least one of them
  double busiest_bin_ms = 0;         // the start of the bin holding most
  double busiest_share = 0;          // the share of the tail in that bin
  double max_us = 0;                 // the slowest request's latency
};

// The tail of requests that arrived at `arrival_ms` (from the run's start)
// and took `latency_us`, as above; zeros when there are none or the two
// vectors differ in length.
TailTimeline tail_timeline(const std::vector<double>& arrival_ms,
                           const std::vector<double>& latency_us, double threshold_us);

// "224 >= 9420 us: arrived 312-340 ms in 3 bins of 10 ms, 71% in 320-330 ms; max 12873 us"
std::string describe(const TailTimeline& tail);

// A thread that sleeps 1 ms at a time and records how late it wakes: a
// late wake-up of several ms means the host did not run a ready thread for
// that long, whatever the server was doing (Note [Where the tail arrived]).
// Its thread is named "stall-probe" (not counted as the front's CPU).
class StallProbe {
 public:
  StallProbe();
  ~StallProbe();
  StallProbe(const StallProbe&) = delete;
  StallProbe& operator=(const StallProbe&) = delete;

  struct Report {
    double max_late_us = 0;                             // the latest wake-up past its 1 ms
    std::chrono::steady_clock::time_point max_late_at;  // when that one was due
    uint64_t late_over_1ms = 0;                         // wake-ups more than 1 ms late
    uint64_t late_over_5ms = 0;
  };
  // Stops the thread; what it saw.
  Report stop();

 private:
  void run();
  std::atomic<bool> stopping_{false};
  Report report_;
  std::thread thread_;
};

// "host wake-ups: latest 812 us late at 233 ms, 0 over 1 ms, 0 over 5 ms",
// times from `origin` (the run's start).
std::string describe(const StallProbe::Report& report,
                     std::chrono::steady_clock::time_point origin);

}  // namespace grove::benchmarks
