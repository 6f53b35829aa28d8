#include "compiler/autodiff/training_programs.h"

#include <algorithm>
#include <set>

#include "compiler/autodiff/joint_graph.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/generator_state.h"
#include "compiler/ops/op_registry.h"
#include "runtime/error.h"

namespace grove::compiler::autodiff {

namespace {

using ir::Program;
using ir::ValueId;

enum class Fate : uint8_t { kUnneeded, kPassed, kSaved, kRecomputed };

int64_t bytes_of(const ir::TensorType& type) {
  return type.numel() * static_cast<int64_t>(runtime::dtype_size(type.dtype));
}

// The split of a joint graph: which backward nodes are live and what happens
// to each forward value the backward reads (Note [Saved activations]).
struct Partition {
  std::vector<bool> live_node;
  std::vector<Fate> fate;
  bool uses_loss_grad = false;
};

Partition partition(const JointGraph& joint, bool recompute) {
  const Program& program = joint.program;
  auto forward_count = static_cast<int32_t>(joint.forward_node_count);
  Partition split;
  split.live_node.assign(program.nodes().size(), false);
  split.fate.assign(program.values().size(), Fate::kUnneeded);
  auto is_forward = [&](ValueId value) {
    const ir::Value& v = program.value(value);
    return v.is_program_input() ? value != joint.loss_grad : v.producer < forward_count;
  };

  // Live backward nodes, and the forward values they (or the roots) read.
  std::set<ValueId> needed;
  std::vector<ValueId> stack;
  for (ValueId grad : joint.param_grads) {
    if (grad != ir::kNoValue) stack.push_back(grad);
  }
  while (!stack.empty()) {
    ValueId value = stack.back();
    stack.pop_back();
    if (value == joint.loss_grad) {
      split.uses_loss_grad = true;
    } else if (is_forward(value)) {
      needed.insert(value);
    } else {
      auto producer = static_cast<size_t>(program.value(value).producer);
      if (split.live_node[producer]) continue;
      split.live_node[producer] = true;
      for (ValueId operand : program.node(static_cast<int32_t>(producer)).operands) {
        stack.push_back(operand);
      }
    }
  }

  // Note [Generator state is read once]: the runtime rewrites the implicit
  // generator's buffers before every call that draws, so a value computed from
  // them (a dropout's offset) is saved, never recomputed: recomputed, it would
  // read the state of the backward's own call and mask with other numbers.
  std::set<ValueId> generator_buffers;
  if (std::optional<ir::GeneratorState> state = ir::find_generator_state(program)) {
    generator_buffers = {state->seed, state->offset};
  }

  // Decide from the last forward value to the first, so that a recomputed
  // value's operands are decided after it (they have smaller ids).
  const ops::OpRegistry& registry = ops::OpRegistry::global();
  std::set<ValueId> pending = needed;
  while (!pending.empty()) {
    ValueId value = *pending.rbegin();
    pending.erase(value);
    const ir::Value& v = program.value(value);
    if (v.is_program_input()) {
      split.fate[static_cast<size_t>(value)] = Fate::kPassed;
      continue;
    }
    const ir::Node& node = program.node(v.producer);
    const ops::OpDef& def = registry.get(node.op);
    bool view = def.kind == ops::OpKind::kView;
    bool elementwise = def.kind == ops::OpKind::kElementwise;
    bool pure = def.effects.mutated_operands.empty() && !def.effects.host_side_effect;
    bool reads_generator = std::any_of(node.operands.begin(), node.operands.end(),
                                       [&](ValueId o) { return generator_buffers.count(o) != 0; });
    bool recomputes = false;
    if (recompute && pure && !reads_generator && (view || elementwise)) {
      int64_t new_bytes = 0;
      std::set<ValueId> counted;
      for (ValueId operand : node.operands) {
        const ir::Value& o = program.value(operand);
        bool free = o.is_program_input() || needed.count(operand) != 0 ||
                    program.node(o.producer).operands.empty();
        if (!free && counted.insert(operand).second) new_bytes += bytes_of(o.type);
      }
      int64_t own = bytes_of(v.type);
      recomputes = view ? new_bytes <= own : (new_bytes < own || new_bytes == 0);
    }
    if (!recomputes) {
      split.fate[static_cast<size_t>(value)] = Fate::kSaved;
      continue;
    }
    split.fate[static_cast<size_t>(value)] = Fate::kRecomputed;
    for (ValueId operand : node.operands) {
      if (needed.insert(operand).second) pending.insert(operand);
    }
  }
  return split;
}

// Which model inputs the model overwrites in place.
std::set<ValueId> mutated_inputs(const Program& model) {
  const ops::OpRegistry& registry = ops::OpRegistry::global();
  std::set<ValueId> mutated;
  for (const ir::Node& node : model.nodes()) {
    for (int operand : registry.get(node.op).effects.mutated_operands) {
      if (operand >= static_cast<int>(node.operands.size())) continue;
      ValueId target = node.operands[static_cast<size_t>(operand)];
      if (model.value(target).is_program_input()) mutated.insert(target);
    }
  }
  return mutated;
}

// A copy of `model` named `name`, with the same value ids: values are
// re-created in id order (inputs where they were declared, each node at its
// first result), which keeps the call order of the inputs too.
Program copy_model(const Program& model, const std::string& name) {
  Program copy(name, model.device());
  copy.set_dims(model.dims());
  for (const ir::Value& value : model.values()) {
    if (value.is_program_input()) {
      copy.add_input(value.name, value.type, value.kind, value.initializer);
    } else if (value.result_index == 0) {
      const ir::Node& node = model.node(value.producer);
      std::vector<std::string> names;
      std::vector<ir::TensorType> types;
      for (ValueId result : node.results) {
        names.push_back(model.value(result).name);
        types.push_back(model.value(result).type);
      }
      copy.add_node(node.name, node.op, node.operands, node.attrs, names, types);
    }
    GROVE_CHECK(copy.values().size() > static_cast<size_t>(value.id) &&
                    copy.value(value.id).name == value.name,
                "autodiff: cannot copy program '", model.name(), "': value '", value.name,
                "' is not where its id says");
  }
  return copy;
}

}  // namespace

std::string gradient_buffer_name(const std::string& param_name) { return "grad." + param_name; }

TrainingPrograms build_training_programs(const Program& model, ValueId loss,
                                         const TrainingOptions& options) {
  std::vector<ValueId> params = options.params;
  if (params.empty()) {
    for (ValueId param : model.inputs_of_kind(ir::ValueKind::kParam)) {
      if (runtime::is_floating(model.value(param).type.dtype)) params.push_back(param);
    }
  }
  GROVE_CHECK(!params.empty(), "build_training_programs: program '", model.name(),
              "' has no floating params to train");
  JointGraph joint = build_joint_graph(model, loss, params);
  const Program& program = joint.program;
  Partition split = partition(joint, options.recompute);

  std::vector<ValueId> model_of_joint(program.values().size(), ir::kNoValue);
  for (size_t m = 0; m < joint.joint_of_model.size(); ++m) {
    model_of_joint[static_cast<size_t>(joint.joint_of_model[m])] = static_cast<ValueId>(m);
  }
  std::set<ValueId> overwritten = mutated_inputs(model);

  TrainingPrograms result;
  result.params = params;
  result.gradient_storage = options.gradient_storage;

  // The forward: the model, plus the loss and the saved activations as outputs.
  result.forward = copy_model(model, model.name() + ".forward");
  Program& forward = result.forward;
  forward.set_outputs(model.outputs());
  result.model_output_count = model.outputs().size();
  auto output_index = [&](ValueId model_value) -> std::optional<size_t> {
    const auto& outputs = forward.outputs();
    auto found = std::find(outputs.begin(), outputs.end(), model_value);
    if (found == outputs.end()) return std::nullopt;
    return static_cast<size_t>(found - outputs.begin());
  };
  if (auto index = output_index(loss)) {
    result.loss_output = *index;
  } else {
    result.loss_output = forward.outputs().size();
    forward.add_output(loss);
  }
  result.first_saved_output = forward.outputs().size();
  std::vector<size_t> saved_output_of(program.values().size(), 0);
  for (size_t value = 0; value < split.fate.size(); ++value) {
    if (split.fate[value] == Fate::kSaved) {
      ValueId model_value = model_of_joint[value];
      saved_output_of[value] = forward.outputs().size();
      forward.add_output(model_value);
      result.saved_bytes += bytes_of(model.value(model_value).type);
    }
    if (split.fate[value] == Fate::kPassed) {
      ValueId model_value = model_of_joint[value];
      GROVE_CHECK(overwritten.count(model_value) == 0, "build_training_programs: the backward of '",
                  model.name(), "' reads ", ir::value_kind_name(model.value(model_value).kind),
                  " '", model.value(model_value).name,
                  "' which the forward overwrites in place; differentiating through in-place "
                  "state updates is not supported");
    }
    if (split.fate[value] == Fate::kRecomputed) {
      result.recomputed.push_back(program.value(static_cast<ValueId>(value)).name);
    }
  }
  forward.verify();

  // The backward: inputs, then recomputed forward nodes and live gradient
  // nodes in their joint order, then one gradient per param.
  ir::ProgramBuilder b(model.name() + ".backward", model.device());
  std::vector<ValueId> mapped(program.values().size(), ir::kNoValue);
  const ir::TensorType& loss_type = program.value(joint.loss_grad).type;
  mapped[static_cast<size_t>(joint.loss_grad)] =
      b.input(program.value(joint.loss_grad).name, loss_type.shape, loss_type.dtype);
  result.backward_inputs.push_back({BackwardInput::Source::kLossGradient, 0});
  for (size_t value = 0; value < split.fate.size(); ++value) {
    if (split.fate[value] != Fate::kSaved) continue;
    const ir::Value& v = program.value(static_cast<ValueId>(value));
    mapped[value] = b.input(v.name, v.type.shape, v.type.dtype);
    result.backward_inputs.push_back(
        {BackwardInput::Source::kForwardOutput, saved_output_of[value]});
  }
  for (size_t position = 0; position < model.inputs().size(); ++position) {
    ValueId value = joint.joint_of_model[static_cast<size_t>(model.inputs()[position])];
    if (split.fate[static_cast<size_t>(value)] != Fate::kPassed) continue;
    const ir::Value& v = program.value(value);
    ValueId id = ir::kNoValue;
    if (v.kind == ir::ValueKind::kInput) id = b.input(v.name, v.type.shape, v.type.dtype);
    if (v.kind == ir::ValueKind::kParam) {
      id = b.param(v.name, v.type.shape, v.type.dtype, *v.initializer);
    }
    if (v.kind == ir::ValueKind::kBuffer) {
      id = b.buffer(v.name, v.type.shape, v.type.dtype, *v.initializer);
    }
    mapped[static_cast<size_t>(value)] = id;
    result.backward_inputs.push_back({BackwardInput::Source::kForwardInput, position});
  }
  std::vector<ValueId> gradient_buffers;
  if (options.gradient_storage == GradientStorage::kPersistentBuffers) {
    for (size_t i = 0; i < params.size(); ++i) {
      const ir::Value& param = model.value(params[i]);
      gradient_buffers.push_back(b.buffer(gradient_buffer_name(param.name), param.type.shape,
                                          param.type.dtype, ir::zeros_init()));
      result.backward_inputs.push_back({BackwardInput::Source::kGradientBuffer, i});
    }
  }
  for (size_t index = 0; index < program.nodes().size(); ++index) {
    const ir::Node& node = program.node(static_cast<int32_t>(index));
    bool keep = index < joint.forward_node_count
                    ? split.fate[static_cast<size_t>(node.results[0])] == Fate::kRecomputed
                    : split.live_node[index];
    if (!keep) continue;
    std::vector<ValueId> operands;
    for (ValueId operand : node.operands) operands.push_back(mapped[static_cast<size_t>(operand)]);
    std::vector<ValueId> results = b.op(node.op, operands, node.attrs, node.name);
    for (size_t r = 0; r < results.size(); ++r) {
      mapped[static_cast<size_t>(node.results[r])] = results[r];
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const ir::TensorType& type = model.value(params[i]).type;
    ValueId joint_grad = joint.param_grads[i];
    result.param_has_gradient.push_back(joint_grad != ir::kNoValue);
    ValueId grad = joint_grad == ir::kNoValue ? b.full(0.0, type.shape, type.dtype)
                                              : mapped[static_cast<size_t>(joint_grad)];
    GROVE_CHECK(grad != ir::kNoValue, "build_training_programs: internal error: the gradient of '",
                model.value(params[i]).name, "' was not carried into the backward");
    if (!gradient_buffers.empty()) grad = b.copy_into(gradient_buffers[i], grad);
    b.output(grad);
  }
  result.backward = b.build();
  GROVE_CHECK(!result.backward.find_value(ir::kGeneratorOffset),
              "build_training_programs: internal error: the backward of '", model.name(),
              "' reads the implicit generator's offset; it would draw other numbers than the "
              "forward (Note [Generator state is read once])");
  return result;
}

}  // namespace grove::compiler::autodiff
