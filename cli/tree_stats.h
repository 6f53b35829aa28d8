// What the "cudagraphs" backend's tree did, as the `grove` command reports it.
// The backend runs every capturable segment through the calling thread's tree
// manager of the device (cudagraph_trees::tree_manager_for), so the tree's
// stats() and dot() are read from there; nothing here creates a manager for
// a device that has none unless asked to.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/device.h"

namespace grove::cli {

inline constexpr const char* kGraphBackend = "cudagraphs";

// Whether backend `name` is registered in this build.
bool backend_registered(const std::string& name);
// Throws UsageError when `name` is not registered, listing the known backends.
void require_backend(const std::string& name);

// The calling thread's tree manager of `device`: stats() as JSON, dot() as text.
nlohmann::json tree_stats(runtime::Device device);
std::string tree_dot(runtime::Device device);

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
