#include "compiler/ir/generator_state.h"

#include "compiler/ir/builder.h"

namespace grove::compiler::ir {
namespace {

TensorType i64_scalar(runtime::Device device) {
  return TensorType{{}, runtime::DType::kI64, device};
}

}  // namespace

std::optional<GeneratorState> find_generator_state(const Program& program) {
  std::optional<ValueId> seed = program.find_value(kGeneratorSeed);
  std::optional<ValueId> offset = program.find_value(kGeneratorOffset);
  if (!seed || !offset) return std::nullopt;
  return GeneratorState{*seed, *offset};
}

ValueId add_generator_dropout(Program& program, ValueId x, double p, const std::string& name) {
  GROVE_CHECK(p >= 0.0 && p < 1.0, "dropout '", name, "': p = ", p, " must be in [0, 1)");
  GROVE_CHECK(runtime::is_floating(program.value(x).type.dtype), "dropout '", name, "': input '",
              program.value(x).name, "' is ", runtime::dtype_name(program.value(x).type.dtype),
              "; dropout takes a floating-point tensor");
  for (const std::string& node_name : {name, name + ".offset_base", name + ".offset"}) {
    GROVE_CHECK(!program.has_name(node_name) && !program.find_node(node_name), "dropout '", name,
                "': the name '", node_name, "' is already used");
  }
  std::optional<GeneratorState> state = find_generator_state(program);
  if (!state) {
    for (const char* reserved : {kGeneratorSeed, kGeneratorOffset}) {
      GROVE_CHECK(!program.has_name(reserved), "program '", program.name(), "': '", reserved,
                  "' is reserved for the implicit generator's state; rename that value");
    }
    state = GeneratorState{program.add_input(kGeneratorSeed, i64_scalar(program.device()),
                                             ValueKind::kBuffer, zeros_init()),
                           program.add_input(kGeneratorOffset, i64_scalar(program.device()),
                                             ValueKind::kBuffer, zeros_init())};
  }
  const int64_t base = generator_draws(program);
  Attributes full_attrs;
  full_attrs.set("value", static_cast<double>(base));
  full_attrs.set("shape", std::vector<int64_t>{});
  full_attrs.set("dtype", std::string("i64"));
  const std::string base_name = name + ".offset_base";
  const std::string offset_name = name + ".offset";
  program.add_node(base_name, "full", {}, full_attrs, {base_name}, {i64_scalar(program.device())});
  ValueId base_value = *program.find_value(base_name);
  program.add_node(offset_name, "add", {state->offset, base_value}, {}, {offset_name},
                   {i64_scalar(program.device())});
  ValueId offset_value = *program.find_value(offset_name);
  Attributes dropout_attrs;
  dropout_attrs.set("p", p);
  program.add_node(name, "dropout", {x, state->seed, offset_value}, dropout_attrs, {name},
                   {program.value(x).type});
  return *program.find_value(name);
}

int64_t generator_draws(const Program& program) {
  std::optional<GeneratorState> state = find_generator_state(program);
  if (!state) return 0;
  int64_t draws = 0;
  for (const Node& node : program.nodes()) {
    if (node.op != "dropout" || node.operands.size() != 3 || node.operands[1] != state->seed) {
      continue;
    }
    const Value& offset = program.value(node.operands[2]);
    if (offset.kind != ValueKind::kNodeResult) continue;
    const Node& producer = program.node(offset.producer);
    bool from_buffer = false;
    for (ValueId operand : producer.operands) from_buffer |= operand == state->offset;
    if (from_buffer) draws += runtime::shape_numel(program.value(node.operands[0]).type.shape);
  }
  return draws;
}

}  // namespace grove::compiler::ir
