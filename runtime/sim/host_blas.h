// The BlasSupport of the sim and cpu backends: each GEMM is the host GEMM
// (host_gemm.h) launched as a host kernel named "grove_host_gemm", so it runs
// in stream order and is recorded into graphs like any other kernel (Note
// [Host GEMM kernel ABI] in host_gemm.cc). Results are deterministic.
#pragma once

#include <memory>

#include "runtime/backend.h"
#include "runtime/blas.h"

namespace grove::runtime::sim {

// The BLAS of `backend` (a sim or cpu backend, which owns the result and
// outlives it). The kernel is loaded on `backend` at the first GEMM.
std::unique_ptr<BlasSupport> make_host_blas(Backend& backend);

}  // namespace grove::runtime::sim
