// Collectives: all_reduce, which data-parallel training inserts into the
// backward to average gradients across ranks (distributed). It runs
// through the communicator of the program's device
// (runtime/collectives/communicator.h), as one lowering step calling
// OpDef::launch: NCCL on cuda, the host rendezvous on sim. Capturable: the
// collective becomes part of a captured graph. With overlap = 1 it runs on the
// calling thread's communication stream, forked from the compute stream, and
// collective_join brings that stream back (Note [Communication stream] in
// runtime/collectives/communication_stream.h). Registered by a static
// initializer when a binary links //compiler/ops:collective_ops.
#include "compiler/ops/op_helpers.h"
#include "runtime/collectives/communication_stream.h"
#include "runtime/collectives/communicator.h"
#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::compiler::ops {
namespace {

// The most operands (gradients of one bucket) one all_reduce takes.
constexpr int kMaxAllReduceOperands = 256;
// The most operands (every gradient of a backward) one collective_join takes.
constexpr int kMaxJoinOperands = 4096;

// In place: result r has operand r's type.
std::vector<TensorType> same_as_operands(const OpContext& context, const char* what) {
  std::vector<TensorType> results;
  for (size_t i = 0; i < context.operand_types.size(); ++i) {
    GROVE_CHECK_AS(DTypeError, context.operand(i).dtype != DType::kBool, context.where(), ": ",
                   context.describe_operand(i), " is bool; ", what,
                   " takes floating or integer tensors");
    results.push_back(context.operand(i));
  }
  return results;
}

void register_collective_ops(OpRegistry& registry) {
  OpDef all_reduce;
  all_reduce.name = "all_reduce";
  all_reduce.summary =
      "reduces each operand in place across the ranks of the device's communicator (one "
      "collective for all operands: a bucket); attribute op = \"mean\" | \"sum\"; overlap = 1 "
      "runs it on the communication stream (joined by collective_join); coalesce = 1 reduces "
      "operands adjacent in memory as one buffer";
  all_reduce.min_operands = 1;
  all_reduce.max_operands = kMaxAllReduceOperands;
  all_reduce.attrs = {{"op", AttrKind::kString, std::string("mean")},
                      {"overlap", AttrKind::kInt, int64_t{0}},
                      {"coalesce", AttrKind::kInt, int64_t{0}}};
  all_reduce.kind = OpKind::kSpecial;
  // Variadic and in place: result r is operand r (Note on OpDef::launch).
  for (int i = 0; i < kMaxAllReduceOperands; ++i) all_reduce.effects.mutated_operands.push_back(i);
  all_reduce.effects.host_side_effect = true;  // the other ranks wait for it: never eliminated
  all_reduce.infer = [](const OpContext& context) {
    runtime::collectives::parse_reduce_op(context.attrs.get_string("op"));
    const int64_t overlap = context.attrs.get_int("overlap");
    GROVE_CHECK_AS(ConfigError, overlap == 0 || overlap == 1, context.where(),
                   ": attribute overlap must be 0 (compute stream) or 1 (communication "
                   "stream), found ",
                   overlap);
    const int64_t coalesce = context.attrs.get_int("coalesce");
    GROVE_CHECK_AS(ConfigError, coalesce == 0 || coalesce == 1, context.where(),
                   ": attribute coalesce must be 0 or 1, found ", coalesce);
    return same_as_operands(context, "all_reduce");
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
    // Only where asked (Note [Adjacent buffers reduce as one]), since every
    // rank must issue the same collectives, and only the trainer's layout
    // guarantees that every rank's buffers are adjacent alike.
    if (context.attrs.get_int("coalesce") == 1) {
      buffers = runtime::collectives::coalesce_adjacent(buffers);
    }
    const runtime::collectives::ReduceOp op =
        runtime::collectives::parse_reduce_op(context.attrs.get_string("op"));
    // A graph holds this communicator from here on (see Note [Communicators
    // captured by graphs are never destroyed] in runtime/collectives/communicator.h).
    if (runtime::device_context(context.device).platform().capture_status(stream) !=
        runtime::CaptureStatus::kNone) {
      communicator.note_captured();
    }
    if (context.attrs.get_int("overlap") == 0) {
      communicator.all_reduce(buffers, op, stream);
      return;
    }
    // Note [Communication stream]: the bucket is final on `stream`; from here
    // to the collective_join only the communication stream touches it.
    runtime::collectives::CommunicationStream& side =
        runtime::collectives::communication_stream(context.device);
    side.fork_from(stream);
    communicator.all_reduce(buffers, op, side.stream());
  };
  registry.add(std::move(all_reduce));

  OpDef join;
  join.name = "collective_join";
  join.summary =
      "makes the compute stream wait for every collective forked onto the communication stream "
      "(all_reduce with overlap = 1); its operands are the values those collectives produced, "
      "returned unchanged (in place) so that later readers depend on the join";
  join.min_operands = 1;
  join.max_operands = kMaxJoinOperands;
  join.kind = OpKind::kSpecial;
  for (int i = 0; i < kMaxJoinOperands; ++i) join.effects.mutated_operands.push_back(i);
  join.effects.host_side_effect = true;  // it orders streams: never eliminated
  join.infer = [](const OpContext& context) {
    return same_as_operands(context, "collective_join");
  };
  join.launch = [](const OpContext& context, const std::vector<runtime::Tensor>&,
                   runtime::StreamHandle stream) {
    runtime::collectives::communication_stream(context.device).join_into(stream);
  };
  registry.add(std::move(join));
}

const bool kRegistered = [] {
  register_collective_ops(OpRegistry::global());
  return true;
}();

}  // namespace
}  // namespace grove::compiler::ops
