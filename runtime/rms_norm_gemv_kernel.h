// The RMSNorm GEMV kernel: LLaMA's RMSNorm of a few rows and the linear layer
// after it (a decode step's qkv and gate/up projections and its LM head) as
// one kernel grove launches itself (PTX on cuda, a host function on sim),
// behind the compiler's rms_norm_linear op (compiler/ops/rms_norm_linear_op.cc).
//
// Note [RMSNorm GEMV]
// A decode step ran each RMSNorm as its own row kernel before the GEMV that
// reads its output: at batch 1 a kernel and a graph node of a few
// microseconds for a few KiB, 33 times per LLaMA-1B step, and SwiGLU
// another 16. This kernel is the
// small-M GEMV (Note [Small-M GEMV]) with the norm in front: every block sums
// the squares of the M rows of x (a few KiB, from L2) while its first batch
// of weight loads is in flight, and each warp then folds
// A[m, k] = bf16(g[k] * (x[m, k] * rstd[m])) (the rms_norm op's arithmetic and
// rounding: f32, stored once at bf16) with its row of W (or, gated, with
// its gate and up rows, storing silu(gate) * up of the rounded sums as the
// unfused ops do: the SwiGLU kernel is gone too). The squares are
// summed in another order than the rms_norm op's kernel, so rstd may differ
// in its last bit and a normalized element by one bf16 rounding step: logits
// agree with the unfused ops within rounding (both decode loop modes run the
// same kernels, so their tokens stay identical). bf16, M of 1, 2, 4 or 8, K a
// multiple of 8, operands contiguous and 16-byte aligned; the decode program
// uses it where rms_norm_gemv_refusal is empty. Tests: RmsNormLinear.*
// (tests/serving/llm/rms_norm_linear_test.cc), the decoder tests (bf16), the
// decode-loop and transformers tests on cuda.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/platform.h"
#include "runtime/tensor.h"

namespace grove::runtime {

// Whether the kernel computes this shape: bf16, rows 1, 2, 4 or 8, K a
// positive multiple of 8. Empty when it does; else why not.
std::string rms_norm_gemv_refusal(DType dtype, int64_t rows, int64_t k);

// Enqueues out = linear(rms_norm(x, gain, eps), w) on `stream` of the
// tensors' device: x [rows, K], gain [K], w [N, K], out [rows, N], all
// contiguous bf16. `gated` (LLaMA's MLP): w [2N, K] holds gate and up, and
// out = silu(gate) * up of the two products. Throws ShapeError / DTypeError
// for operands that do not fit together.
void launch_rms_norm_gemv(const Tensor& x, const Tensor& gain, const Tensor& w, const Tensor& out,
                          double eps, bool gated, StreamHandle stream);

}  // namespace grove::runtime
