// An up-front estimate of the work `grove run` asks for, so that a run that
// would take hours on `sim` (where the host executes every kernel and GEMM)
// is refused or announced before it starts instead of sitting silent in its
// first phase.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/ir/program.h"

namespace grove::cli {

// Floating-point operations per second assumed for the sim device: grove's
// host GEMM ran mlp16x512 at 6.4 GFLOP/s on 2 shared cores (batch 64 and 1024),
// and a busier machine is slower, so estimates tend to the short side.
constexpr double kSimFlopsPerSecond = 6e9;
// Estimated seconds past which `grove run` on sim warns, and refuses without --force.
constexpr double kWarnSeconds = 60;
constexpr double kRefuseSeconds = 600;

struct WorkEstimate {
  double flops_per_call = 0;  // 2*M*N*K per GEMM plus one per element of every other node
  int64_t calls = 0;          // untimed and timed calls (training: steps)
  double seconds = 0;         // on sim, at kSimFlopsPerSecond

  // "8.8 TFLOP per call x 23 calls: about 5.6 h on sim"
  std::string str() const;
};

// The work of `calls` calls of `program` (a training step counts three
// times its forward: forward, backward, optimizer).
WorkEstimate estimate_work(const compiler::ir::Program& program, int64_t calls, bool training);

// "45 s", "12.5 min", "5.6 h"
std::string format_duration(double seconds);

}  // namespace grove::cli
