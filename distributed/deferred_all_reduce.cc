#include "distributed/deferred_all_reduce.h"

#include <map>
#include <set>

#include "compiler/ir/program_inputs.h"
#include "runtime/error.h"

namespace grove::distributed {

using compiler::ir::Program;
using compiler::ir::ValueId;

Program add_deferred_all_reduce(const Program& optimizer,
                                const std::vector<std::vector<std::string>>& buckets,
                                const AllReduceOptions& options) {
  std::map<std::string, ValueId> buffers;
  for (ValueId id : optimizer.inputs()) {
    const compiler::ir::Value& value = optimizer.value(id);
    if (value.kind == compiler::ir::ValueKind::kBuffer) buffers.emplace(value.name, id);
  }
  std::set<ValueId> deferred;  // the gradients the step reduces itself
  for (const std::vector<std::string>& bucket : buckets) {
    for (const std::string& name : bucket) {
      auto found = buffers.find(name);
      GROVE_CHECK_AS(ConfigError, found != buffers.end(), "deferred all-reduce of '",
                     optimizer.name(), "': '", name, "' is not a buffer input of the program");
      GROVE_CHECK_AS(ConfigError, deferred.insert(found->second).second, "deferred all-reduce of '",
                     optimizer.name(), "': '", name, "' is listed twice");
    }
  }

  std::vector<ValueId> mapped;
  Program result = compiler::ir::program_with_inputs_of(optimizer, mapped);
  // Replaces `values` (of `optimizer`) by the results of one in-place `op` over them.
  auto add_in_place = [&](const std::string& name, const std::string& op,
                          compiler::ir::Attributes attrs, const std::vector<ValueId>& values,
                          const std::string& suffix) {
    std::vector<ValueId> operands;
    std::vector<std::string> names;
    std::vector<compiler::ir::TensorType> types;
    for (ValueId id : values) {
      operands.push_back(mapped[static_cast<size_t>(id)]);
      names.push_back(optimizer.value(id).name + suffix);
      types.push_back(optimizer.value(id).type);
    }
    const int32_t added = result.add_node(name, op, operands, std::move(attrs), names, types);
    for (size_t k = 0; k < values.size(); ++k) {
      mapped[static_cast<size_t>(values[k])] = result.node(added).results[k];
    }
  };
  std::vector<ValueId> reduced;
  for (size_t b = 0; b < buckets.size(); ++b) {
    std::vector<ValueId> values;
    for (const std::string& name : buckets[b]) values.push_back(buffers.at(name));
    if (values.empty()) continue;
    compiler::ir::Attributes attrs;
    attrs.set("op", options.reduce_op);
    attrs.set("overlap", int64_t{options.overlap ? 1 : 0});
    attrs.set("coalesce", int64_t{options.coalesce_adjacent ? 1 : 0});
    add_in_place(str_cat("all_reduce.deferred", b), "all_reduce", std::move(attrs), values,
                 ".reduced");
    reduced.insert(reduced.end(), values.begin(), values.end());
  }
  // The nodes that read a deferred gradient, directly or through another node.
  std::set<ValueId> dependent(deferred.begin(), deferred.end());
  std::vector<bool> waits(optimizer.nodes().size(), false);
  for (size_t n = 0; n < optimizer.nodes().size(); ++n) {
    const compiler::ir::Node& node = optimizer.nodes()[n];
    for (ValueId operand : node.operands) waits[n] = waits[n] || dependent.count(operand) != 0;
    if (waits[n]) dependent.insert(node.results.begin(), node.results.end());
  }
  auto emit = [&](const compiler::ir::Node& node) {
    std::vector<ValueId> operands;
    std::vector<std::string> names;
    std::vector<compiler::ir::TensorType> types;
    for (ValueId id : node.operands) operands.push_back(mapped[static_cast<size_t>(id)]);
    for (ValueId id : node.results) {
      names.push_back(optimizer.value(id).name);
      types.push_back(optimizer.value(id).type);
    }
    const int32_t added = result.add_node(node.name, node.op, operands, node.attrs, names, types);
    for (size_t r = 0; r < node.results.size(); ++r) {
      mapped[static_cast<size_t>(node.results[r])] = result.node(added).results[r];
    }
  };
  const bool overlap = options.overlap && !reduced.empty();
  for (size_t n = 0; n < optimizer.nodes().size(); ++n) {
    if (!overlap || !waits[n]) emit(optimizer.nodes()[n]);
  }
  if (overlap) {
    // Note [Communication stream]: joined before the first reader, within the step.
    add_in_place("collective_join", "collective_join", compiler::ir::Attributes(), reduced,
                 ".joined");
    for (size_t n = 0; n < optimizer.nodes().size(); ++n) {
      if (waits[n]) emit(optimizer.nodes()[n]);
    }
  }
  std::vector<ValueId> outputs;
  for (ValueId id : optimizer.outputs()) outputs.push_back(mapped[static_cast<size_t>(id)]);
  result.set_outputs(outputs);
  result.verify();
  return result;
}

}  // namespace grove::distributed
