#include "compiler/ops/op_registry.h"

#include <algorithm>

#include "compiler/ops/op_helpers.h"
#include "runtime/error.h"

namespace grove::compiler::ops {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kElementwise:
      return "elementwise";
    case OpKind::kReduction:
      return "reduction";
    case OpKind::kView:
      return "view";
    case OpKind::kMatmul:
      return "matmul";
    case OpKind::kCopyUpdate:
      return "copy_update";
    case OpKind::kRandom:
      return "random";
    case OpKind::kGather:
      return "gather";
    case OpKind::kSpecial:
      return "special";
    case OpKind::kAttention:
      return "attention";
  }
  return "?";
}

const char* graph_safety_name(GraphSafety safety) {
  switch (safety) {
    case GraphSafety::kCapturable:
      return "capturable";
    case GraphSafety::kNeedsHostSync:
      return "needs_host_sync";
    case GraphSafety::kHostOnly:
      return "host_only";
  }
  return "?";
}

std::string OpContext::where() const { return str_cat("node '", node_name, "' (", op, ")"); }

std::string OpContext::describe_operand(size_t index) const {
  std::string name = index < operand_names.size() ? operand_names[index] : "?";
  std::string type = index < operand_types.size() ? operand_types[index].str() : "?";
  return str_cat("operand ", index, " '", name, "' ", type);
}

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = [] {
    auto* built = new OpRegistry();
    register_elementwise_ops(*built);
    register_reduction_ops(*built);
    register_structural_ops(*built);
    register_training_ops(*built);
    register_special_ops(*built);
    register_math_ops(*built);
    register_bitwise_ops(*built);
    register_attention_ops(*built);
    return built;
  }();
  return *registry;
}

void OpRegistry::add(OpDef def) {
  GROVE_CHECK(!def.name.empty(), "OpRegistry::add: an op needs a name");
  GROVE_CHECK(ops_.count(def.name) == 0, "OpRegistry::add: op '", def.name,
              "' is already registered; each op has exactly one definition");
  GROVE_CHECK(static_cast<bool>(def.infer), "OpRegistry::add: op '", def.name,
              "' has no type inference");
  std::string name = def.name;
  ops_[name] = std::make_unique<OpDef>(std::move(def));
}

const OpDef* OpRegistry::find(const std::string& name) const {
  auto found = ops_.find(name);
  return found == ops_.end() ? nullptr : found->second.get();
}

const OpDef& OpRegistry::get(const std::string& name) const {
  const OpDef* def = find(name);
  if (def == nullptr) {
    std::string known;
    for (const auto& [op_name, unused] : ops_) known += (known.empty() ? "" : ", ") + op_name;
    throw Error(str_cat("unknown op '", name, "'; known ops: ", known));
  }
  return *def;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : ops_) names.push_back(name);
  return names;
}

void OpRegistry::set_gradient(const std::string& name, GradientRule rule) {
  auto found = ops_.find(name);
  GROVE_CHECK(found != ops_.end(), "OpRegistry::set_gradient: unknown op '", name, "'");
  found->second->gradient = std::move(rule);
}

Attributes OpRegistry::normalize_attrs(const OpContext& context, const Attributes& attrs) const {
  const OpDef& def = get(context.op);
  Attributes normalized;
  for (const auto& [name, value] : attrs.entries()) {
    auto spec = std::find_if(def.attrs.begin(), def.attrs.end(),
                             [&](const AttrSpec& candidate) { return candidate.name == name; });
    if (spec == def.attrs.end()) {
      std::string accepted;
      for (const AttrSpec& candidate : def.attrs) {
        accepted += (accepted.empty() ? "" : ", ") + candidate.name;
      }
      throw Error(str_cat(context.where(), ": unknown attribute '", name, "'; ", context.op,
                          " accepts ", accepted.empty() ? "no attributes" : accepted));
    }
    AttrKind kind = ir::attr_kind_of(value);
    if (spec->kind == AttrKind::kFloat && kind == AttrKind::kInt) {
      normalized.set(name, static_cast<double>(std::get<int64_t>(value)));
      continue;
    }
    GROVE_CHECK(kind == spec->kind, context.where(), ": attribute '", name, "' must be an ",
                ir::attr_kind_name(spec->kind), ", found ", ir::attr_kind_name(kind), " ",
                ir::attr_value_str(value));
    normalized.set(name, value);
  }
  for (const AttrSpec& spec : def.attrs) {
    if (normalized.has(spec.name)) continue;
    GROVE_CHECK(spec.default_value.has_value(), context.where(), ": attribute '", spec.name, "' (",
                ir::attr_kind_name(spec.kind), ") is required");
    normalized.set(spec.name, *spec.default_value);
  }
  return normalized;
}

std::vector<TensorType> OpRegistry::infer_types(const OpContext& context) const {
  const OpDef& def = get(context.op);
  auto count = static_cast<int>(context.operand_types.size());
  bool too_few = count < def.min_operands;
  bool too_many = def.max_operands >= 0 && count > def.max_operands;
  if (too_few || too_many) {
    std::string expected = def.max_operands < 0 ? str_cat("at least ", def.min_operands)
                           : def.min_operands == def.max_operands
                               ? str_cat(def.min_operands)
                               : str_cat(def.min_operands, " to ", def.max_operands);
    throw Error(str_cat(context.where(), ": expected ", expected, " operands, found ", count));
  }
  for (size_t i = 0; i < context.operand_types.size(); ++i) {
    GROVE_CHECK(context.operand_types[i].device == context.device, context.where(), ": ",
                context.describe_operand(i), " is on ", context.operand_types[i].device.str(),
                " but the program runs on ", context.device.str());
    GROVE_CHECK_AS(ShapeError,
                   def.accepts_dynamic_shapes || !context.operand_types[i].has_dynamic_dims(),
                   context.where(), ": ", context.describe_operand(i),
                   " has a data-dependent (dynamic) dimension, which ", context.op,
                   " does not accept; only print and cast take values produced by nonzero");
  }
  std::vector<TensorType> results = def.infer(context);
  GROVE_CHECK(
      def.effects.result_aliases.empty() || def.effects.result_aliases.size() == results.size(),
      "op '", def.name, "': effects describe ", def.effects.result_aliases.size(),
      " results but inference produced ", results.size());
  for (const TensorType& result : results) {
    GROVE_CHECK_AS(ShapeError, result.numel() <= ir::kMaxElements, context.where(), ": result ",
                   result.str(), " has more than 2^31 elements");
  }
  return results;
}

}  // namespace grove::compiler::ops
