// The sim Backend: device memory is host memory, but streams, events, stream
// capture, graphs and their failure modes follow CUDA's rules (Note [Sim
// execution model] in sim_backend.cc). The cpu device uses the same backend
// with capture disabled.
#pragma once

#include <memory>

#include "runtime/backend.h"

namespace grove::runtime {

// `device` is sim:N or cpu. GROVE_SIM_MEMORY_BYTES caps the sim device's memory
// (default 16 GiB), so out-of-memory paths can be tested.
std::unique_ptr<Backend> make_sim_backend(Device device);

}  // namespace grove::runtime
