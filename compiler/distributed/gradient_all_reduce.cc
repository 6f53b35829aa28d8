#include "compiler/distributed/gradient_all_reduce.h"

#include <algorithm>
#include <map>
#include <set>

#include "runtime/collectives/communicator.h"
#include "runtime/error.h"

namespace grove::compiler::distributed {

using ir::Program;
using ir::ValueId;

ir::Program add_gradient_all_reduce(const ir::Program& backward, const AllReduceOptions& options,
                                    GradientBuckets* buckets_out) {
  GROVE_CHECK_AS(ConfigError, options.bucket_bytes > 0, "gradient all-reduce of '", backward.name(),
                 "': bucket_bytes must be positive, found ", options.bucket_bytes);
  runtime::collectives::parse_reduce_op(options.reduce_op);

  // Gradient outputs computed by the program, in the order they are produced.
  std::vector<size_t> order;
  std::set<ValueId> seen;
  for (size_t i = 0; i < backward.outputs().size(); ++i) {
    const ir::Value& value = backward.value(backward.outputs()[i]);
    if (value.is_program_input() || !seen.insert(value.id).second) continue;
    order.push_back(i);
  }
  auto producer = [&](size_t output) {
    return backward.value(backward.outputs()[output]).producer;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return producer(a) < producer(b); });

  // Note [Gradient buckets]: close a bucket once it reaches bucket_bytes.
  GradientBuckets buckets;
  for (size_t output : order) {
    if (buckets.outputs.empty() || buckets.bytes.back() >= options.bucket_bytes) {
      buckets.outputs.emplace_back();
      buckets.bytes.push_back(0);
    }
    const ir::TensorType& type = backward.value(backward.outputs()[output]).type;
    buckets.outputs.back().push_back(output);
    buckets.bytes.back() += type.numel() * static_cast<int64_t>(runtime::dtype_size(type.dtype));
  }
  // The node after which each bucket's all_reduce goes.
  std::multimap<int32_t, size_t> bucket_after;
  for (size_t b = 0; b < buckets.outputs.size(); ++b) {
    bucket_after.emplace(producer(buckets.outputs[b].back()), b);
  }

  Program result(backward.name(), backward.device());
  result.set_dims(backward.dims());
  std::vector<ValueId> mapped(backward.values().size(), ir::kNoValue);
  for (ValueId id : backward.inputs()) {
    const ir::Value& value = backward.value(id);
    mapped[static_cast<size_t>(id)] =
        result.add_input(value.name, value.type, value.kind, value.initializer);
  }
  std::vector<ValueId> outputs = backward.outputs();
  auto map_all = [&](const std::vector<ValueId>& ids) {
    std::vector<ValueId> out;
    for (ValueId id : ids) out.push_back(mapped[static_cast<size_t>(id)]);
    return out;
  };
  for (int32_t n = 0; n < static_cast<int32_t>(backward.nodes().size()); ++n) {
    const ir::Node& node = backward.node(n);
    std::vector<std::string> names;
    std::vector<ir::TensorType> types;
    for (ValueId id : node.results) {
      names.push_back(backward.value(id).name);
      types.push_back(backward.value(id).type);
    }
    int32_t added =
        result.add_node(node.name, node.op, map_all(node.operands), node.attrs, names, types);
    for (size_t r = 0; r < node.results.size(); ++r) {
      mapped[static_cast<size_t>(node.results[r])] = result.node(added).results[r];
    }
    auto [first, last] = bucket_after.equal_range(n);
    for (auto it = first; it != last; ++it) {
      const size_t b = it->second;
      std::vector<ValueId> operands;
      std::vector<std::string> reduced_names;
      std::vector<ir::TensorType> reduced_types;
      for (size_t output : buckets.outputs[b]) {
        const ir::Value& gradient = backward.value(backward.outputs()[output]);
        operands.push_back(mapped[static_cast<size_t>(gradient.id)]);
        reduced_names.push_back(gradient.name + ".reduced");
        reduced_types.push_back(gradient.type);
      }
      ir::Attributes attrs;
      attrs.set("op", options.reduce_op);
      int32_t reduce = result.add_node(str_cat("all_reduce.bucket", b), "all_reduce", operands,
                                       attrs, reduced_names, reduced_types);
      for (size_t k = 0; k < buckets.outputs[b].size(); ++k) {
        ValueId old_id = backward.outputs()[buckets.outputs[b][k]];
        mapped[static_cast<size_t>(old_id)] = result.node(reduce).results[k];
      }
    }
  }
  result.set_outputs(map_all(outputs));
  result.verify();
  if (buckets_out != nullptr) *buckets_out = std::move(buckets);
  return result;
}

}  // namespace grove::compiler::distributed
