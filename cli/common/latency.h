// Latency samples and their summary: what grove run and every benchmark report
// for a repeated measurement (median, p90, and the spread between them).
//
//   std::vector<double> samples;
//   for (...) { Stopwatch watch; work(); samples.push_back(watch.elapsed_us()); }
//   LatencySummary summary = summarize(samples);  // summary.median_us, summary.p90_us
#pragma once

#include <chrono>
#include <vector>

namespace grove::cli {

// The value at `fraction` (0..1) of the sorted samples, nearest rank.
// Throws grove::Error for an empty sample or a fraction outside [0, 1].
double percentile(std::vector<double> samples, double fraction);

struct LatencySummary {
  size_t count = 0;
  double min_us = 0;
  double median_us = 0;
  double p90_us = 0;
  double p99_us = 0;
  double max_us = 0;
  // (p90 - median) / median: how far the slow tail sits above the typical call.
  double spread() const { return median_us > 0 ? (p90_us - median_us) / median_us : 0; }
};

// Throws grove::Error for an empty sample.
LatencySummary summarize(const std::vector<double>& samples_us);

// Wall time since construction (steady clock).
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double elapsed_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_)
        .count();
  }
  double elapsed_s() const { return elapsed_us() * 1e-6; }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace grove::cli
