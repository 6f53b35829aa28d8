// grove's host GEMM for the sim and cpu devices: C = alpha op(A) op(B) + beta C
// over row-major matrices (runtime::GemmArgs, the same arguments cuBLAS gets
// through runtime::gemm_row_major), f32 / bf16 / f16 storage with f32
// accumulation. Cache-blocked and deterministic: each element's sum runs in a
// fixed order that depends only on k (never on m, n, batching or timing).
#pragma once

#include "runtime/backend.h"
#include "runtime/cuda/blas.h"

namespace grove::compiler::host_blas {

// Runs the GEMM now on the calling thread. Throws ShapeError / DTypeError for
// bad arguments (negative sizes, leading dimensions too small, other dtypes).
void gemm_row_major(const runtime::GemmArgs& args);

// The same GEMM as a sim/cpu "kernel", so that it runs in stream order and is
// recorded into graphs like generated kernels (Note [Host GEMM kernel ABI]).
runtime::HostKernelFn host_gemm_kernel();
// KernelArgs for host_gemm_kernel() from `args` (pointers included).
runtime::KernelArgs host_gemm_kernel_args(const runtime::GemmArgs& args);

}  // namespace grove::compiler::host_blas
