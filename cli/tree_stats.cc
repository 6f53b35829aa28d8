#include "cli/tree_stats.h"

#include <algorithm>

#include "cli/arguments.h"
#include "cli/common/table.h"
#include "compiler/backends/backend_registry.h"
#include "compiler/backends/backend_stats_json.h"

namespace grove::cli {
namespace {

uint64_t counter(const nlohmann::json& stats, const char* key) {
  auto found = stats.find(key);
  return found != stats.end() && found->is_number() ? found->get<uint64_t>() : 0;
}

uint64_t delta(const nlohmann::json& before, const nlohmann::json& after, const char* key) {
  uint64_t from = counter(before, key), to = counter(after, key);
  return to >= from ? to - from : 0;
}

}  // namespace

bool backend_registered(const std::string& name) {
  std::vector<std::string> names = compiler::backends::backend_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

void require_backend(const std::string& name) {
  if (backend_registered(name)) return;
  std::string known;
  for (const std::string& each : compiler::backends::backend_names()) {
    known += (known.empty() ? "" : ", ") + each;
  }
  throw UsageError(str_cat("--backend: unknown backend '", name, "'; known backends: ", known));
}

nlohmann::json tree_in(const compiler::backends::BackendStats& backend_stats) {
  return backend_stats.tree ? compiler::backends::tree_json(*backend_stats.tree) : nlohmann::json();
}

TreeActivity tree_activity(const nlohmann::json& before, const nlohmann::json& after) {
  TreeActivity activity;
  activity.warmups = delta(before, after, "warmups");
  activity.recordings = delta(before, after, "recordings");
  activity.replays = delta(before, after, "replays");
  activity.eager_calls = delta(before, after, "eager_calls");
  activity.capture_failures = delta(before, after, "capture_failures");
  if (auto calls = after.find("fallback_calls"); calls != after.end() && calls->is_object()) {
    nlohmann::json empty = nlohmann::json::object();
    const nlohmann::json& earlier =
        before.contains("fallback_calls") ? before["fallback_calls"] : empty;
    for (const auto& [reason, count] : calls->items()) {
      uint64_t from = earlier.contains(reason) ? earlier[reason].get<uint64_t>() : 0;
      if (count.get<uint64_t>() > from) activity.fallbacks[reason] = count.get<uint64_t>() - from;
    }
  }
  return activity;
}

std::vector<std::pair<std::string, std::string>> stats_summary(const nlohmann::json& stats) {
  std::vector<std::pair<std::string, std::string>> lines;
  auto number = [&](const char* key) { return std::to_string(counter(stats, key)); };
  lines.emplace_back("tree nodes (graphs)", number("nodes"));
  lines.emplace_back("warm-ups", number("warmups"));
  lines.emplace_back("recordings", number("recordings"));
  lines.emplace_back("replays", number("replays"));
  lines.emplace_back("re-records", number("rerecords"));
  lines.emplace_back("eager fallback calls", number("eager_calls"));
  if (auto calls = stats.find("fallback_calls"); calls != stats.end() && calls->is_object()) {
    for (const auto& [reason, count] : calls->items()) {
      lines.emplace_back("  fallback: " + reason, std::to_string(count.get<uint64_t>()));
    }
  }
  if (auto functions = stats.find("functions"); functions != stats.end() && functions->is_array()) {
    for (const auto& function : *functions) {
      if (function.contains("eager_reason")) {
        lines.emplace_back("  eager: " + function.value("name", "?"),
                           function["eager_reason"].get<std::string>());
      }
    }
  }
  lines.emplace_back("capture failures", number("capture_failures"));
  if (auto pool = stats.find("pool"); pool != stats.end() && pool->is_object()) {
    lines.emplace_back("pool reserved", format_bytes(counter(*pool, "reserved_bytes")));
    lines.emplace_back("pool peak allocated", format_bytes(counter(*pool, "peak_allocated_bytes")));
  }
  return lines;
}

}  // namespace grove::cli
