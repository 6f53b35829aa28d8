// Device side of programmatic dependent launch, for the CUDA sources of
// grove's runtime kernels (*.cu; never compiled into a C++ target): Note
// [Programmatic dependent launch] (runtime/cuda/cuda_platform.cc). Compiled
// for compute_90 and newer they are PTX's griddepcontrol; for older targets
// (the compute_80 PTX every kernel also ships) they are nothing.
#pragma once

#include <cstdint>

// Returns once the kernels this one may overlap have completed and their
// writes are visible. Before it a kernel touches nothing another kernel writes.
__device__ __forceinline__ void wait_for_earlier_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel start (its own wait still orders its reads). Called
// only after wait_for_earlier_kernels, so that a kernel's part before its
// wait overlaps no kernel but the one right before it.
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Warms L2 with the 16 bytes at `address` (changes no value anyone reads):
// what a kernel may do before its wait with memory it reads later.
// Nothing below compute_90, where no kernel overlaps another.
__device__ __forceinline__ void prefetch_to_l2(const void* address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.global.L2 [%0];" ::"l"(address));
#endif
}
