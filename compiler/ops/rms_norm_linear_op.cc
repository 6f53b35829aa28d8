// rms_norm_linear: linear(rms_norm(x, gain, eps), w), a LLaMA block's norm
// and the projection after it, as one kernel; rms_norm_swiglu: the same over
// the fused gate/up weight with SwiGLU's silu(gate) * up (Note [RMSNorm GEMV],
// runtime/rms_norm_gemv_kernel.h): no rms_norm kernel and no normalized
// activations in memory. Operands: x [rows, K], gain [K] (the norm's
// weight), w [N, K] (a linear layer's weight; [2N, K] gate and up for
// rms_norm_swiglu), bf16, one row (rms_norm_gemv_refusal); the result [rows, N] is fresh (a launch
// hook that mutates no operand: Note [Launch hooks with fresh results],
// compiler/lowering/scheduler.cc). Registered by a static initializer when a
// binary links //compiler/ops:decoder_ops (the decoder programs of serving/llm).
#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"
#include "runtime/rms_norm_gemv_kernel.h"
#include "runtime/strided_copy_kernel.h"

namespace grove::compiler::ops {
namespace {

// rms_norm_linear (gated false) and rms_norm_swiglu (gated true: w holds
// gate and up [2N, K], the result is silu(gate) * up [rows, N]).
void register_op(OpRegistry& registry, const std::string& name, bool gated) {
  OpDef op;
  op.name = name;
  op.summary =
      gated ? "silu(g) * u of [g; u] = linear(rms_norm(x, gain, eps), w) as one kernel: operands "
              "x [rows, K], gain [K], w [2N, K] (bf16, one row)"
            : "linear(rms_norm(x, gain, eps), w) as one kernel: operands x [rows, K], gain [K], "
              "w [N, K] (bf16, one row)";
  op.min_operands = op.max_operands = 3;
  // out_dtype "f32" (rms_norm_linear): the bf16 result widened, as a cast after it would.
  op.attrs = {{"eps", AttrKind::kFloat, 1e-6}, {"out_dtype", AttrKind::kString, std::string("")}};
  op.kind = OpKind::kSpecial;
  op.infer = [gated](const OpContext& context) {
    const TensorType& x = context.operand(0);
    const TensorType& gain = context.operand(1);
    const TensorType& w = context.operand(2);
    GROVE_CHECK_AS(ShapeError,
                   x.rank() == 2 && gain.rank() == 1 && w.rank() == 2 &&
                       gain.shape[0] == x.shape[1] && w.shape[1] == x.shape[1] &&
                       (!gated || w.shape[0] % 2 == 0),
                   context.where(), ": expected x [rows, K], gain [K] and w [", gated ? "2N" : "N",
                   ", K]; got ", context.describe_operand(0), ", ", context.describe_operand(1),
                   ", ", context.describe_operand(2));
    for (size_t i = 1; i < 3; ++i) require_same_dtype(context, 0, i);
    const std::string refusal = runtime::rms_norm_gemv_refusal(x.dtype, x.shape[0], x.shape[1]);
    GROVE_CHECK_AS(ShapeError, refusal.empty(), context.where(), ": the kernel does not take ",
                   refusal, "; use rms_norm and linear");
    GROVE_CHECK(context.attrs.get_float("eps") > 0, context.where(),
                ": attribute 'eps' must be > 0");
    TensorType out = x;
    out.shape = {x.shape[0], gated ? w.shape[0] / 2 : w.shape[0]};
    const std::string& out_dtype = context.attrs.get_string("out_dtype");
    GROVE_CHECK(out_dtype.empty() || (out_dtype == "f32" && !gated), context.where(),
                ": attribute 'out_dtype' must be empty (x's dtype)", gated ? "" : " or \"f32\"",
                "; got '", out_dtype, "'");
    if (out_dtype == "f32") out.dtype = DType::kF32;
    return std::vector<TensorType>{out};
  };
  op.launch = [gated](const OpContext& context, const std::vector<runtime::Tensor>& operands,
                      runtime::StreamHandle stream) {
    // operands: x, gain, w, then the fresh result.
    GROVE_CHECK(operands.size() == 4, context.where(), ": expected 3 operands and the result; got ",
                operands.size(), " tensors (a grove bug)");
    const runtime::Tensor x =
        operands[0].is_contiguous() ? operands[0] : runtime::contiguous_copy(operands[0]);
    runtime::launch_rms_norm_gemv(x, operands[1], operands[2], operands[3],
                                  context.attrs.get_float("eps"), gated, stream);
  };
  registry.add(std::move(op));
}

const bool kRegistered = [] {
  register_op(OpRegistry::global(), "rms_norm_linear", false);
  register_op(OpRegistry::global(), "rms_norm_swiglu", true);
  return true;
}();

}  // namespace
}  // namespace grove::compiler::ops
