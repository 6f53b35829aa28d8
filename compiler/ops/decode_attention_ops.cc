// decode_attention: one decode step's attention of a LLaMA layer over its KV
// cache (rotary embedding, grouped-query scores against the cache and the
// row's own key, softmax, weighted values) as one runtime kernel, Note
// [Decode attention kernel] (runtime/decode_attention_kernel.h). Operands:
// qkv [rows, (heads + 2 kv_heads) * head_dim] (the fused projection, rewritten
// in place), cos and sin [positions, head_dim] (the rotary tables, read at
// each row's position), key_cache and value_cache [rows,
// kv_heads, positions, head_dim], positions i64 [rows] (-1: padding); the one
// result is operand 0 after the kernel: [attended heads | rotated key | value]
// per row. Attribute heads. Lowered as one OpDef::launch step (in place), so
// it runs in stream order and is captured into graphs. Registered by a static
// initializer when a binary links //compiler/ops:decoder_ops (the decoder
// programs of serving/llm).
#include "compiler/ops/op_helpers.h"
#include "runtime/decode_attention_kernel.h"
#include "runtime/error.h"

namespace grove::compiler::ops {
namespace {

std::vector<TensorType> infer_decode_attention(const OpContext& context) {
  const TensorType& qkv = context.operand(0);
  const TensorType& cos = context.operand(1);
  const TensorType& key_cache = context.operand(3);
  const TensorType& positions = context.operand(5);
  GROVE_CHECK_AS(
      ShapeError,
      qkv.rank() == 2 && cos.rank() == 2 && key_cache.rank() == 4 && positions.rank() == 1,
      context.where(),
      ": expected qkv [rows, width], cos [positions, head_dim], caches [rows, kv_heads, "
      "positions, head_dim] and positions [rows]; got ",
      context.describe_operand(0), ", ", context.describe_operand(1), ", ",
      context.describe_operand(3), ", ", context.describe_operand(5));
  const int64_t rows = qkv.shape[0];
  const int64_t heads = context.attrs.get_int("heads");
  const int64_t kv_heads = key_cache.shape[1];
  const int64_t head_dim = key_cache.shape[3];
  const std::string refusal =
      runtime::decode_attention_refusal(qkv.dtype, heads, kv_heads, head_dim, key_cache.shape[2]);
  GROVE_CHECK_AS(ShapeError, refusal.empty(), context.where(), ": the kernel does not take ",
                 refusal);
  for (size_t i = 1; i <= 4; ++i) {
    GROVE_CHECK_AS(DTypeError, context.operand(i).dtype == qkv.dtype, context.where(), ": ",
                   context.describe_operand(i), " is not of qkv's dtype");
  }
  GROVE_CHECK_AS(DTypeError, positions.dtype == DType::kI64, context.where(), ": ",
                 context.describe_operand(5), " must be i64");
  const Shape table{cos.shape[0], head_dim};
  GROVE_CHECK_AS(ShapeError,
                 qkv.shape[1] == (heads + 2 * kv_heads) * head_dim && cos.shape == table &&
                     context.operand(2).shape == table && key_cache.shape[0] == rows &&
                     context.operand(4).shape == key_cache.shape && positions.shape[0] == rows,
                 context.where(), ": operands do not fit together for ", heads,
                 " heads: ", context.describe_operand(0), ", ", context.describe_operand(1), ", ",
                 context.describe_operand(2), ", ", context.describe_operand(3), ", ",
                 context.describe_operand(4), ", ", context.describe_operand(5));
  return {qkv};
}

void register_decode_attention_op(OpRegistry& registry) {
  OpDef op;
  op.name = "decode_attention";
  op.summary =
      "one decode step's LLaMA attention over a KV cache in one kernel, in place over the fused "
      "qkv projection: operands qkv, cos, sin, key_cache, value_cache, positions; attribute "
      "heads";
  op.min_operands = 6;
  op.max_operands = 6;
  op.attrs = {{"heads", AttrKind::kInt, std::nullopt}};
  op.kind = OpKind::kSpecial;
  op.effects.mutated_operands = {0};  // in place: the result is operand 0 (OpDef::launch)
  op.infer = infer_decode_attention;
  op.launch = [](const OpContext& context, const std::vector<runtime::Tensor>& operands,
                 runtime::StreamHandle stream) {
    runtime::launch_decode_attention(operands[0], operands[1], operands[2], operands[3],
                                     operands[4], operands[5], context.attrs.get_int("heads"),
                                     stream);
  };
  registry.add(std::move(op));
}

const bool kRegistered = [] {
  register_decode_attention_op(OpRegistry::global());
  return true;
}();

}  // namespace
}  // namespace grove::compiler::ops
