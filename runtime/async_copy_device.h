// Device side of the streamed GEMVs' weight slots (Note [Streamed GEMV],
// runtime/cuda/small_m_gemv.h), for the CUDA sources of grove's runtime
// kernels (*.cu; never compiled into a C++ target): cp.async copies of 16
// bytes from global into shared memory, grouped per thread (compute_80+).
#pragma once

#include <cstdint>

// Starts copying the 16 bytes at `global` to `shared` (both 16-byte aligned).
__device__ __forceinline__ void copy_async_16(void* shared, const void* global) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(address), "l"(global) : "memory");
}

// As copy_async_16, with an L2 eviction `policy` (evict_first_policy) for the bytes read.
__device__ __forceinline__ void copy_async_16(void* shared, const void* global, uint64_t policy) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(address),
               "l"(global), "l"(policy)
               : "memory");
}

// copy_async_16 under `policy` where `evict_first` is set, under the default
// policy otherwise: the weight copies of both streamed GEMVs, whose
// evict-first choice is a launch argument (GROVE_WEIGHTS_EVICT_FIRST).
__device__ __forceinline__ void copy_weights_async_16(void* shared, const void* global,
                                                      bool evict_first, uint64_t policy) {
  if (evict_first) {
    copy_async_16(shared, global, policy);
  } else {
    copy_async_16(shared, global);
  }
}

// An L2 policy under which what a copy reads is evicted first: for weights,
// read once a step, so that L2 keeps what later kernels read again (the
// activations, the KV cache, positions and tables).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Closes this thread's group of copies started since the last commit (possibly none).
__device__ __forceinline__ void commit_copies() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Returns once at most `kPending` of this thread's committed groups are unfinished.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}
