// grove's host GEMM for the sim and cpu devices: C = alpha op(A) op(B) + beta C
// over row-major matrices (runtime::GemmArgs, the same arguments cuda's BLAS
// gets through BlasSupport::gemm_row_major), f32 / bf16 / f16 storage with f32
// accumulation. Cache-blocked and deterministic: each element's sum runs in a
// fixed order that depends only on k (never on m, n, batching or timing).
#pragma once

#include "runtime/blas.h"
#include "runtime/platform.h"

namespace grove::runtime::sim {

// Runs the GEMM now on the calling thread. Throws ShapeError / DTypeError for
// bad arguments (negative sizes, leading dimensions too small, other dtypes).
void host_gemm_row_major(const GemmArgs& args);

// The same GEMM as a sim/cpu "kernel", so that it runs in stream order and is
// recorded into graphs like generated kernels (Note [Host GEMM kernel ABI]).
HostKernelFn host_gemm_kernel();
// KernelArgs for host_gemm_kernel() from `args` (pointers included).
KernelArgs host_gemm_kernel_args(const GemmArgs& args);

}  // namespace grove::runtime::sim
