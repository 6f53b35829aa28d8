// Placeholder until the CUDA runtime backend lands: reports no CUDA device.
#include "runtime/cuda/cuda_backend.h"

#include "runtime/error.h"

namespace grove::runtime {

int cuda_device_count() { return 0; }

std::string cuda_unavailable_reason() { return "grove was built without the cuda backend"; }

std::unique_ptr<Backend> make_cuda_backend(int index) {
  throw DeviceError(str_cat("cuda:", index, " is not available: ", cuda_unavailable_reason()));
}

}  // namespace grove::runtime
