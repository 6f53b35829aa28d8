// The cuBLAS handle registry: one handle per (device, stream) with a workspace
// allocated once, outside any capture pool, so that a GEMM captured into a
// graph never allocates and replays safely. Handles of destroyed streams are
// recycled (Note [cuBLAS state of destroyed streams] in blas.h). Internal to
// runtime/cuda.
#pragma once

#include <cstddef>

#include "runtime/cuda/cublas_library.h"
#include "runtime/device.h"
#include "runtime/platform.h"

namespace grove::runtime::cuda_detail {

struct StreamHandleState {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The workspace each handle gets: 32 MiB (cuBLAS's ask on Hopper for its
// fastest kernels) unless GROVE_CUBLAS_WORKSPACE_BYTES says otherwise.
size_t workspace_bytes();

// The handle of (device, stream), created on first use (or taken over from a
// destroyed stream). Throws DeviceError for a non-cuda device or the legacy
// default stream. The reference stays valid until the stream is recycled.
const StreamHandleState& stream_handle_state(const CublasLibrary& library, Device device,
                                             StreamHandle stream);

}  // namespace grove::runtime::cuda_detail
