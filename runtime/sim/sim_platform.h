// The sim Platform: device memory is host memory, but streams, events, stream
// capture, graphs and their failure modes follow CUDA's rules (Note [Sim
// execution model] in sim_platform.cc). Streams run in order on the calling
// thread, or each on a worker of its own (Note [Asynchronous sim streams]),
// and a checker can report stream-ordering hazards (Note [Stream hazards] in
// hazard_checker.cc). The cpu device uses the same platform, synchronous and
// without capture or checker.
#pragma once

#include <memory>
#include <vector>

#include "runtime/platform.h"
#include "runtime/sim/hazard_checker.h"

namespace grove::runtime {

struct SimOptions {
  // Each stream's work runs on a worker thread of its own (GROVE_SIM_ASYNC=1).
  bool async = false;
  // What the stream hazard checker does (GROVE_SIM_CHECK=off|record|throw).
  sim::HazardMode hazards = sim::HazardMode::kOff;

  // GROVE_SIM_ASYNC and GROVE_SIM_CHECK; unset means the defaults above.
  static SimOptions from_environment();
};

// `device` is sim:N or cpu. GROVE_SIM_MEMORY_BYTES caps the sim device's memory
// (default 16 GiB), so out-of-memory paths can be tested. The first form takes
// its options from the environment.
std::unique_ptr<Platform> make_sim_platform(Device device);
std::unique_ptr<Platform> make_sim_platform(Device device, SimOptions options);

// The hazards `platform`'s checker recorded (HazardMode::kRecord), oldest
// first; empty for a platform that is not sim or checks nothing.
std::vector<sim::SimHazard> sim_hazards(Platform& platform);
void clear_sim_hazards(Platform& platform);
// Whether `platform` is a sim platform whose streams run asynchronously.
bool sim_is_async(Platform& platform);

}  // namespace grove::runtime
