// Checking CUDA runtime calls: every failure becomes a grove::Error naming the
// call, CUDA's own error name and string, and what grove was doing. Internal to
// runtime/cuda (it includes the CUDA runtime header).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "runtime/error.h"

namespace grove::runtime::cuda_detail {

// True for the errors CUDA reports when stream capture forbids a call or the
// capture was broken by one; grove raises these as CaptureViolation.
bool is_capture_error(cudaError_t error);

// Builds and throws the error for a failed call: CaptureViolation for capture
// errors, OutOfMemoryError for cudaErrorMemoryAllocation, DeviceError otherwise.
// Clears CUDA's last-error state so the failure does not leak into later calls.
[[noreturn]] void throw_cuda_error(cudaError_t error, std::string_view call_text,
                                   const std::string& doing);

// "cudaMemcpyAsync" from "cudaMemcpyAsync(dst, src, n, kind, stream)".
std::string_view call_name(std::string_view call_text);

// The thread's capture mode is set to relaxed for the guard's lifetime, so that
// calls CUDA calls "potentially unsafe" (cudaMalloc, library set-up) do not
// invalidate a capture in progress on this thread. Note [Allocating during
// capture] in cuda_platform.cc says when that is sound.
class RelaxedCaptureModeGuard {
 public:
  RelaxedCaptureModeGuard();
  ~RelaxedCaptureModeGuard();
  RelaxedCaptureModeGuard(const RelaxedCaptureModeGuard&) = delete;
  RelaxedCaptureModeGuard& operator=(const RelaxedCaptureModeGuard&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace grove::runtime::cuda_detail

// GROVE_CUDA_CHECK(cudaCall(...), "what grove was doing", ...) throws on failure.
#define GROVE_CUDA_CHECK(call, ...)                                                   \
  do {                                                                                \
    const cudaError_t grove_cuda_status_ = (call);                                    \
    if (grove_cuda_status_ != cudaSuccess) [[unlikely]] {                             \
      ::grove::runtime::cuda_detail::throw_cuda_error(grove_cuda_status_, #call,      \
                                                      ::grove::str_cat(__VA_ARGS__)); \
    }                                                                                 \
  } while (false)
