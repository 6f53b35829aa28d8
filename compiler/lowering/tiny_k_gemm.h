// Tiny-K GEMMs of grove's own: a GEMM whose inner dimension is at most
// kMaxTinyK (MLP-Mixer's token-mixing fc1: C [512, 256] = xn^T W1^T + b over
// 16 tokens at batch 1, one cutlass kernel of ~5 us on the H200) as one
// generated kernel with a thread per output (Note [Tiny-K GEMM kernel]).
// Auto times it against the library on a present cuda device (Note [Small-M
// GEMM selection]'s measurement, small_m_gemm.h); GROVE_TINY_K_GEMM=on takes
// it wherever it qualifies (tests), off never.
#pragma once

#include <optional>

#include "compiler/lowering/kernel_assembly.h"
#include "compiler/lowering/small_m_gemm_mode.h"
#include "compiler/lowering/steps.h"
#include "runtime/device.h"

namespace grove::compiler::lowering {

constexpr int64_t kMaxTinyK = 32;
// Note [Exact gelu in the tiny-K GEMM]: the most rows for which the lowering
// makes the exact gelu the kernel's epilogue (then the kernel runs unmeasured).
constexpr int64_t kMaxTinyKExactGeluRows = 2048;

// Whether the tiny-K kernel can compute `launch`: one GEMM (no batch), alpha 1,
// beta 0, 1 <= K <= kMaxTinyK, more than 64 rows (fewer are small-M's), f32 /
// bf16 / f16, an epilogue of none, bias, bias_gelu or bias_relu.
bool tiny_k_gemm_qualifies(const GemmLaunch& launch);

// The kernel that computes a qualifying `launch` over its slots.
AssembledKernel tiny_k_gemm_kernel(const GemmLaunch& launch);

// Whether `launch` runs as the tiny-K kernel (GROVE_TINY_K_GEMM: auto, the
// default, measures on a present cuda device when `can_measure`; on; off).
bool tiny_k_gemm_chosen(const GemmLaunch& launch, runtime::Device device, bool can_measure,
                        std::optional<SmallMGemmMode> requested = std::nullopt);

}  // namespace grove::compiler::lowering
