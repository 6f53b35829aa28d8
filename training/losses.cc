#include "training/losses.h"

#include "compiler/ops/op_registry.h"
#include "runtime/error.h"

namespace grove::training {

namespace {

// Appends one typed node to `program` (the registry infers its result type,
// as ProgramBuilder does); returns its single result.
compiler::ir::ValueId append(compiler::ir::Program& program, const std::string& op,
                             const std::vector<compiler::ir::ValueId>& operands,
                             const compiler::ir::Attributes& attrs, const std::string& name) {
  const compiler::ops::OpRegistry& registry = compiler::ops::OpRegistry::global();
  GROVE_CHECK(!program.has_name(name) && !program.find_node(name), "program '", program.name(),
              "' already has a value or node named '", name, "'; pick another loss name");
  compiler::ops::OpContext context;
  context.node_name = name;
  context.op = op;
  context.device = program.device();
  for (compiler::ir::ValueId operand : operands) {
    context.operand_types.push_back(program.value(operand).type);
    context.operand_names.push_back(program.value(operand).name);
  }
  context.attrs = registry.normalize_attrs(context, attrs);
  std::vector<compiler::ir::TensorType> types = registry.infer_types(context);
  int32_t node = program.add_node(name, op, operands, context.attrs, {name}, types);
  return program.node(node).results.at(0);
}

void check_value(const compiler::ir::Program& program, compiler::ir::ValueId value,
                 const char* what) {
  GROVE_CHECK(value >= 0 && value < static_cast<compiler::ir::ValueId>(program.values().size()),
              "program '", program.name(), "': the ", what, " id ", value,
              " is not one of its values");
}

}  // namespace

compiler::ir::ValueId add_mse_loss(compiler::ir::Program& program, compiler::ir::ValueId prediction,
                                   const std::string& target_name, const std::string& loss_name) {
  check_value(program, prediction, "prediction");
  compiler::ir::ValueId target = program.add_input(target_name, program.value(prediction).type,
                                                   compiler::ir::ValueKind::kInput);
  return append(program, "mse_loss", {prediction, target}, {}, loss_name);
}

compiler::ir::ValueId add_cross_entropy_loss(compiler::ir::Program& program,
                                             compiler::ir::ValueId logits,
                                             const std::string& labels_name,
                                             const std::string& loss_name) {
  check_value(program, logits, "logits");
  compiler::ir::TensorType labels_type = program.value(logits).type;
  GROVE_CHECK_AS(ShapeError, labels_type.rank() >= 1, "program '", program.name(), "': logits '",
                 program.value(logits).name, "' must have a class dimension, found ",
                 labels_type.str());
  labels_type.shape.pop_back();
  labels_type.dtype = runtime::DType::kI64;
  compiler::ir::ValueId labels =
      program.add_input(labels_name, labels_type, compiler::ir::ValueKind::kInput);
  return append(program, "cross_entropy", {logits, labels}, {}, loss_name);
}

compiler::ir::ValueId add_next_token_loss(compiler::ir::Program& program,
                                          compiler::ir::ValueId logits,
                                          compiler::ir::ValueId tokens,
                                          const std::string& loss_name) {
  check_value(program, logits, "logits");
  check_value(program, tokens, "tokens");
  const compiler::ir::TensorType& logits_type = program.value(logits).type;
  const compiler::ir::TensorType& tokens_type = program.value(tokens).type;
  GROVE_CHECK_AS(ShapeError,
                 logits_type.rank() == 3 && tokens_type.rank() == 2 &&
                     logits_type.shape[0] == tokens_type.shape[0] &&
                     logits_type.shape[1] == tokens_type.shape[1] && tokens_type.shape[1] >= 2,
                 "add_next_token_loss: expected logits [B, T, V] and tokens [B, T] with T >= 2, "
                 "found ",
                 logits_type.str(), " and ", tokens_type.str());
  int64_t length = tokens_type.shape[1];
  compiler::ir::ValueId predictions = append(
      program, "slice", {logits}, {{"dim", int64_t{1}}, {"start", int64_t{0}}, {"end", length - 1}},
      loss_name + ".logits");
  compiler::ir::ValueId labels =
      append(program, "slice", {tokens},
             {{"dim", int64_t{1}}, {"start", int64_t{1}}, {"end", length}}, loss_name + ".labels");
  return append(program, "cross_entropy", {predictions, labels}, {}, loss_name);
}

}  // namespace grove::training
