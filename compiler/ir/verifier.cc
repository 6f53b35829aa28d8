// Program::verify(): the IR's invariants, each failure naming the node.
#include <set>

#include "compiler/ir/program.h"
#include "compiler/ops/op_registry.h"
#include "runtime/error.h"

namespace grove::compiler::ir {

namespace {

std::string node_where(const Program& program, const Node& node) {
  return str_cat("program '", program.name(), "', node '", node.name, "' (", node.op, ")");
}

}  // namespace

void Program::verify() const {
  const ops::OpRegistry& registry = ops::OpRegistry::global();
  for (size_t i = 0; i < values_.size(); ++i) {
    const Value& value = values_[i];
    GROVE_CHECK(value.id == static_cast<ValueId>(i), "program '", name_, "': value '", value.name,
                "' has id ", value.id, " but sits at index ", i);
    if (value.is_program_input()) {
      GROVE_CHECK(value.type.device == device_, "program '", name_,
                  "': ", value_kind_name(value.kind), " '", value.name, "' is on ",
                  value.type.device.str(), " but the program runs on ", device_.str());
      GROVE_CHECK_AS(ShapeError, !value.type.has_dynamic_dims(), "program '", name_,
                     "': ", value_kind_name(value.kind), " '", value.name,
                     "' has a dynamic dimension; program inputs need concrete shapes");
    }
    for (int64_t dim : value.type.shape) {
      GROVE_CHECK_AS(ShapeError, dim >= 0 || dim == kDynamicDim, "program '", name_, "': value '",
                     value.name, "' has a negative dimension in ", shape_text(value.type.shape));
    }
    GROVE_CHECK_AS(ShapeError, value.type.numel() <= kMaxElements, "program '", name_, "': value '",
                   value.name, "' has ", value.type.numel(),
                   " elements, more than the limit of 2^31");
  }

  std::set<ValueId> mutated;  // values whose old contents were overwritten in place
  for (size_t index = 0; index < nodes_.size(); ++index) {
    const Node& node = nodes_[index];
    const ops::OpDef* def = registry.find(node.op);
    GROVE_CHECK(def != nullptr, node_where(*this, node), ": unknown op '", node.op,
                "'; see OpRegistry::op_names()");
    ops::OpContext context;
    context.node_name = node.name;
    context.op = node.op;
    context.device = device_;
    for (size_t k = 0; k < node.operands.size(); ++k) {
      ValueId operand = node.operands[k];
      GROVE_CHECK(operand >= 0 && operand < static_cast<ValueId>(values_.size()),
                  node_where(*this, node), ": operand ", k, " has invalid id ", operand);
      const Value& value = values_[static_cast<size_t>(operand)];
      GROVE_CHECK(value.is_program_input() || value.producer < static_cast<int32_t>(index),
                  node_where(*this, node), ": operand ", k, " '", value.name,
                  "' is used before it is defined (by node '",
                  value.producer >= 0 ? nodes_[static_cast<size_t>(value.producer)].name : "?",
                  "'); nodes must be in dependency order");
      GROVE_CHECK(mutated.count(operand) == 0, node_where(*this, node), ": operand ", k, " '",
                  value.name,
                  "' was overwritten in place by an earlier node; read the result that node "
                  "returns instead (Note [Mutation in SSA])");
      context.operand_types.push_back(value.type);
      context.operand_names.push_back(value.name);
    }
    Attributes normalized = registry.normalize_attrs(context, node.attrs);
    GROVE_CHECK(normalized == node.attrs, node_where(*this, node), ": attributes ",
                node.attrs.str(), " are not normalized (expected ", normalized.str(),
                "); build nodes through ProgramBuilder or the model loader");
    context.attrs = normalized;
    std::vector<TensorType> inferred = registry.infer_types(context);
    GROVE_CHECK(inferred.size() == node.results.size(), node_where(*this, node), ": has ",
                node.results.size(), " results but the op produces ", inferred.size());
    for (size_t r = 0; r < inferred.size(); ++r) {
      const Value& result = values_[static_cast<size_t>(node.results[r])];
      GROVE_CHECK(result.producer == static_cast<int32_t>(index) &&
                      result.result_index == static_cast<int32_t>(r),
                  node_where(*this, node), ": result ", r, " '", result.name,
                  "' does not point back at this node");
      GROVE_CHECK_AS(ShapeError, result.type == inferred[r], node_where(*this, node), ": result ",
                     r, " '", result.name, "' is recorded as ", result.type.str(),
                     " but the op infers ", inferred[r].str());
    }
    for (int operand_index : def->effects.mutated_operands) {
      if (operand_index < static_cast<int>(node.operands.size())) {
        ValueId target = node.operands[static_cast<size_t>(operand_index)];
        GROVE_CHECK(mutated.insert(target).second, node_where(*this, node),
                    ": mutates a value twice");
      }
    }
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    ValueId output = outputs_[i];
    GROVE_CHECK(output >= 0 && output < static_cast<ValueId>(values_.size()), "program '", name_,
                "': output ", i, " has invalid id ", output);
    GROVE_CHECK(mutated.count(output) == 0, "program '", name_, "': output ", i, " '",
                values_[static_cast<size_t>(output)].name,
                "' was overwritten in place; return the result of the mutating node instead "
                "(Note [Mutation in SSA])");
  }
}

}  // namespace grove::compiler::ir
