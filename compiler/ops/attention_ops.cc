// attention: softmax(query key^T * scale + mask) value in one op, lowered to
// the runtime's sequence attention kernel where it takes the operands (Note
// [Attention on the sequence attention kernel], compiler/lowering/scheduler.cc;
// this op's launch hook), else to one generated kernel (Note [Fused attention
// kernel] in compiler/lowering/attention_kernel.h).
//
// Note [Fused attention op]: query [..., Hq, Tq, D], key [..., Hk, Tk, D],
// value [..., Hk, Tk, Dv] with equal leading dims and Hq a multiple of Hk
// (grouped-query attention: query head h reads key head h / (Hq / Hk)); an
// optional mask broadcastable to [..., Hq, Tq, Tk], bool (true: attend) or
// query's float dtype (added to the scores); `causal` 1 masks key j > query i
// (the top-left aligned triangle of scaled_dot_product_attention's is_causal).
// A row whose scores are all -inf gives zeros, as PyTorch's math attention
// (its safe softmax) does. The result is [..., Hq, Tq, Dv] in query's dtype.
// No gradient: the door writes attention out before it trains
// (training_steps.write_out_attention). Tests: AttentionKernel.* (tests/compiler/
// lowering/attention_kernel_test.cc), importer_ops_test's attention cases.
#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"
#include "runtime/sequence_attention_kernel.h"

namespace grove::compiler::ops {

void register_attention_ops(OpRegistry& registry) {
  OpDef attention;
  attention.name = "attention";
  attention.summary =
      "softmax(query key^T * scale + mask) value (heads [..., H, T, D]; grouped-query keys; "
      "bool or additive mask; causal)";
  attention.min_operands = 3;
  attention.max_operands = 4;
  attention.attrs = {{"scale", AttrKind::kFloat, std::nullopt},
                     {"causal", AttrKind::kInt, int64_t{0}}};
  attention.kind = OpKind::kAttention;
  attention.infer = [](const OpContext& context) {
    for (size_t operand = 0; operand < 3; ++operand) {
      require_floating(context, operand);
      require_rank_at_least(context, operand, 3);
    }
    require_same_dtype(context, 0, 1);
    require_same_dtype(context, 0, 2);
    const Shape& q = context.operand(0).shape;
    const Shape& k = context.operand(1).shape;
    const Shape& v = context.operand(2).shape;
    const size_t rank = q.size();
    GROVE_CHECK_AS(ShapeError, k.size() == rank && v.size() == rank, context.where(),
                   ": query, key and value must have one rank; got ", context.describe_operand(0),
                   ", ", context.describe_operand(1), ", ", context.describe_operand(2));
    for (size_t d = 0; d + 3 < rank; ++d) {
      GROVE_CHECK_AS(ShapeError, k[d] == q[d] && v[d] == q[d], context.where(), ": dim ", d,
                     " of key and value must equal query's (", q[d], "); got ",
                     context.describe_operand(1), ", ", context.describe_operand(2));
    }
    const int64_t query_heads = q[rank - 3], key_heads = k[rank - 3];
    GROVE_CHECK_AS(
        ShapeError, key_heads >= 1 && v[rank - 3] == key_heads && query_heads % key_heads == 0,
        context.where(), ": key and value need one head count that divides query's (", query_heads,
        "); got ", context.describe_operand(1), ", ", context.describe_operand(2));
    GROVE_CHECK_AS(ShapeError, k[rank - 1] == q[rank - 1] && v[rank - 2] == k[rank - 2],
                   context.where(), ": key must be [..., Tk, ", q[rank - 1],
                   "] and value [..., Tk, Dv]; got ", context.describe_operand(1), ", ",
                   context.describe_operand(2));
    GROVE_CHECK_AS(ShapeError, q[rank - 1] >= 1 && v[rank - 1] >= 1, context.where(),
                   ": query and value need at least one feature; got ", context.describe_operand(0),
                   ", ", context.describe_operand(2));
    Shape scores = q;
    scores.back() = k[rank - 2];
    if (context.operand_types.size() == 4) {
      const TensorType& mask = context.operand(3);
      GROVE_CHECK_AS(DTypeError,
                     mask.dtype == DType::kBool || mask.dtype == context.operand(0).dtype,
                     context.where(), ": the mask must be bool or query's dtype; got ",
                     context.describe_operand(3));
      GROVE_CHECK_AS(ShapeError, broadcasts_to(mask.shape, scores), context.where(),
                     ": the mask must broadcast to the scores' shape ", runtime::shape_str(scores),
                     "; got ", context.describe_operand(3));
    }
    const int64_t causal = context.attrs.get_int("causal");
    GROVE_CHECK(causal == 0 || causal == 1, context.where(),
                ": attribute 'causal' must be 0 or 1; got ", causal);
    Shape result_shape = q;
    result_shape.back() = v[rank - 1];
    return std::vector<TensorType>{with_shape(context.operand(0), result_shape)};
  };
  // Operands query, key, value (and the mask), then the fresh result (Note
  // [Launch hooks with fresh results]), each with its own strides.
  attention.launch = [](const OpContext& context, const std::vector<runtime::Tensor>& operands,
                        runtime::StreamHandle stream) {
    const bool masked = operands.size() == 5;
    runtime::launch_sequence_attention(operands[0], operands[1], operands[2],
                                       masked ? operands[3] : runtime::Tensor(), operands.back(),
                                       static_cast<float>(context.attrs.get_float("scale")),
                                       context.attrs.get_int("causal") != 0, stream);
  };
  registry.add(std::move(attention));
}

}  // namespace grove::compiler::ops
