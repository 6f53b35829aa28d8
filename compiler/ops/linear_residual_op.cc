// linear_residual: x + h W^T, a LLaMA layer's residual add and the projection
// before it, as one GEMM that accumulates into x in place (beta 1: cuBLAS, or
// on cuda at decode sizes grove's GEMV, Note [Small-M GEMV]; the host GEMM on
// sim): the add kernel after each output and down projection is gone.
// Operands: x [rows, N] (written in place; the result is x after it), h
// [rows, K] (rows may be strided, its last dim contiguous), w [N, K] (a
// linear layer's weight), one floating dtype. The sum is rounded once, where
// add(x, linear(h, w)) rounded the product first. Lowered as one
// OpDef::launch step. Registered by a static initializer when a binary links
// //compiler/ops:decoder_ops (the decoder programs of serving/llm).
#include "compiler/ops/op_helpers.h"
#include "runtime/blas.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/strided_copy_kernel.h"

namespace grove::compiler::ops {
namespace {

void register_linear_residual(OpRegistry& registry) {
  OpDef op;
  op.name = "linear_residual";
  op.summary = "x + h @ w^T in place over x (one GEMM with beta 1): operands x, h, w";
  op.min_operands = op.max_operands = 3;
  op.kind = OpKind::kSpecial;
  op.effects.mutated_operands = {0};  // in place: the result is operand 0 (OpDef::launch)
  op.infer = [](const OpContext& context) {
    for (size_t i = 0; i < 3; ++i) {
      require_floating(context, i);
      require_same_dtype(context, 0, i);
    }
    const TensorType& x = context.operand(0);
    const TensorType& h = context.operand(1);
    const TensorType& w = context.operand(2);
    GROVE_CHECK_AS(ShapeError,
                   x.rank() == 2 && h.rank() == 2 && w.rank() == 2 && h.shape[0] == x.shape[0] &&
                       w.shape[0] == x.shape[1] && w.shape[1] == h.shape[1],
                   context.where(), ": expected x [rows, N], h [rows, K] and w [N, K]; got ",
                   context.describe_operand(0), ", ", context.describe_operand(1), ", ",
                   context.describe_operand(2));
    return std::vector<TensorType>{x};
  };
  op.launch = [](const OpContext& context, const std::vector<runtime::Tensor>& operands,
                 runtime::StreamHandle stream) {
    const runtime::Tensor& x = operands[0];
    runtime::Tensor h = operands[1];
    const runtime::Tensor& w = operands[2];
    GROVE_CHECK_AS(ShapeError, x.is_contiguous() && w.is_contiguous(), context.where(), ": x ",
                   x.str(), " and w ", w.str(), " must be contiguous");
    if (h.strides()[1] != 1 || h.strides()[0] < h.size(1)) h = runtime::contiguous_copy(h);
    runtime::GemmArgs args;
    args.dtype = x.dtype();
    args.m = x.size(0);
    args.n = x.size(1);
    args.k = h.size(1);
    args.a = h.data_ptr();
    args.lda = h.size(0) > 1 ? h.strides()[0] : h.size(1);
    args.b = w.data_ptr();
    args.ldb = w.size(1);
    args.transpose_b = true;
    args.c = x.data_ptr();
    args.ldc = x.size(1);
    args.beta = 1.0f;
    if (args.m == 0 || args.n == 0) return;
    runtime::device_context(x.device()).platform().blas().gemm_row_major(stream, args);
  };
  registry.add(std::move(op));
}

const bool kRegistered = [] {
  register_linear_residual(OpRegistry::global());
  return true;
}();

}  // namespace
}  // namespace grove::compiler::ops
