// Which of grove's own GEMM kernels runs a GEMM instead of the library, by
// measurement on the device (Note [Small-M GEMM selection] in small_m_gemm.cc):
// the kernel's variants and the library GEMM are timed once per process and
// shape in CUDA graphs on scratch operands (Note [Small-M GEMM timing from
// HBM]), and the winner is kept for the process (Note [One small-M choice per
// shape]) and in the tuning table on disk (gemm_tuning_table.h).
#pragma once

#include "compiler/lowering/small_m_gemm.h"
#include "compiler/lowering/steps.h"
#include "runtime/device.h"

namespace grove::compiler::lowering {

// Which of grove's kernels a measurement times: the small-M kernel, its
// transposed form (Note [Small-N GEMMs as their transpose]) or the tiny-K
// kernel (Note [Tiny-K GEMM kernel], tiny_k_gemm.h: one variant).
enum class GemmKernelForm { kSmallM, kTransposed, kTinyK };

// The fastest of `form`'s variants for `launch` on `device` (a present cuda
// device), or a false variant where the library is faster; with `grove_only`,
// the fastest variant even then (Note [Exact gelu in the small-M GEMM]).
SmallMVariant tuned_gemm_kernel(const GemmLaunch& launch, runtime::Device device, bool grove_only,
                                GemmKernelForm form);

// Whether the tiny-K kernel (tiny_k_gemm.h) of a launch that qualifies for
// it measures faster than the library on `device` (under a key of its own).
bool tiny_k_gemm_measured_faster(const GemmLaunch& launch, runtime::Device device);

// Forgets the process-wide choices (Note [One small-M choice per shape]).
void clear_gemm_kernel_choices();

}  // namespace grove::compiler::lowering
