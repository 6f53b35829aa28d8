#include "compiler/autodiff/joint_graph.h"

#include <set>

#include "compiler/autodiff/gradient_context.h"
#include "compiler/autodiff/gradient_rules.h"
#include "runtime/error.h"

namespace grove::compiler::autodiff {

namespace {

std::string fresh_input_name(const ir::Program& program, const std::string& base) {
  std::string name = base;
  for (int suffix = 1; program.has_name(name) || program.find_node(name); ++suffix) {
    name = base + "_" + std::to_string(suffix);
  }
  return name;
}

// Replays the model's inputs and nodes into `b`; returns model id -> builder id.
std::vector<ValueId> replay_model(const ir::Program& model, ProgramBuilder& b) {
  std::vector<ValueId> joint_of(model.values().size(), ir::kNoValue);
  for (ValueId input : model.inputs()) {
    const ir::Value& value = model.value(input);
    const ir::TensorType& type = value.type;
    ValueId id = ir::kNoValue;
    switch (value.kind) {
      case ir::ValueKind::kInput:
        id = b.input(value.name, type.shape, type.dtype);
        break;
      case ir::ValueKind::kParam:
        id = b.param(value.name, type.shape, type.dtype, *value.initializer);
        break;
      case ir::ValueKind::kBuffer:
        id = b.buffer(value.name, type.shape, type.dtype, *value.initializer);
        break;
      case ir::ValueKind::kNodeResult:
        break;
    }
    joint_of[static_cast<size_t>(input)] = id;
  }
  for (const ir::Node& node : model.nodes()) {
    std::vector<ValueId> operands;
    for (ValueId operand : node.operands)
      operands.push_back(joint_of[static_cast<size_t>(operand)]);
    std::vector<ValueId> results = b.op(node.op, operands, node.attrs, node.name);
    for (size_t r = 0; r < results.size(); ++r) {
      joint_of[static_cast<size_t>(node.results[r])] = results[r];
    }
  }
  return joint_of;
}

// Which joint values depend on a requested param through floating values.
std::vector<bool> requires_grad(const ir::Program& program, const std::set<ValueId>& params) {
  std::vector<bool> needs(program.values().size(), false);
  for (ValueId param : params) needs[static_cast<size_t>(param)] = true;
  for (const ir::Node& node : program.nodes()) {
    bool any = false;
    for (ValueId operand : node.operands) any = any || needs[static_cast<size_t>(operand)];
    if (!any) continue;
    for (ValueId result : node.results) {
      needs[static_cast<size_t>(result)] = runtime::is_floating(program.value(result).type.dtype);
    }
  }
  return needs;
}

}  // namespace

JointGraph build_joint_graph(const ir::Program& model, ValueId loss,
                             const std::vector<ValueId>& params) {
  register_gradients();
  GROVE_CHECK(loss >= 0 && loss < static_cast<ValueId>(model.values().size()), "autodiff: loss id ",
              loss, " is not a value of program '", model.name(), "'");
  const ir::TensorType& loss_type = model.value(loss).type;
  GROVE_CHECK_AS(ShapeError, loss_type.is_scalar() && runtime::is_floating(loss_type.dtype),
                 "autodiff: the loss '", model.value(loss).name, "' of program '", model.name(),
                 "' must be a floating scalar, found ", loss_type.str(),
                 "; reduce it first (e.g. with mean or sum)");

  ProgramBuilder b(model.name(), model.device());
  JointGraph joint;
  joint.joint_of_model = replay_model(model, b);
  joint.forward_node_count = model.nodes().size();
  auto joint_of = [&](ValueId model_value) {
    return joint.joint_of_model[static_cast<size_t>(model_value)];
  };

  std::set<ValueId> targets;
  for (ValueId param : params) {
    GROVE_CHECK(param >= 0 && param < static_cast<ValueId>(model.values().size()) &&
                    model.value(param).kind == ir::ValueKind::kParam,
                "autodiff: value id ", param, " of program '", model.name(),
                "' is not a param; gradients are taken with respect to params");
    GROVE_CHECK_AS(DTypeError, runtime::is_floating(model.value(param).type.dtype),
                   "autodiff: param '", model.value(param).name, "' is ",
                   model.value(param).type.str(), "; only floating params have gradients");
    targets.insert(joint_of(param));
  }
  std::vector<bool> needs = requires_grad(b.program(), targets);

  joint.loss_grad =
      b.input(fresh_input_name(b.program(), model.value(loss).name + ".grad"), {}, loss_type.dtype);
  std::vector<ValueId> grads(b.program().values().size(), ir::kNoValue);
  grads[static_cast<size_t>(joint_of(loss))] = joint.loss_grad;

  const ops::OpRegistry& registry = ops::OpRegistry::global();
  for (size_t index = joint.forward_node_count; index-- > 0;) {
    ir::Node node = b.program().node(static_cast<int32_t>(index));
    std::vector<ValueId> result_grads;
    bool any_grad = false;
    for (ValueId result : node.results) {
      ValueId grad = static_cast<size_t>(result) < grads.size() ? grads[static_cast<size_t>(result)]
                                                                : ir::kNoValue;
      result_grads.push_back(grad);
      any_grad = any_grad || grad != ir::kNoValue;
    }
    std::vector<bool> wants;
    bool any_wanted = false;
    for (ValueId operand : node.operands) {
      wants.push_back(needs[static_cast<size_t>(operand)]);
      any_wanted = any_wanted || wants.back();
    }
    if (!any_grad || !any_wanted) continue;

    const ops::OpDef& def = registry.get(node.op);
    GROVE_CHECK(static_cast<bool>(def.gradient), "autodiff: node '", node.name, "' (", node.op,
                ") lies between the loss '", model.value(loss).name, "' and a param, but op '",
                node.op, "' has no gradient rule (",
                non_differentiable_ops().count(node.op) ? non_differentiable_ops().at(node.op)
                                                        : "not implemented",
                "); detach it from the loss or exclude the params behind it");
    ops::GradientContext context{b, node, {}, {}, result_grads, wants};
    context.op.node_name = node.name;
    context.op.op = node.op;
    context.op.attrs = node.attrs;
    context.op.device = model.device();
    for (ValueId operand : node.operands) {
      context.op.operand_types.push_back(b.type(operand));
      context.op.operand_names.push_back(b.program().value(operand).name);
    }
    for (ValueId result : node.results) context.result_types.push_back(b.type(result));

    std::vector<ValueId> operand_grads = def.gradient(context);
    GROVE_CHECK(operand_grads.size() == node.operands.size(), "autodiff: the gradient rule of op '",
                node.op, "' returned ", operand_grads.size(), " gradients for node '", node.name,
                "' with ", node.operands.size(), " operands");
    grads.resize(b.program().values().size(), ir::kNoValue);
    for (size_t k = 0; k < operand_grads.size(); ++k) {
      ValueId grad = operand_grads[k];
      if (grad == ir::kNoValue || !wants[k]) continue;
      ValueId operand = node.operands[k];
      GROVE_CHECK(b.type(grad).shape == b.type(operand).shape &&
                      b.type(grad).dtype == b.type(operand).dtype,
                  "autodiff: the gradient rule of op '", node.op, "' gave operand ", k,
                  " of node '", node.name, "' a gradient of type ", b.type(grad).str(),
                  ", expected ", b.type(operand).str());
      ValueId& slot = grads[static_cast<size_t>(operand)];
      slot = slot == ir::kNoValue ? grad : b.add(slot, grad);
    }
    grads.resize(b.program().values().size(), ir::kNoValue);
  }

  for (ValueId param : params)
    joint.param_grads.push_back(grads[static_cast<size_t>(joint_of(param))]);
  joint.program = b.build();
  return joint;
}

}  // namespace grove::compiler::autodiff
