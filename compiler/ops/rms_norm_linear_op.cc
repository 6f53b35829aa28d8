// rms_norm_linear: linear(rms_norm(x, gain, eps), w), a LLaMA block's norm
// and the projection after it, as one kernel (Note [RMSNorm GEMV],
// runtime/rms_norm_gemv_kernel.h): no rms_norm kernel and no normalized
// activations in memory. Operands: x [rows, K], gain [K] (the norm's
// weight), w [N, K] (a linear layer's weight), bf16, rows 1, 2, 4 or 8
// (rms_norm_gemv_refusal); the result [rows, N] is fresh (a launch hook that
// mutates no operand: Note [Launch hooks with fresh results],
// compiler/lowering/scheduler.cc). Registered by a static initializer when a
// binary links //compiler/ops:decoder_ops (the decoder programs of serving/llm).
#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"
#include "runtime/rms_norm_gemv_kernel.h"
#include "runtime/strided_copy_kernel.h"

namespace grove::compiler::ops {
namespace {

void register_rms_norm_linear(OpRegistry& registry) {
  OpDef op;
  op.name = "rms_norm_linear";
  op.summary =
      "linear(rms_norm(x, gain, eps), w) as one kernel: operands x [rows, K], gain [K], w [N, K] "
      "(bf16, rows 1, 2, 4 or 8)";
  op.min_operands = op.max_operands = 3;
  op.attrs = {{"eps", AttrKind::kFloat, 1e-6}};
  op.kind = OpKind::kSpecial;
  op.infer = [](const OpContext& context) {
    const TensorType& x = context.operand(0);
    const TensorType& gain = context.operand(1);
    const TensorType& w = context.operand(2);
    GROVE_CHECK_AS(ShapeError,
                   x.rank() == 2 && gain.rank() == 1 && w.rank() == 2 &&
                       gain.shape[0] == x.shape[1] && w.shape[1] == x.shape[1],
                   context.where(), ": expected x [rows, K], gain [K] and w [N, K]; got ",
                   context.describe_operand(0), ", ", context.describe_operand(1), ", ",
                   context.describe_operand(2));
    for (size_t i = 1; i < 3; ++i) require_same_dtype(context, 0, i);
    const std::string refusal = runtime::rms_norm_gemv_refusal(x.dtype, x.shape[0], x.shape[1]);
    GROVE_CHECK_AS(ShapeError, refusal.empty(), context.where(), ": the kernel does not take ",
                   refusal, "; use rms_norm and linear");
    GROVE_CHECK(context.attrs.get_float("eps") > 0, context.where(),
                ": attribute 'eps' must be > 0");
    TensorType out = x;
    out.shape = {x.shape[0], w.shape[0]};
    return std::vector<TensorType>{out};
  };
  op.launch = [](const OpContext& context, const std::vector<runtime::Tensor>& operands,
                 runtime::StreamHandle stream) {
    // operands: x, gain, w, then the fresh result.
    GROVE_CHECK(operands.size() == 4, context.where(), ": expected 3 operands and the result; got ",
                operands.size(), " tensors (a grove bug)");
    const runtime::Tensor x =
        operands[0].is_contiguous() ? operands[0] : runtime::contiguous_copy(operands[0]);
    runtime::launch_rms_norm_gemv(x, operands[1], operands[2], operands[3],
                                  context.attrs.get_float("eps"), stream);
  };
  registry.add(std::move(op));
}

const bool kRegistered = [] {
  register_rms_norm_linear(OpRegistry::global());
  return true;
}();

}  // namespace
}  // namespace grove::compiler::ops
