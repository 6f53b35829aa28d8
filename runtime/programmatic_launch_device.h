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

// Note [Streamed GEMV prefetches columns into L2] (runtime/cuda/small_m_gemv.h):
// the warp's lanes warm L2 with the `columns` W columns a warp of a streamed
// GEMV takes first (column first_column + c * warps, c < columns; `rows` W rows
// each, the second `row_offset` rows below the first), 128-byte lines spread
// over the lanes. Before the kernel's wait: W is read-only.
__device__ __forceinline__ void prefetch_columns_to_l2(const uint16_t* w, int64_t ldw, int64_t k,
                                                       int64_t n, int64_t first_column,
                                                       int64_t warps, int columns, int rows,
                                                       int64_t row_offset, int lane) {
  const int64_t lines = (k * 2 + 127) / 128;
#pragma unroll 1
  for (int c = 0; c < columns; ++c) {
    const int64_t column = first_column + c * warps;
    if (column >= n) break;
#pragma unroll 1
    for (int row = 0; row < rows; ++row) {
      const uint16_t* base = w + (column + row * row_offset) * ldw;
#pragma unroll 1
      for (int64_t line = lane; line < lines; line += 32) prefetch_to_l2(base + line * 64);
    }
  }
}
