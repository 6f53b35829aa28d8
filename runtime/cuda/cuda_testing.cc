#include "runtime/cuda/cuda_testing.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string_view>

#include "runtime/cuda/cuda_error.h"

namespace grove::runtime::cuda_testing {

void* allocate_async(Device device, StreamHandle stream, size_t bytes) {
  GROVE_CHECK_AS(DeviceError, device.is_cuda(), "allocate_async needs a cuda device, got ",
                 device.str());
  GROVE_CUDA_CHECK(cudaSetDevice(device.index), "selecting ", device.str());
  void* pointer = nullptr;
  GROVE_CUDA_CHECK(cudaMallocAsync(&pointer, bytes, static_cast<cudaStream_t>(stream.impl)),
                   "allocating ", bytes, " stream-ordered bytes on ", device.str());
  return pointer;
}

void free_memory(Device device, void* pointer) {
  GROVE_CUDA_CHECK(cudaSetDevice(device.index), "selecting ", device.str());
  GROVE_CUDA_CHECK(cudaFree(pointer), "freeing graph-owned memory on ", device.str());
}

bool runs_programmatic_launches(Device device) {
  int major = 0;
  GROVE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index),
                   "reading the compute capability of ", device.str());
  const char* setting = std::getenv("GROVE_PROGRAMMATIC_LAUNCH");
  return major >= 9 && !(setting != nullptr && std::string_view(setting) == "0");
}

}  // namespace grove::runtime::cuda_testing
