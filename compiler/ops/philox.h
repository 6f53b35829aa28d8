// Philox4x32-10, the counter-based generator behind dropout and seeded
// initializers (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
//
// Note [Dropout randomness]: `dropout(x, seed, offset, p)` keeps element i
// (the row-major linear index into x) iff philox_uniform(seed, offset + i) >= p,
// and scales kept elements by 1 / (1 - p). seed and offset are i64 scalar
// operands read on the device, so a captured graph draws fresh numbers when
// the runtime advances the offset between replays. Every implementation (the
// reference, host and PTX kernels) must use exactly this function.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

// The same functions compile for the device in nvcc-built kernels
// (serving/llm/decode_kernels.cu), which draw exactly the host's numbers.
#ifdef __CUDACC__
#define GROVE_PHILOX_HOST_DEVICE __host__ __device__
#else
#define GROVE_PHILOX_HOST_DEVICE
#endif

namespace grove::compiler::ops {

GROVE_PHILOX_HOST_DEVICE inline std::array<uint32_t, 4> philox4x32_10(uint64_t counter,
                                                                      uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t product0 = static_cast<uint64_t>(kMul0) * c0;
    uint64_t product1 = static_cast<uint64_t>(kMul1) * c2;
    uint32_t next0 = static_cast<uint32_t>(product1 >> 32) ^ c1 ^ k0;
    uint32_t next1 = static_cast<uint32_t>(product1);
    uint32_t next2 = static_cast<uint32_t>(product0 >> 32) ^ c3 ^ k1;
    uint32_t next3 = static_cast<uint32_t>(product0);
    c0 = next0, c1 = next1, c2 = next2, c3 = next3;
    k0 += kWeyl0, k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

// A uniform float in [0, 1) with 24 bits of precision (exactly representable in f32).
GROVE_PHILOX_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t counter) {
  return static_cast<float>(philox4x32_10(counter, seed)[0] >> 8) * (1.0f / 16777216.0f);
}

// A standard normal draw (Box-Muller on the first two words), for initializers.
inline double philox_normal(uint64_t seed, uint64_t counter) {
  std::array<uint32_t, 4> words = philox4x32_10(counter, seed);
  double u1 = (static_cast<double>(words[0]) + 1.0) / 4294967296.0;  // (0, 1]
  double u2 = static_cast<double>(words[1]) / 4294967296.0;          // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// A uniform double in [0, 1) with 32 bits of precision, for initializers.
inline double philox_uniform_double(uint64_t seed, uint64_t counter) {
  return static_cast<double>(philox4x32_10(counter, seed)[0]) / 4294967296.0;
}

}  // namespace grove::compiler::ops
