#include "cli/common/latency.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"

namespace grove::cli {

double percentile(std::vector<double> samples, double fraction) {
  GROVE_CHECK(!samples.empty(), "percentile: no samples; measure at least one iteration");
  GROVE_CHECK(fraction >= 0 && fraction <= 1, "percentile: fraction must be in [0, 1], found ",
              fraction);
  std::sort(samples.begin(), samples.end());
  auto index = static_cast<size_t>(std::lround(fraction * static_cast<double>(samples.size() - 1)));
  return samples[std::min(index, samples.size() - 1)];
}

LatencySummary summarize(const std::vector<double>& samples_us) {
  GROVE_CHECK(!samples_us.empty(), "summarize: no latency samples; measure at least one iteration");
  LatencySummary summary;
  summary.count = samples_us.size();
  summary.min_us = *std::min_element(samples_us.begin(), samples_us.end());
  summary.max_us = *std::max_element(samples_us.begin(), samples_us.end());
  summary.median_us = percentile(samples_us, 0.5);
  summary.p90_us = percentile(samples_us, 0.9);
  summary.p99_us = percentile(samples_us, 0.99);
  return summary;
}

}  // namespace grove::cli
