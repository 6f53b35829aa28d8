#include "serving/llm/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compiler/ops/philox.h"
#include "runtime/error.h"

namespace grove::serving::llm {

void SamplingParams::verify() const {
  GROVE_CHECK(std::isfinite(temperature) && temperature >= 0, "sampling temperature ", temperature,
              " must be finite and >= 0 (0 is greedy)");
  GROVE_CHECK(top_k >= 0, "sampling top_k ", top_k, " must be >= 0 (0 keeps every token)");
  GROVE_CHECK(top_p > 0 && top_p <= 1, "sampling top_p ", top_p, " must lie in (0, 1]");
}

int64_t sample_token(const std::vector<float>& logits, const SamplingParams& params,
                     uint64_t draw) {
  GROVE_CHECK(!logits.empty(), "sampling from an empty row of logits");
  if (params.greedy()) {
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  }
  // Note [Sampling draws].
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  size_t keep = order.size();
  if (params.top_k > 0) keep = std::min(keep, static_cast<size_t>(params.top_k));
  std::vector<double> probabilities(keep);
  const double top = logits[static_cast<size_t>(order[0])] / params.temperature;
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    probabilities[i] = std::exp(logits[static_cast<size_t>(order[i])] / params.temperature - top);
    total += probabilities[i];
  }
  if (params.top_p < 1) {
    double cumulative = 0;
    size_t prefix = 0;
    while (prefix < keep) {
      cumulative += probabilities[prefix++] / total;
      if (cumulative >= params.top_p) break;
    }
    keep = prefix;
    total = std::accumulate(probabilities.begin(), probabilities.begin() + keep, 0.0);
  }
  const double u = compiler::ops::philox_uniform(params.seed, draw) * total;
  double cumulative = 0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += probabilities[i];
    if (u < cumulative) return order[i];
  }
  return order[keep - 1];
}

}  // namespace grove::serving::llm
