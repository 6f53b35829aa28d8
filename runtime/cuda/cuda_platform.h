// The cuda Platform: the CUDA runtime API, linked statically (libcudart_static.a)
// so that binaries start on machines without a driver and report "no CUDA device".
#pragma once

#include <memory>
#include <string>

#include "runtime/platform.h"

namespace grove::runtime {

// The number of usable CUDA devices; 0 when there is no driver or no GPU.
int cuda_device_count();
// Why cuda_device_count() is 0 ("CUDA driver version is insufficient ..."), or "".
std::string cuda_unavailable_reason();
// The calling thread's current CUDA device, -1 where it cannot be read; and
// making `index` current (Note [The caller's current device stays as it
// was], device_context.h: CallerDeviceGuard). Neither throws.
int cuda_current_device() noexcept;
void cuda_make_current(int index) noexcept;
// Platform for cuda:index; the caller has checked that the device exists.
std::unique_ptr<Platform> make_cuda_platform(int index);

}  // namespace grove::runtime
