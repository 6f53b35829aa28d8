// Collectives: all_reduce, which data-parallel training inserts into the
// backward to average gradients across ranks (compiler/distributed). It runs
// through the communicator of the program's device
// (runtime/collectives/communicator.h), as one lowering step calling
// OpDef::launch: NCCL on cuda, the host rendezvous on sim. Capturable: the
// collective becomes part of a captured graph. Registered by a static
// initializer when a binary links //compiler/ops:collective_ops.
#include "compiler/ops/op_helpers.h"
#include "runtime/collectives/communicator.h"
#include "runtime/error.h"

namespace grove::compiler::ops {
namespace {

// The most operands (gradients of one bucket) one all_reduce takes.
constexpr int kMaxAllReduceOperands = 256;

void register_collective_ops(OpRegistry& registry) {
  OpDef all_reduce;
  all_reduce.name = "all_reduce";
  all_reduce.summary =
      "reduces each operand in place across the ranks of the device's communicator (one "
      "collective for all operands: a bucket); attribute op = \"mean\" | \"sum\"";
  all_reduce.min_operands = 1;
  all_reduce.max_operands = kMaxAllReduceOperands;
  all_reduce.attrs = {{"op", AttrKind::kString, std::string("mean")}};
  all_reduce.kind = OpKind::kSpecial;
  // Variadic and in place: result r is operand r (Note on OpDef::launch).
  for (int i = 0; i < kMaxAllReduceOperands; ++i) all_reduce.effects.mutated_operands.push_back(i);
  all_reduce.effects.host_side_effect = true;  // the other ranks wait for it: never eliminated
  all_reduce.infer = [](const OpContext& context) {
    runtime::collectives::parse_reduce_op(context.attrs.get_string("op"));
    std::vector<TensorType> results;
    for (size_t i = 0; i < context.operand_types.size(); ++i) {
      GROVE_CHECK_AS(DTypeError, context.operand(i).dtype != DType::kBool, context.where(), ": ",
                     context.describe_operand(i),
                     " is bool; all_reduce takes floating or integer tensors");
      results.push_back(context.operand(i));
    }
    return results;
  };
  all_reduce.launch = [](const OpContext& context, const std::vector<runtime::Tensor>& operands,
                         runtime::StreamHandle stream) {
    runtime::collectives::Communicator& communicator =
        runtime::collectives::communicator_for(context.device);
    std::vector<runtime::collectives::Buffer> buffers;
    for (size_t i = 0; i < operands.size(); ++i) {
      const runtime::Tensor& tensor = operands[i];
      GROVE_CHECK_AS(ShapeError, tensor.is_contiguous(), context.where(), ": operand ", i, " ",
                     tensor.str(), " is not contiguous; all_reduce reduces whole buffers");
      buffers.push_back({tensor.data_ptr(), tensor.numel(), tensor.dtype()});
    }
    communicator.all_reduce(
        buffers, runtime::collectives::parse_reduce_op(context.attrs.get_string("op")), stream);
  };
  registry.add(std::move(all_reduce));
}

const bool kRegistered = [] {
  register_collective_ops(OpRegistry::global());
  return true;
}();

}  // namespace
}  // namespace grove::compiler::ops
