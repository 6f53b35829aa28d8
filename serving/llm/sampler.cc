#include "serving/llm/sampler.h"

#include <array>
#include <charconv>
#include <cmath>
#include <string>

#include "compiler/ops/philox.h"
#include "runtime/error.h"
#include "serving/llm/sampling_math.h"

namespace grove::serving::llm {

namespace {

using sampling::chunk_begin;
using sampling::chunk_end;
using sampling::kThreads;

// Sum over chunks in order of the kept mass at `threshold` (Note [Sampling draws]).
double kept_mass(const float* logits, int64_t vocab, uint32_t threshold, float max_logit,
                 double temperature, std::array<double, kThreads>* per_chunk = nullptr) {
  double total = 0;
  for (int t = 0; t < kThreads; ++t) {
    double mass = sampling::chunk_mass(logits, chunk_begin(t, vocab), chunk_end(t, vocab),
                                       threshold, max_logit, temperature);
    if (per_chunk != nullptr) (*per_chunk)[static_cast<size_t>(t)] = mass;
    total = total + mass;
  }
  return total;
}

// `value` in as few digits as read back the same (1.0000001, not 1).
std::string shortest(double value) {
  std::array<char, 32> text{};
  auto [end, error] = std::to_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() ? std::string(text.data(), end) : std::to_string(value);
}

}  // namespace

void SamplingParams::verify() const {
  GROVE_CHECK(std::isfinite(temperature) && temperature >= 0, "sampling temperature ",
              shortest(temperature), " must be finite and >= 0 (0 is greedy)");
  GROVE_CHECK(top_k >= 0, "sampling top_k ", top_k, " must be >= 0 (0 keeps every token)");
  GROVE_CHECK(top_p > 0 && top_p <= 1, "sampling top_p ", shortest(top_p), " must lie in (0, 1]");
}

int64_t sample_token(const std::vector<float>& logits, const SamplingParams& params,
                     uint64_t draw) {
  return sample_token(logits.data(), static_cast<int64_t>(logits.size()), params, draw);
}

int64_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     uint64_t draw) {
  GROVE_CHECK(vocab > 0, "sampling from an empty row of logits");
  if (params.greedy()) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return best;
  }
  float max_logit = logits[0];
  for (int64_t i = 1; i < vocab; ++i) max_logit = logits[i] > max_logit ? logits[i] : max_logit;
  const double temperature = params.temperature;
  uint32_t threshold = 0;
  if (params.top_k > 0 && params.top_k < vocab) {
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t candidate = threshold | (1u << bit);
      int64_t count = 0;
      for (int t = 0; t < kThreads; ++t) {
        count +=
            sampling::chunk_count(logits, chunk_begin(t, vocab), chunk_end(t, vocab), candidate);
      }
      if (count >= params.top_k) threshold = candidate;
    }
  }
  if (params.top_p < 1) {
    const double target =
        params.top_p * kept_mass(logits, vocab, threshold, max_logit, temperature);
    uint32_t cut = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t candidate = cut | (1u << bit);
      const uint32_t effective = candidate > threshold ? candidate : threshold;
      if (kept_mass(logits, vocab, effective, max_logit, temperature) >= target) cut = candidate;
    }
    threshold = cut > threshold ? cut : threshold;
  }
  std::array<double, kThreads> per_chunk{};
  const double total = kept_mass(logits, vocab, threshold, max_logit, temperature, &per_chunk);
  const double u = static_cast<double>(compiler::ops::philox_uniform(params.seed, draw)) * total;
  // The chunk where the running mass passes u, else the last chunk with mass.
  double before = 0;
  int chosen = -1;
  double chosen_before = 0;
  for (int t = 0; t < kThreads; ++t) {
    const double mass = per_chunk[static_cast<size_t>(t)];
    if (mass <= 0) continue;
    chosen = t;
    chosen_before = before;
    before = before + mass;
    if (u < before) break;
  }
  return sampling::chunk_pick(logits, chunk_begin(chosen, vocab), chunk_end(chosen, vocab),
                              threshold, max_logit, temperature, chosen_before, u);
}

}  // namespace grove::serving::llm
