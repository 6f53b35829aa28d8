#include "distributed/gradient_all_reduce.h"

#include <algorithm>
#include <map>
#include <set>

#include "compiler/ir/program_inputs.h"
#include "runtime/collectives/communicator.h"
#include "runtime/error.h"

namespace grove::distributed {
namespace {

using compiler::ir::Program;
using compiler::ir::ValueId;

// Whether node `n` writes a gradient into its persistent buffer and nothing
// else reads either: `copy_into(grad.<param>, g)` whose destination is a
// `buffer` input used only here and whose result is used by no node (only
// returned). Such a copy can move up to right after g's producer, and its
// result can be handed to the communication stream (Note [Communication
// stream]).
bool is_gradient_copy(const Program& backward, int32_t n, const std::vector<int>& uses) {
  const compiler::ir::Node& node = backward.node(n);
  if (node.op != "copy_into" || node.operands.size() != 2 || node.results.size() != 1) {
    return false;
  }
  const compiler::ir::Value& destination = backward.value(node.operands[0]);
  return destination.kind == compiler::ir::ValueKind::kBuffer &&
         uses[static_cast<size_t>(destination.id)] == 1 &&
         uses[static_cast<size_t>(node.results[0])] == 0;
}

}  // namespace

compiler::ir::Program add_gradient_all_reduce(const compiler::ir::Program& backward,
                                              const AllReduceOptions& options,
                                              GradientBuckets* buckets_out) {
  GROVE_CHECK_AS(ConfigError, options.bucket_bytes > 0, "gradient all-reduce of '", backward.name(),
                 "': bucket_bytes must be positive, found ", options.bucket_bytes);
  GROVE_CHECK_AS(ConfigError, options.first_bucket_bytes >= 0, "gradient all-reduce of '",
                 backward.name(),
                 "': first_bucket_bytes must be 0 (the first bucket closes at bucket_bytes) or "
                 "positive, found ",
                 options.first_bucket_bytes);
  GROVE_CHECK_AS(ConfigError, options.last_bucket_bytes >= 0, "gradient all-reduce of '",
                 backward.name(),
                 "': last_bucket_bytes must be 0 (no last bucket of its own) or "
                 "positive, found ",
                 options.last_bucket_bytes);
  GROVE_CHECK_AS(ConfigError, options.deferred_last_buckets >= 0, "gradient all-reduce of '",
                 backward.name(), "': deferred_last_buckets must be 0 (none) or positive, found ",
                 options.deferred_last_buckets);
  GROVE_CHECK_AS(ConfigError, options.deferred_last_buckets == 0 || options.overlap,
                 "gradient all-reduce of '", backward.name(),
                 "': deferred_last_buckets needs overlap (Note [Last buckets reduced in the "
                 "optimizer step])");
  GROVE_CHECK_AS(ConfigError, options.min_last_bucket_bytes >= 0, "gradient all-reduce of '",
                 backward.name(), "': min_last_bucket_bytes must be 0 (off) or positive, found ",
                 options.min_last_bucket_bytes);
  runtime::collectives::parse_reduce_op(options.reduce_op);
  if (options.outputs) {
    for (size_t output : *options.outputs) {
      GROVE_CHECK_AS(ConfigError, output < backward.outputs().size(), "gradient all-reduce of '",
                     backward.name(), "': output ", output, " to reduce is out of range; it has ",
                     backward.outputs().size(), " outputs");
    }
  }
  const auto node_count = static_cast<int32_t>(backward.nodes().size());

  std::vector<int> uses(backward.values().size(), 0);
  for (const compiler::ir::Node& node : backward.nodes()) {
    for (ValueId operand : node.operands) ++uses[static_cast<size_t>(operand)];
  }
  // Note [Gradient buckets]: each gradient copy moves up to right after the
  // node that computes the gradient (or to the front for a program input).
  std::set<int32_t> moved;
  std::multimap<int32_t, int32_t> copies_after;
  for (int32_t n = 0; n < node_count; ++n) {
    if (!is_gradient_copy(backward, n, uses)) continue;
    moved.insert(n);
    copies_after.emplace(backward.value(backward.node(n).operands[1]).producer, n);
  }
  std::vector<int32_t> order;  // emission order of the input's nodes
  auto emit_copies_after = [&](int32_t producer) {
    auto [first, last] = copies_after.equal_range(producer);
    for (auto it = first; it != last; ++it) order.push_back(it->second);
  };
  emit_copies_after(-1);
  for (int32_t n = 0; n < node_count; ++n) {
    if (moved.count(n)) continue;
    order.push_back(n);
    emit_copies_after(n);
  }
  std::vector<int64_t> position(static_cast<size_t>(node_count));
  for (size_t i = 0; i < order.size(); ++i) position[static_cast<size_t>(order[i])] = i;

  // Gradient outputs computed by the program, in the order they are produced.
  std::vector<size_t> produced;
  std::set<ValueId> seen;
  for (size_t i = 0; i < backward.outputs().size(); ++i) {
    const compiler::ir::Value& value = backward.value(backward.outputs()[i]);
    if (options.outputs && options.outputs->count(i) == 0) continue;
    if (value.is_program_input() || !seen.insert(value.id).second) continue;
    if (options.overlap) {
      // Note [Communication stream]: only persistent, otherwise untouched memory.
      const bool persistent = moved.count(value.producer) != 0;
      GROVE_CHECK_AS(ConfigError, persistent, "gradient all-reduce of '", backward.name(),
                     "' with overlap: output ", i, " '", value.name,
                     "' is expected to be a copy_into a `buffer` input that nothing else reads, "
                     "found op '",
                     backward.node(value.producer).op,
                     "'; the communication stream may only touch persistent gradient buffers "
                     "(Note [Communication stream]). Keep TrainingOptions::gradient_storage = "
                     "kPersistentBuffers, or set AllReduceOptions::overlap = false");
    }
    produced.push_back(i);
  }
  auto producer = [&](size_t output) {
    return backward.value(backward.outputs()[output]).producer;
  };
  std::stable_sort(produced.begin(), produced.end(), [&](size_t a, size_t b) {
    return position[static_cast<size_t>(producer(a))] < position[static_cast<size_t>(producer(b))];
  });

  auto bytes_of = [&](size_t output) {
    const compiler::ir::TensorType& type = backward.value(backward.outputs()[output]).type;
    return type.numel() * static_cast<int64_t>(runtime::dtype_size(type.dtype));
  };
  // Where the last bucket starts in `produced` (Note [Last gradient bucket]).
  size_t last_start = produced.size();
  if (options.last_bucket_bytes > 0) {
    int64_t tail = 0;
    while (last_start > 0 && tail < options.last_bucket_bytes)
      tail += bytes_of(produced[--last_start]);
  }
  // Note [Gradient buckets]: close a bucket once it reaches bucket_bytes.
  GradientBuckets buckets;
  for (size_t i = 0; i < produced.size(); ++i) {
    const bool opens_last = i == last_start && options.last_bucket_bytes > 0;
    // The first bucket closes at first_bucket_bytes (Note [First gradient bucket]).
    int64_t closes_at = options.bucket_bytes;
    if (options.first_bucket_bytes > 0 && buckets.outputs.size() == 1) {
      closes_at = std::min(closes_at, options.first_bucket_bytes);
    }
    if (buckets.outputs.empty() || opens_last ||
        (i < last_start && buckets.bytes.back() >= closes_at)) {
      buckets.outputs.emplace_back();
      buckets.bytes.push_back(0);
    }
    buckets.outputs.back().push_back(produced[i]);
    buckets.bytes.back() += bytes_of(produced[i]);
  }
  // Note [Small last bucket]: a tiny last bucket joins the one before it.
  if (buckets.outputs.size() >= 2 && buckets.bytes.back() < options.min_last_bucket_bytes) {
    std::vector<size_t> last = std::move(buckets.outputs.back());
    buckets.outputs.pop_back();
    buckets.outputs.back().insert(buckets.outputs.back().end(), last.begin(), last.end());
    buckets.bytes[buckets.bytes.size() - 2] += buckets.bytes.back();
    buckets.bytes.pop_back();
  }
  // Note [Last buckets reduced in the optimizer step]: at least one bucket stays.
  if (!buckets.outputs.empty()) {
    buckets.deferred =
        std::min(static_cast<size_t>(options.deferred_last_buckets), buckets.outputs.size() - 1);
  }
  const size_t reduced_here = buckets.outputs.size() - buckets.deferred;
  // The node after which each bucket's all_reduce goes.
  std::multimap<int32_t, size_t> bucket_after;
  for (size_t b = 0; b < buckets.outputs.size(); ++b) {
    const int32_t last = producer(buckets.outputs[b].back());
    if (b < reduced_here) bucket_after.emplace(last, b);
    buckets.nodes_after.push_back(static_cast<int64_t>(order.size()) - 1 -
                                  position[static_cast<size_t>(last)]);
  }

  std::vector<ValueId> mapped;
  Program result = compiler::ir::program_with_inputs_of(backward, mapped);
  auto map_all = [&](const std::vector<ValueId>& ids) {
    std::vector<ValueId> out;
    for (ValueId id : ids) out.push_back(mapped[static_cast<size_t>(id)]);
    return out;
  };
  // Adds `op` over the current values of `outputs` (backward output
  // positions, in place) and remaps them to its results.
  auto add_in_place = [&](const std::string& name, const std::string& op,
                          compiler::ir::Attributes attrs, const std::vector<size_t>& outputs,
                          const std::string& suffix) {
    std::vector<ValueId> operands;
    std::vector<std::string> names;
    std::vector<compiler::ir::TensorType> types;
    for (size_t output : outputs) {
      const compiler::ir::Value& gradient = backward.value(backward.outputs()[output]);
      operands.push_back(mapped[static_cast<size_t>(gradient.id)]);
      names.push_back(gradient.name + suffix);
      types.push_back(gradient.type);
    }
    int32_t added = result.add_node(name, op, operands, std::move(attrs), names, types);
    for (size_t k = 0; k < outputs.size(); ++k) {
      mapped[static_cast<size_t>(backward.outputs()[outputs[k]])] = result.node(added).results[k];
    }
  };
  for (int32_t n : order) {
    const compiler::ir::Node& node = backward.node(n);
    std::vector<std::string> names;
    std::vector<compiler::ir::TensorType> types;
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
      compiler::ir::Attributes attrs;
      attrs.set("op", options.reduce_op);
      attrs.set("overlap", int64_t{options.overlap ? 1 : 0});
      attrs.set("coalesce", int64_t{options.coalesce_adjacent ? 1 : 0});
      add_in_place(str_cat("all_reduce.bucket", it->second), "all_reduce", std::move(attrs),
                   buckets.outputs[it->second], ".reduced");
    }
  }
  if (options.overlap && !produced.empty()) {
    // Note [Communication stream]: every fork is joined before the backward ends.
    std::vector<size_t> forked;
    for (size_t b = 0; b < reduced_here; ++b) {
      forked.insert(forked.end(), buckets.outputs[b].begin(), buckets.outputs[b].end());
    }
    add_in_place("collective_join", "collective_join", compiler::ir::Attributes(), forked,
                 ".joined");
  }
  result.set_outputs(map_all(backward.outputs()));
  result.verify();
  if (buckets_out != nullptr) *buckets_out = std::move(buckets);
  return result;
}

}  // namespace grove::distributed
