// The arithmetic of token sampling that the host reference (sampler.cc) and
// the device kernel (decode_kernels.cu) share, so both pick the same token
// bit for bit (Note [Sampling draws], sampler.h). Every function uses only
// IEEE-754 adds, multiplies, divides and exact conversions; both sides are
// compiled without FMA contraction (-ffp-contract=off, nvcc --fmad=false).
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define GROVE_SAMPLING_HOST_DEVICE __host__ __device__
#else
#define GROVE_SAMPLING_HOST_DEVICE
#endif

namespace grove::serving::llm::sampling {

// Threads of one row's sampling; row elements are split into this many
// contiguous chunks, and every sum runs over a chunk in index order, then
// over the chunks' sums in chunk order.
inline constexpr int kThreads = 256;

GROVE_SAMPLING_HOST_DEVICE inline int64_t chunk_size(int64_t vocab) {
  return (vocab + kThreads - 1) / kThreads;
}
GROVE_SAMPLING_HOST_DEVICE inline int64_t chunk_begin(int thread, int64_t vocab) {
  int64_t begin = thread * chunk_size(vocab);
  return begin < vocab ? begin : vocab;
}
GROVE_SAMPLING_HOST_DEVICE inline int64_t chunk_end(int thread, int64_t vocab) {
  return chunk_begin(thread + 1, vocab);
}

// A key whose unsigned order is the float order of `logit` (-0 below +0).
GROVE_SAMPLING_HOST_DEVICE inline uint32_t order_key(float logit) {
  uint32_t bits;
  std::memcpy(&bits, &logit, sizeof(bits));
  return (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
}

// exp(x) for x <= 0 from adds and multiplies only: x = k ln2 + r with
// |r| <= ln2/2, a degree-13 Taylor polynomial for e^r, then the exponent
// bits for 2^k. Below -700 it is 0. Relative error under 1e-15.
GROVE_SAMPLING_HOST_DEVICE inline double exp_nonpositive(double x) {
  if (!(x > -700.0)) return 0.0;
  const double kLog2e = 1.4426950408889634;
  const double kLn2High = 0.693147180369123816490;  // few bits: k * kLn2High is exact
  const double kLn2Low = 1.90821492927058770002e-10;
  double scaled = x * kLog2e - 0.5;
  int64_t k = static_cast<int64_t>(scaled);  // toward zero; scaled < 0
  if (static_cast<double>(k) > scaled) k -= 1;
  k += 1;  // round(x * log2e) for x <= 0
  const double kd = static_cast<double>(k);
  const double r = (x - kd * kLn2High) - kd * kLn2Low;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const uint64_t scale_bits = static_cast<uint64_t>(k + 1023) << 52;  // k >= -1010: normal
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  return p * scale;
}

// The unnormalized probability of a logit: exp((logit - max_logit) / temperature).
GROVE_SAMPLING_HOST_DEVICE inline double weight(float logit, float max_logit, double temperature) {
  return exp_nonpositive((static_cast<double>(logit) - static_cast<double>(max_logit)) /
                         temperature);
}

// Sum of weight() over a chunk's elements whose key is >= threshold, in index order.
GROVE_SAMPLING_HOST_DEVICE inline double chunk_mass(const float* logits, int64_t begin, int64_t end,
                                                    uint32_t threshold, float max_logit,
                                                    double temperature) {
  double sum = 0;
  for (int64_t i = begin; i < end; ++i) {
    if (order_key(logits[i]) >= threshold) sum = sum + weight(logits[i], max_logit, temperature);
  }
  return sum;
}

GROVE_SAMPLING_HOST_DEVICE inline int64_t chunk_count(const float* logits, int64_t begin,
                                                      int64_t end, uint32_t threshold) {
  int64_t count = 0;
  for (int64_t i = begin; i < end; ++i) count += order_key(logits[i]) >= threshold ? 1 : 0;
  return count;
}

// The inverse CDF inside one chunk: the first kept element whose running
// mass (from `before`) exceeds u, else the chunk's last kept element.
GROVE_SAMPLING_HOST_DEVICE inline int64_t chunk_pick(const float* logits, int64_t begin,
                                                     int64_t end, uint32_t threshold,
                                                     float max_logit, double temperature,
                                                     double before, double u) {
  double running = before;
  int64_t last = -1;
  for (int64_t i = begin; i < end; ++i) {
    if (order_key(logits[i]) < threshold) continue;
    running = running + weight(logits[i], max_logit, temperature);
    last = i;
    if (u < running) return i;
  }
  return last;
}

}  // namespace grove::serving::llm::sampling
