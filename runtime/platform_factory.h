// The platforms grove runs on (cuda; sim, which also serves cpu), as the rest
// of the runtime reaches them: a Platform for a device and the platform's own
// collective library. platform_factory.cc is the one file of the runtime core that
// includes platform headers; the platforms depend on the core, never the
// other way, and nothing above runtime/ sees them.
#pragma once

#include <memory>

#include "runtime/device.h"
#include "runtime/platform.h"

namespace grove::runtime {

namespace collectives {
class CollectiveLibrary;  // runtime/collectives/communicator.h
}  // namespace collectives

// A new Platform for `device` (whose index device_context() checked). Throws
// DeviceError when the device does not exist here (no CUDA device, index past
// the last GPU), saying what to use instead.
std::unique_ptr<Platform> make_platform(Device device);

// The collective library of `device`'s platform (NCCL for cuda, whether or not
// libnccl can be opened), or null where ranks meet at a host rendezvous (sim,
// cpu: collectives::HostCommunicator). Lives until exit.
collectives::CollectiveLibrary* platform_collective_library(Device device);

}  // namespace grove::runtime
