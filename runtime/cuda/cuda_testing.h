// Test-only hooks into the CUDA runtime for behaviour grove's own code never
// triggers: memory owned by a graph (a captured cudaMallocAsync), which is
// what Note [AutoFreeOnLaunch] (cuda_graphs.cc) is about.
#pragma once

#include <cstddef>

#include "runtime/device.h"
#include "runtime/platform.h"

namespace grove::runtime::cuda_testing {

// cudaMallocAsync on `stream` of a cuda device. During capture this adds a
// memory allocation node: the graph then owns the memory from each launch on.
void* allocate_async(Device device, StreamHandle stream, size_t bytes);
// cudaFree of memory from allocate_async (after the device finished with it).
void free_memory(Device device, void* pointer);
// Whether the cuda platform of `device` runs programmatic kernels as such
// (Note [Programmatic dependent launch]): compute capability 9.0 or newer and
// GROVE_PROGRAMMATIC_LAUNCH not 0.
bool runs_programmatic_launches(Device device);

}  // namespace grove::runtime::cuda_testing
