// What the benchmarks that compare execution backends ("eager" against
// "cudagraphs") share: seeded random inputs, and the tree manager's counters
// read from its stats() JSON (flags and the device choice: common/flags.h).
//
//   FlagValues flags = parse_flags("backend_latency", argc, argv, {{"--iters", "N", "..."}});
//   runtime::Device device = resolve_device(flags.text("--device", "auto"));
//   nlohmann::json before = tree_counters(device);
//   ... calls ...
//   GraphActivity activity = graph_activity(before, tree_counters(device));
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/common/flags.h"
#include "compiler/backends/backend_stats.h"
#include "compiler/ir/program.h"
#include "compiler/lowered_function.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/graph_recording.h"

namespace grove::benchmarks {

inline constexpr const char* kEagerBackend = "eager";
inline constexpr const char* kNotRegistered = "cudagraphs backend not registered";
inline constexpr const char* kGraphBackend = "cudagraphs";

// Whether an execution backend of that name is registered in this binary.
bool backend_registered(const std::string& name);

// The graph tree's counters in a backend's stats (CompiledModel::backend_stats(),
// Trainer::backend_stats()) as JSON; null when the backend keeps no tree.
nlohmann::json tree_counters(const compiler::backends::BackendStats& backend_stats);

// What the tree did between two stats() snapshots.
struct GraphActivity {
  uint64_t warmups = 0;
  uint64_t recordings = 0;
  uint64_t replays = 0;
  uint64_t eager_calls = 0;  // calls that fell back to eager
  uint64_t capture_failures = 0;
  // How the copied inputs were bound: device copies, zero-copy patches of the
  // graph, copy-backs of mutated inputs.
  uint64_t input_copies = 0;
  uint64_t input_patches = 0;
  uint64_t input_copy_backs = 0;
  std::map<std::string, uint64_t> fallbacks;  // fallback calls by reason

  nlohmann::json to_json() const;
  // "3 rec / 200 replays" plus fallbacks, for a table cell.
  std::string summary() const;
};
GraphActivity graph_activity(const nlohmann::json& before, const nlohmann::json& after);
// A table cell: the activity's summary, or empty when there is none.
std::string activity_cell(const std::optional<GraphActivity>& activity);
// A table cell for a row that was not measured: kNotRegistered when `error` is
// empty, else "FAILED: " and the error cut to fit.
std::string unmeasured_cell(const std::string& error);

// Seeded random values for every `input` of `program`, in call order, on
// `device`: floats uniform in [-1, 1), integers uniform in [0, integer_bound).
compiler::TensorList random_inputs(const compiler::ir::Program& program, runtime::Device device,
                                   uint64_t seed, int64_t integer_bound);

// The size of the graphs one call launches (CompiledModel::backend_graphs(),
// Trainer::backend_graphs()): what RESULTS.md's node floor multiplies by the
// GPU time per graph node that benchmarks/launch_overhead measures.
struct GraphNodeCount {
  size_t graphs = 0;
  size_t nodes = 0;         // every node: kernels, memcpys, memsets, empty nodes
  size_t kernel_nodes = 0;  // kernel nodes alone (GEMMs and grove's kernels)

  nlohmann::json to_json() const;
};
// Empty when `graphs` is, or when counting failed (the reason goes to stderr:
// a count must not cost the benchmark its latency rows).
std::optional<GraphNodeCount> count_graph_nodes(
    const std::vector<runtime::GraphRecording*>& graphs);
// A table cell: "N nodes" (and the graph count when there are several), or
// empty when no graph was launched.
std::string node_count_cell(const std::optional<GraphNodeCount>& count);

// Whether two tensor lists hold the same bytes, tensor by tensor.
bool bitwise_equal(const compiler::TensorList& a, const compiler::TensorList& b);

}  // namespace grove::benchmarks
