#include "serving/worker_reports.h"

#include "compiler/backends/backend_stats_json.h"

namespace grove::serving {
namespace {

nlohmann::json tree_or_null(const std::optional<runtime::GraphTreeStats>& tree) {
  return tree ? compiler::backends::tree_json(*tree) : nlohmann::json();
}

}  // namespace

nlohmann::json snapshot_json(const WorkerSnapshot& snapshot) {
  nlohmann::json json{{"device", snapshot.device.str()},
                      {"backend", snapshot.backend},
                      {"tree", tree_or_null(snapshot.tree)},
                      {"memory", compiler::backends::memory_json(snapshot.memory)}};
  if (!snapshot.error.empty()) json["error"] = snapshot.error;
  return json;
}

nlohmann::json snapshots_json(const std::vector<WorkerSnapshot>& snapshots) {
  nlohmann::json json = nlohmann::json::array();
  for (const WorkerSnapshot& snapshot : snapshots) json.push_back(snapshot_json(snapshot));
  return json;
}

nlohmann::json report_json(const WorkerReport& report) {
  return nlohmann::json{{"device", report.device.str()},
                        {"backend", report.backend},
                        {"buckets", report.buckets},
                        {"warmup_ms", report.warmup_ms},
                        {"tree_after_warmup", tree_or_null(report.tree_after_warmup)},
                        {"tree_at_exit", tree_or_null(report.tree_at_exit)}};
}

nlohmann::json reports_json(const std::vector<WorkerReport>& reports) {
  nlohmann::json json = nlohmann::json::array();
  for (const WorkerReport& report : reports) json.push_back(report_json(report));
  return json;
}

}  // namespace grove::serving
