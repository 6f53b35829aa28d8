// The BlasSupport of the sim and cpu platforms: each GEMM is the host GEMM
// (host_gemm.h) launched as a host kernel named "grove_host_gemm", so it runs
// in stream order and is recorded into graphs like any other kernel (Note
// [Host GEMM kernel ABI] in host_gemm.cc). Results are deterministic.
#pragma once

#include <memory>

#include "runtime/blas.h"
#include "runtime/platform.h"

namespace grove::runtime::sim {

// The BLAS of `platform` (a sim or cpu platform, which owns the result and
// outlives it). The kernel is loaded on `platform` at the first GEMM.
std::unique_ptr<BlasSupport> make_host_blas(Platform& platform);

}  // namespace grove::runtime::sim
