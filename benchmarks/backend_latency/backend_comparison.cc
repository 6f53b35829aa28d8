#include "benchmarks/backend_latency/backend_comparison.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "compiler/backends/backend_registry.h"
#include "compiler/backends/backend_stats_json.h"
#include "runtime/device_context.h"

namespace grove::benchmarks {
namespace {

uint64_t counter(const nlohmann::json& stats, const char* key) {
  auto found = stats.find(key);
  return found != stats.end() && found->is_number_unsigned() ? found->get<uint64_t>() : 0;
}

// Counters only grow; a smaller later value means the manager was replaced.
uint64_t growth(uint64_t before, uint64_t after) {
  return after >= before ? after - before : after;
}

}  // namespace

bool backend_registered(const std::string& name) {
  std::vector<std::string> names = compiler::backends::backend_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

nlohmann::json tree_counters(const compiler::backends::BackendStats& backend_stats) {
  return backend_stats.tree ? compiler::backends::tree_json(*backend_stats.tree) : nlohmann::json();
}

GraphActivity graph_activity(const nlohmann::json& before, const nlohmann::json& after) {
  GraphActivity activity;
  auto delta = [&](const char* key) { return growth(counter(before, key), counter(after, key)); };
  activity.warmups = delta("warmups");
  activity.recordings = delta("recordings");
  activity.replays = delta("replays");
  activity.eager_calls = delta("eager_calls");
  activity.capture_failures = delta("capture_failures");
  activity.input_copies = delta("input_copies");
  activity.input_patches = delta("input_patches");
  activity.input_copy_backs = delta("input_copy_backs");
  auto calls = after.find("fallback_calls");
  if (calls != after.end() && calls->is_object()) {
    nlohmann::json earlier = before.value("fallback_calls", nlohmann::json::object());
    for (const auto& [reason, count] : calls->items()) {
      uint64_t from = earlier.contains(reason) ? earlier[reason].get<uint64_t>() : 0;
      uint64_t added = growth(from, count.get<uint64_t>());
      if (added > 0) activity.fallbacks[reason] = added;
    }
  }
  return activity;
}

nlohmann::json GraphActivity::to_json() const {
  return nlohmann::json{{"warmups", warmups},
                        {"recordings", recordings},
                        {"replays", replays},
                        {"eager_calls", eager_calls},
                        {"capture_failures", capture_failures},
                        {"input_copies", input_copies},
                        {"input_patches", input_patches},
                        {"input_copy_backs", input_copy_backs},
                        {"fallback_calls", fallbacks}};
}

std::string GraphActivity::summary() const {
  std::string text = str_cat(recordings, " rec / ", replays, " replays");
  if (eager_calls > 0) text += str_cat(" / ", eager_calls, " eager");
  if (input_copies > 0) text += str_cat(" / ", input_copies, " input copies");
  if (input_patches > 0) text += str_cat(" / ", input_patches, " patches");
  for (const auto& [reason, count] : fallbacks) text += str_cat(" (", reason, ": ", count, ")");
  return text;
}

nlohmann::json GraphNodeCount::to_json() const {
  return nlohmann::json{{"graphs", graphs}, {"nodes", nodes}, {"kernel_nodes", kernel_nodes}};
}

std::optional<GraphNodeCount> count_graph_nodes(
    const std::vector<runtime::GraphRecording*>& graphs) {
  if (graphs.empty()) return std::nullopt;
  GraphNodeCount count;
  try {
    for (const runtime::GraphRecording* graph : graphs) {
      count.graphs += 1;
      count.nodes += graph->node_count();
      count.kernel_nodes += graph->kernel_nodes().size();
    }
  } catch (const Error& error) {
    std::cerr << "graph node count not measured: " << error.what() << "\n";
    return std::nullopt;
  }
  return count;
}

std::string node_count_cell(const std::optional<GraphNodeCount>& count) {
  if (!count || count->graphs == 0) return "";
  std::string text = str_cat(count->nodes, " (", count->kernel_nodes, " kernels)");
  if (count->graphs > 1) text += str_cat(" in ", count->graphs, " graphs");
  return text;
}

compiler::TensorList random_inputs(const compiler::ir::Program& program, runtime::Device device,
                                   uint64_t seed, int64_t integer_bound) {
  GROVE_CHECK(integer_bound > 0, "random_inputs: integer_bound must be positive, found ",
              integer_bound);
  std::mt19937_64 rng(seed);
  compiler::TensorList inputs;
  for (compiler::ir::ValueId id : program.inputs_of_kind(compiler::ir::ValueKind::kInput)) {
    const compiler::ir::Value& value = program.value(id);
    auto count = static_cast<size_t>(runtime::shape_numel(value.type.shape));
    if (value.type.dtype == runtime::DType::kI64) {
      std::uniform_int_distribution<int64_t> uniform(0, integer_bound - 1);
      std::vector<int64_t> values(count);
      for (int64_t& v : values) v = uniform(rng);
      inputs.push_back(runtime::Tensor::from_vector(values, value.type.shape, device));
    } else {
      GROVE_CHECK_AS(DTypeError, value.type.dtype == runtime::DType::kF32, "random_inputs: input '",
                     value.name, "' of ", program.name(), " is ",
                     runtime::dtype_name(value.type.dtype),
                     "; the benchmarks generate only f32 and i64 inputs");
      std::uniform_real_distribution<float> uniform(-1.f, 1.f);
      std::vector<float> values(count);
      for (float& v : values) v = uniform(rng);
      inputs.push_back(runtime::Tensor::from_vector(values, value.type.shape, device));
    }
  }
  return inputs;
}

bool bitwise_equal(const compiler::TensorList& a, const compiler::TensorList& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].shape() != b[i].shape() || a[i].dtype() != b[i].dtype()) return false;
    if (a[i].to_host_bytes() != b[i].to_host_bytes()) return false;
  }
  return true;
}

std::string activity_cell(const std::optional<GraphActivity>& activity) {
  return activity ? activity->summary() : "";
}

std::string unmeasured_cell(const std::string& error) {
  if (error.empty()) return kNotRegistered;
  return "FAILED: " + (error.size() > 60 ? error.substr(0, 57) + "..." : error);
}

}  // namespace grove::benchmarks
