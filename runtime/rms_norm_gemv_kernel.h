// The RMSNorm GEMV kernel: LLaMA's RMSNorm of one row and the linear layer
// after it (a batch-1 decode step's qkv and gate/up projections) as one kernel grove launches
// itself (PTX on cuda, a host function on sim), behind the compiler's rms_norm_linear and
// rms_norm_swiglu ops (compiler/ops/rms_norm_linear_op.cc).
//
// Note [RMSNorm GEMV]
// A decode step ran each RMSNorm as its own row kernel before the GEMV that
// reads its output, and SwiGLU as another after the gate/up GEMV: at batch 1
// each a kernel and a graph node of about 3 us (ncu, H100) for a few KiB,
// 48 per LLaMA-1B step (the final norm stays apart, below). This kernel is the small-M GEMV (Note
// [Small-M GEMV]) with the norm in front: every block sums the squares of x (a few KiB, from L2)
// while its first batch of weight loads is in flight, and each warp then folds A[k] = bf16(g[k] *
// (x[k] * rstd)) (the rms_norm op's arithmetic and rounding: f32, stored once at bf16) with its row
// of W; gated (LLaMA's MLP), with its gate and up rows, storing silu(gate) * up of the rounded sums
// as the unfused ops do. The squares are summed in another order than the rms_norm op's kernel, so
// rstd may differ in its last bit and a normalized element by one bf16 step: logits agree with the
// unfused ops within rounding, and both decode loop modes run the same kernels (identical tokens).
// One row only: each warp normalizes the elements it multiplies, cheap beside the weight streaming
// for one row, not for several. bf16, K a multiple of 8, operands contiguous and 16-byte aligned;
// the decode program uses it where rms_norm_gemv_refusal is empty (DecoderOptions::fused_norms).
// H100, session 16: the 1B batch-1 step went from 135 kernels and 1375.3 us
// to 85 and 1295.7 us (round 2, with the compact attention kernel and the LM
// head fused too). Every block sums the squares again before it folds, which
// weighs on kernels of many short blocks: the small config's fused LM head
// (8000 blocks, K = 256) took 28.2 us against 13.4 for the norm, the GEMM and
// the cast (ncu, round 3), so the final norm stayed apart; and its step was
// 125.6 us with fused norms against 120.0 apart (round 3). On cuda one row
// of K <= 3072 now runs the streamed kernels (Note [Streamed GEMV],
// runtime/cuda/small_m_gemv.h: a grid of two blocks per SM, each normalizing
// the row once into shared memory); GROVE_FUSED_LM_HEAD=1 fuses the final
// norm into the LM head again (DecoderLayers::normed_lm_head).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/platform.h"
#include "runtime/tensor.h"

namespace grove::runtime {

// Whether the kernel computes this shape: bf16, one row, K a positive
// multiple of 8. Empty when it does; else why not.
std::string rms_norm_gemv_refusal(DType dtype, int64_t rows, int64_t k);

// Enqueues out = linear(rms_norm(x, gain, eps), w) on `stream` of the
// tensors' device: x [rows, K], gain [K], w [N, K], out [rows, N], all
// contiguous bf16, or out f32 (the bf16 result widened, exactly: an LM
// head's logits without a cast kernel; not gated). `gated` (LLaMA's MLP): w [2N, K] holds gate and
// up, and out = silu(gate) * up of the two products. Throws ShapeError / DTypeError for operands
// that do not fit together.
void launch_rms_norm_gemv(const Tensor& x, const Tensor& gain, const Tensor& w, const Tensor& out,
                          double eps, bool gated, StreamHandle stream);

}  // namespace grove::runtime
