#include "compiler/lowering/grouped_attention_keys.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "compiler/ir/program_inputs.h"
#include "runtime/error.h"

namespace grove::compiler::lowering {

bool grouped_attention_keys_enabled() {
  const char* value = std::getenv("GROVE_GROUPED_ATTENTION_KEYS");
  if (value == nullptr || *value == '\0' || std::string(value) == "1") return true;
  GROVE_CHECK_AS(ConfigError, std::string(value) == "0", "GROVE_GROUPED_ATTENTION_KEYS='", value,
                 "': expected 1 (the default: attention reads grouped-query keys whole) or 0 "
                 "(the repeated heads are written out)");
  return false;
}

namespace {

using ir::Node;
using ir::Program;
using ir::ValueId;
using runtime::Shape;

const Node* producer_of(const Program& program, ValueId v) {
  const ir::Value& value = program.value(v);
  return value.kind == ir::ValueKind::kNodeResult ? &program.node(value.producer) : nullptr;
}

bool is_zeros(const Program& program, ValueId v) {
  const Node* node = producer_of(program, v);
  return node != nullptr && node->op == "full" && node->operands.empty() &&
         node->attrs.get_float("value") == 0.0;
}

// The x whose heads `repeated` repeats (Note [Grouped-query keys read whole]):
// repeated = reshape(x' + zeros) (either order) with x' = reshape(x),
// x [..., G, T, D], x' [..., G, 1, T, D], the zeros [..., G, R, T, D] and
// repeated [..., G * R, T, D], all of one dtype; else kNoValue.
ValueId repeated_heads(const Program& program, ValueId repeated) {
  const Node* outer = producer_of(program, repeated);
  if (outer == nullptr || outer->op != "reshape") return ir::kNoValue;
  const ValueId sum = outer->operands[0];
  const Node* add = producer_of(program, sum);
  if (add == nullptr || add->op != "add" || add->operands.size() != 2) return ir::kNoValue;
  ValueId unsqueezed = add->operands[0];
  if (!is_zeros(program, add->operands[1])) {
    if (!is_zeros(program, unsqueezed)) return ir::kNoValue;
    unsqueezed = add->operands[1];
  }
  const Node* inner = producer_of(program, unsqueezed);
  if (inner == nullptr || inner->op != "reshape") return ir::kNoValue;
  const ValueId x = inner->operands[0];
  const Shape& xs = program.value(x).type.shape;
  const Shape& us = program.value(unsqueezed).type.shape;
  const Shape& ss = program.value(sum).type.shape;
  const Shape& rs = program.value(repeated).type.shape;
  const size_t rank = xs.size();
  if (rank < 3 || us.size() != rank + 1 || ss.size() != rank + 1 || rs.size() != rank ||
      program.value(x).type.dtype != program.value(repeated).type.dtype ||
      program.value(sum).type.dtype != program.value(repeated).type.dtype) {
    return ir::kNoValue;
  }
  const size_t heads = rank - 3;  // G's dim in x
  for (size_t d = 0; d < rank; ++d) {
    const size_t u = d <= heads ? d : d + 1;  // x's dim d in the unsqueezed shape
    if (us[u] != xs[d] || ss[u] != xs[d]) return ir::kNoValue;
    if (d != heads && rs[d] != xs[d]) return ir::kNoValue;
  }
  const int64_t repeats = ss[heads + 1];
  if (us[heads + 1] != 1 || repeats < 1 || rs[heads] != xs[heads] * repeats) return ir::kNoValue;
  return x;
}

}  // namespace

std::optional<Program> read_grouped_attention_keys(const Program& program) {
  // Old value -> the value read in its place.
  std::vector<ValueId> replacement(program.values().size(), ir::kNoValue);
  std::vector<std::vector<ValueId>> new_operands(program.nodes().size());
  bool changed = false;
  for (size_t n = 0; n < program.nodes().size(); ++n) {
    const Node& node = program.node(static_cast<int32_t>(n));
    if (node.op != "attention" || node.operands.size() < 3) continue;
    const ValueId key = repeated_heads(program, node.operands[1]);
    const ValueId value = repeated_heads(program, node.operands[2]);
    if (key == ir::kNoValue || value == ir::kNoValue ||
        program.value(key).type.shape[program.value(key).type.shape.size() - 3] !=
            program.value(value).type.shape[program.value(value).type.shape.size() - 3]) {
      continue;
    }
    new_operands[n] = node.operands;
    new_operands[n][1] = key;
    new_operands[n][2] = value;
    changed = true;
  }
  if (!changed) return std::nullopt;
  // Live nodes: those an output or a live node reads, after the rewiring.
  std::vector<bool> live(program.nodes().size(), false);
  std::vector<ValueId> work(program.outputs().begin(), program.outputs().end());
  auto operands_of = [&](size_t n) -> const std::vector<ValueId>& {
    return new_operands[n].empty() ? program.node(static_cast<int32_t>(n)).operands
                                   : new_operands[n];
  };
  for (size_t n = 0; n < program.nodes().size(); ++n) {
    // Nodes with effects stay whatever reads them.
    const Node& node = program.node(static_cast<int32_t>(n));
    if (node.op != "reshape" && node.op != "add" && node.op != "full") {
      live[n] = true;
      for (ValueId operand : operands_of(n)) work.push_back(operand);
    }
  }
  while (!work.empty()) {
    const ValueId v = work.back();
    work.pop_back();
    const ir::Value& value = program.value(v);
    if (value.kind != ir::ValueKind::kNodeResult) continue;
    const auto p = static_cast<size_t>(value.producer);
    if (live[p]) continue;
    live[p] = true;
    for (ValueId operand : operands_of(p)) work.push_back(operand);
  }
  std::vector<ValueId> ids;
  Program out = ir::program_with_inputs_of(program, ids);
  for (size_t n = 0; n < program.nodes().size(); ++n) {
    if (!live[n]) continue;
    const Node& node = program.node(static_cast<int32_t>(n));
    std::vector<ValueId> operands;
    for (ValueId operand : operands_of(n)) operands.push_back(ids[static_cast<size_t>(operand)]);
    std::vector<std::string> names;
    std::vector<ir::TensorType> types;
    for (ValueId result : node.results) {
      names.push_back(program.value(result).name);
      types.push_back(program.value(result).type);
    }
    const int32_t index = out.add_node(node.name, node.op, operands, node.attrs, names, types);
    for (size_t r = 0; r < node.results.size(); ++r) {
      ids[static_cast<size_t>(node.results[r])] = out.node(index).results[r];
    }
  }
  std::vector<ValueId> outputs;
  for (ValueId output : program.outputs()) outputs.push_back(ids[static_cast<size_t>(output)]);
  out.set_outputs(outputs);
  return out;
}

}  // namespace grove::compiler::lowering
