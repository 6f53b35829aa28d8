#include "benchmarks/serve_http/tail_timeline.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "runtime/error.h"

namespace grove::benchmarks {

namespace {
constexpr double kBinMs = 10;
}  // namespace

TailTimeline tail_timeline(const std::vector<double>& arrival_ms,
                           const std::vector<double>& latency_us, double threshold_us) {
  TailTimeline tail;
  tail.threshold_us = threshold_us;
  if (arrival_ms.size() != latency_us.size()) return tail;
  std::map<int64_t, size_t> per_bin;
  for (size_t i = 0; i < latency_us.size(); ++i) {
    if (latency_us[i] < threshold_us) continue;
    const double at = arrival_ms[i];
    if (tail.count == 0) tail.first_ms = tail.last_ms = at;
    tail.first_ms = std::min(tail.first_ms, at);
    tail.last_ms = std::max(tail.last_ms, at);
    tail.max_us = std::max(tail.max_us, latency_us[i]);
    ++tail.count;
    ++per_bin[static_cast<int64_t>(std::floor(at / kBinMs))];
  }
  tail.bins = per_bin.size();
  size_t most = 0;
  for (const auto& [bin, count] : per_bin) {
    if (count > most) {
      most = count;
      tail.busiest_bin_ms = static_cast<double>(bin) * kBinMs;
    }
  }
  if (tail.count > 0) tail.busiest_share = static_cast<double>(most) / tail.count;
  return tail;
}

std::string describe(const TailTimeline& tail) {
  if (tail.count == 0) return "no tail (no arrival times)";
  return str_cat(tail.count, " >= ", static_cast<int64_t>(tail.threshold_us), " us: arrived ",
                 static_cast<int64_t>(tail.first_ms), "-", static_cast<int64_t>(tail.last_ms),
                 " ms in ", tail.bins, " bins of 10 ms, ",
                 static_cast<int64_t>(std::lround(100 * tail.busiest_share)), "% in ",
                 static_cast<int64_t>(tail.busiest_bin_ms), "-",
                 static_cast<int64_t>(tail.busiest_bin_ms + kBinMs), " ms; max ",
                 static_cast<int64_t>(tail.max_us), " us");
}

StallProbe::StallProbe() {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "stall-probe");
    run();
  });
}

StallProbe::~StallProbe() { stop(); }

void StallProbe::run() {
  using Clock = std::chrono::steady_clock;
  const auto period = std::chrono::milliseconds(1);
  Clock::time_point due = Clock::now() + period;
  while (!stopping_.load(std::memory_order_relaxed)) {
    std::this_thread::sleep_until(due);
    const Clock::time_point woke = Clock::now();
    const double late_us = std::chrono::duration<double, std::micro>(woke - due).count();
    if (late_us > report_.max_late_us) {
      report_.max_late_us = late_us;
      report_.max_late_at = due;
    }
    if (late_us > 1000) ++report_.late_over_1ms;
    if (late_us > 5000) ++report_.late_over_5ms;
    due = woke + period;
  }
}

StallProbe::Report StallProbe::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  return report_;
}

std::string describe(const StallProbe::Report& report,
                     std::chrono::steady_clock::time_point origin) {
  const double at_ms =
      std::chrono::duration<double, std::milli>(report.max_late_at - origin).count();
  return str_cat("host wake-ups: latest ", static_cast<int64_t>(report.max_late_us), " us late at ",
                 static_cast<int64_t>(at_ms), " ms, ", report.late_over_1ms, " over 1 ms, ",
                 report.late_over_5ms, " over 5 ms");
}

}  // namespace grove::benchmarks
