// Device side of the GEMV and GEMM kernels that read 16-byte vectors of a
// 16-bit storage type (small_m_gemv_kernel.cu and
// small_m_tiled_gemm_device.cuh; CUDA sources, never compiled into a C++
// target): one vector of 8 bf16 or f16 values widened to 8 floats, in order.
// The last argument picks the storage type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

__device__ __forceinline__ void unpack(const uint4& v, float (&out)[8], __nv_bfloat16) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ void unpack(const uint4& v, float (&out)[8], __half) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 pair;
    memcpy(&pair, &words[i], sizeof(pair));
    const float2 f = __half22float2(pair);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
