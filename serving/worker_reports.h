// What a server's device workers report, as values: /metrics, the CLI and
// re-planning read the fields; JSON is made only where the report leaves C++
// as text (grove serve --stats-json, the benchmarks' JSON) by the *_json
// functions below, through compiler/backends/backend_stats_json.h.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compiler/backends/backend_stats.h"
#include "runtime/device.h"
#include "runtime/graph_tree_stats.h"

namespace grove::serving {

// A worker's graph tree and memory as it last refreshed them: after warm-up,
// then after a batch at most every ServerConfig::backend_snapshot_period.
struct WorkerSnapshot {
  runtime::Device device;
  std::string backend;
  std::optional<runtime::GraphTreeStats> tree;  // "cudagraphs" only
  compiler::backends::BackendMemory memory;     // memory.device unset: the backend holds none
  std::string error;                            // why reading them failed, when it did
};

// A worker's warm-up, and its tree after warm-up and once the worker ended.
struct WorkerReport {
  runtime::Device device;
  std::string backend;
  std::vector<int64_t> buckets;
  double warmup_ms = 0;
  std::optional<runtime::GraphTreeStats> tree_after_warmup;  // "cudagraphs" only
  std::optional<runtime::GraphTreeStats> tree_at_exit;       // set once the worker has ended
};

// {"device", "backend", "tree": counters or null, "memory": {"device", "pool"} or {}, "error"?}
nlohmann::json snapshot_json(const WorkerSnapshot& snapshot);
nlohmann::json snapshots_json(const std::vector<WorkerSnapshot>& snapshots);
// {"device", "backend", "buckets", "warmup_ms", "tree_after_warmup", "tree_at_exit"}
nlohmann::json report_json(const WorkerReport& report);
nlohmann::json reports_json(const std::vector<WorkerReport>& reports);

}  // namespace grove::serving
