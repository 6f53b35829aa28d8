// What the "cudagraphs" backend's tree did, as the `grove` command reports it.
// The tree is read through the door (CompiledModel::backend_stats(),
// Trainer::backend_stats()) as values and becomes JSON here, where the CLI
// writes it out.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/backends/backend_stats.h"
#include "runtime/device.h"

namespace grove::cli {

inline constexpr const char* kGraphBackend = "cudagraphs";

// Whether backend `name` is registered in this build.
bool backend_registered(const std::string& name);
// Throws UsageError when `name` is not registered, listing the known backends.
void require_backend(const std::string& name);

// The JSON of the tree in a backend's stats; null when it has none.
nlohmann::json tree_in(const compiler::backends::BackendStats& backend_stats);

// The counters that changed between two stats() snapshots, per call.
struct TreeActivity {
  uint64_t warmups = 0;
  uint64_t recordings = 0;
  uint64_t replays = 0;
  uint64_t eager_calls = 0;
  uint64_t capture_failures = 0;
  std::map<std::string, uint64_t> fallbacks;  // fallback_calls by reason
};
TreeActivity tree_activity(const nlohmann::json& before, const nlohmann::json& after);

// Lines "key: value" summarizing a stats() snapshot: nodes, recordings,
// replays, warm-ups, fallbacks by reason, functions running eagerly and why,
// pool bytes.
std::vector<std::pair<std::string, std::string>> stats_summary(const nlohmann::json& stats);

}  // namespace grove::cli
