// Device side of the streamed GEMVs' bulk weight copies (Note [Streamed GEMV
// bulk copies], runtime/cuda/small_m_gemv.h), for the CUDA sources of grove's
// runtime kernels (*.cu; never compiled into a C++ target): one lane of a warp
// has the copy engine move a chunk of a weight row (cp.async.bulk, compute_90+)
// into the warp's shared memory, and the warp waits on the chunk's mbarrier.
// GROVE_BULK_COPIES is defined where they exist.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GROVE_BULK_COPIES 1

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Makes `barrier` a fresh mbarrier that one arrival (bulk_expect) completes.
__device__ __forceinline__ void bulk_barrier_init(uint64_t* barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(barrier)) : "memory");
}

// Orders this thread's bulk_barrier_inits before the copy engine's use of them.
__device__ __forceinline__ void bulk_barriers_ready() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// The arrival of the barrier's phase, which then completes once `bytes` have landed.
__device__ __forceinline__ void bulk_expect(uint64_t* barrier, uint32_t bytes) {
  asm volatile(
      "{\n .reg .b64 state;\n mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}" ::"r"(
          shared_address(barrier)),
      "r"(bytes)
      : "memory");
}

// Starts copying `bytes` (a multiple of 16, both addresses 16-byte aligned)
// from `global` to `shared`, counted against `barrier`.
__device__ __forceinline__ void bulk_copy(void* shared, const void* global, uint32_t bytes,
                                          uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_address(shared)),
      "l"(global), "r"(bytes), "r"(shared_address(barrier))
      : "memory");
}

// As bulk_copy, with an L2 eviction `policy` (evict_first_policy) for the bytes read.
__device__ __forceinline__ void bulk_copy(void* shared, const void* global, uint32_t bytes,
                                          uint64_t* barrier, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
      "[%1], %2, [%3], %4;" ::"r"(shared_address(shared)),
      "l"(global), "r"(bytes), "r"(shared_address(barrier)), "l"(policy)
      : "memory");
}

// Returns once the barrier's phase of parity `parity` has completed.
__device__ __forceinline__ void bulk_wait(uint64_t* barrier, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred ready;\n mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], %2;\n "
        "selp.u32 %0, 1, 0, ready;\n}"
        : "=r"(done)
        : "r"(shared_address(barrier)), "r"(parity)
        : "memory");
  } while (done == 0);
}

#endif
