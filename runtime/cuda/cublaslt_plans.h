// GEMMs with epilogues through cuBLASLt: the plan cache (Note [GEMM
// epilogues]: one descriptor, layouts and algorithm per shape, epilogue and
// pointer alignment, so eager calls and captures run the same kernel) and the
// probe that tells the lowering which epilogues the installed cuBLASLt runs
// (gemm_row_major_epilogue_available in blas.h). Internal to runtime/cuda.
#pragma once

#include <cstdint>

#include "runtime/blas.h"
#include "runtime/cuda/cublas_library.h"
#include "runtime/device.h"
#include "runtime/platform.h"

namespace grove::runtime::cuda_detail {

// Enqueues the column-major GEMM `g` (C non-empty; an epilogue, or none when
// its algorithm is searched: Note [GEMM algorithms by measurement]) as one
// cublasLtMatmul on `stream`, with the stream's cuBLAS workspace. Checks what
// the epilogue needs (batch 1, its pointers, alpha/beta, ld_aux) and throws
// ShapeError / DeviceError naming `doing` otherwise.
void gemm_with_epilogue(const CublasLibrary& library, Device device, StreamHandle stream,
                        const GemmArgs& g, const GemmWhat& doing);

// gemm_row_major_epilogue_available (blas.h): probes cuBLASLt once per
// (device, epilogue, dtype, sizes) and caches the answer; never throws.
bool row_major_epilogue_available(Device device, GemmEpilogue epilogue, DType dtype, int64_t m,
                                  int64_t n, int64_t k);

}  // namespace grove::runtime::cuda_detail
