// Soak run of the tree manager: a fixed, seeded schedule of iteration variants
// (new generation or not, which of three input tensors: changing addresses,
// keep or drop outputs across calls, an extra root function or not) cycled
// until `replays` graph replays (or `seconds`) have run. Every output is
// checked against a host reference, verify() runs every cycle, and the pool
// figures sampled after each iteration must repeat exactly from one cycle to
// the next once the first cycles are done: the pool neither grows nor leaks.
//
//   SoakReport report = run_soak({.device = runtime::kSimDevice, .replays = 100000});
//   EXPECT_TRUE(report.problem.empty()) << report.problem;
#pragma once

#include <cstdint>
#include <string>

#include "runtime/device.h"

namespace grove::reliability {

struct SoakOptions {
  runtime::Device device = runtime::kSimDevice;
  uint64_t seed = 1;
  int64_t replays = 100000;
  double seconds = 0;    // > 0: also stop after this long
  int64_t elements = 8;  // per tensor: tiny kernels
};

struct PoolFigures {
  size_t reserved_bytes = 0;
  size_t allocated_bytes = 0;
  size_t live_blocks = 0;
  size_t default_allocated_bytes = 0;  // the device's default pool (inputs)
  size_t default_live_blocks = 0;
  friend bool operator==(const PoolFigures&, const PoolFigures&) = default;
  std::string str() const;
};

struct SoakReport {
  int64_t iterations = 0;
  int64_t calls = 0;
  int64_t replays = 0;
  int64_t recordings = 0;
  PoolFigures start;  // after the first cycles
  PoolFigures end;
  double seconds = 0;
  std::string problem;  // empty when everything held
  std::string str() const;
};

SoakReport run_soak(const SoakOptions& options);

}  // namespace grove::reliability
