// Ops that keep a function (or a segment of it) out of a CUDA graph:
// nonzero needs a host sync (its output shape depends on the data), print
// runs on the host.
#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"

namespace grove::compiler::ops {

void register_special_ops(OpRegistry& registry) {
  OpDef nonzero;
  nonzero.name = "nonzero";
  nonzero.summary = "i64 [count, rank] indices of non-zero elements, row-major order";
  nonzero.min_operands = nonzero.max_operands = 1;
  nonzero.kind = OpKind::kSpecial;
  nonzero.graph_safety = [](ExecMode) { return GraphSafety::kNeedsHostSync; };
  nonzero.infer = [](const OpContext& context) {
    TensorType result = context.operand(0);
    result.shape = {ir::kDynamicDim, context.operand(0).rank()};
    result.dtype = DType::kI64;
    return std::vector<TensorType>{result};
  };
  registry.add(std::move(nonzero));

  OpDef print;
  print.name = "print";
  print.summary = "prints `message` and the values on the host; returns its operand";
  print.min_operands = print.max_operands = 1;
  print.attrs = {{"message", AttrKind::kString, std::string()}};
  print.kind = OpKind::kSpecial;
  print.accepts_dynamic_shapes = true;
  print.effects.result_aliases = {0};
  print.effects.host_side_effect = true;
  print.graph_safety = [](ExecMode) { return GraphSafety::kHostOnly; };
  print.infer = [](const OpContext& context) {
    return std::vector<TensorType>{context.operand(0)};
  };
  registry.add(std::move(print));
}

}  // namespace grove::compiler::ops
