#include "runtime/platform_factory.h"

#include "runtime/collectives/communicator.h"
#include "runtime/cuda/cuda_platform.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/sim/sim_platform.h"

namespace grove::runtime {

std::unique_ptr<Platform> make_platform(Device device) {
  switch (device.type) {
    case DeviceType::kCpu:
    case DeviceType::kSim:
      return make_sim_platform(device);
    case DeviceType::kCuda: {
      int count = cuda_device_count();
      GROVE_CHECK_AS(DeviceError, count > 0, "device ", device.str(),
                     " is not available: no CUDA device (", cuda_unavailable_reason(),
                     "). Use --device sim to run on the host emulation");
      GROVE_CHECK_AS(DeviceError, device.index < count, "device ", device.str(),
                     " is not available: this machine has ", count, " CUDA device(s)");
      return make_cuda_platform(device.index);
    }
  }
  throw DeviceError("unknown device type");
}

collectives::CollectiveLibrary* platform_collective_library(Device device) {
  return device.is_cuda() ? &collectives::nccl_collective_library() : nullptr;
}

// Note [The caller's current device stays as it was] (device_context.h).
CallerDeviceGuard::CallerDeviceGuard() {
  if (cuda_device_count() > 0) device_ = cuda_current_device();
}

CallerDeviceGuard::~CallerDeviceGuard() {
  if (device_ >= 0 && cuda_current_device() != device_) cuda_make_current(device_);
}

}  // namespace grove::runtime
