#include "compiler/lowering/gemm_tuning_table.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace grove::compiler::lowering {
namespace {

constexpr int kVersion = 1;

void warn(const std::filesystem::path& path, const std::string& what) {
  log(LogLevel::kWarn, str_cat("GEMM tuning table '", path.string(), "': ", what));
}

bool valid_time(const nlohmann::json& value) {
  return value.is_number() && std::isfinite(value.get<double>()) && value.get<double>() >= 0;
}

// The file's entries; nullopt (after a warning) when it is missing or unusable.
std::optional<std::map<std::string, GemmTuningEntry>> read_entries(
    const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::nullopt;
  std::ifstream in(path);
  if (!in) {
    warn(path, "cannot be read; ignoring it (measurements will be repeated)");
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json document = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded() || !document.is_object() || !document.contains("entries") ||
      !document["entries"].is_object() || document.value("version", -1) != kVersion) {
    warn(path, str_cat("is not a version-", kVersion,
                       " tuning table (corrupt JSON or another format); ignoring it, and the "
                       "next measurement rewrites it"));
    return std::nullopt;
  }
  std::map<std::string, GemmTuningEntry> entries;
  for (const auto& [key, value] : document["entries"].items()) {
    if (!value.is_object() || !value.contains("grove_us") || !value.contains("library_us") ||
        !valid_time(value["grove_us"]) || !valid_time(value["library_us"])) {
      warn(path, str_cat("entry '", key,
                         "' lacks non-negative numbers grove_us and library_us; skipping it"));
      continue;
    }
    GemmTuningEntry entry{value["grove_us"].get<double>(), value["library_us"].get<double>()};
    if (value.contains("grove_rows")) {
      const nlohmann::json& rows = value["grove_rows"];
      if (!rows.is_number_integer() || rows.get<int64_t>() < 0) {
        warn(path, str_cat("entry '", key, "' has a grove_rows that is not a count; skipping it"));
        continue;
      }
      entry.grove_rows = rows.get<int64_t>();
    }
    if (value.contains("grove_columns")) {
      const nlohmann::json& columns = value["grove_columns"];
      if (!columns.is_number_integer() || columns.get<int64_t>() < 1) {
        warn(path,
             str_cat("entry '", key, "' has a grove_columns that is not a count; skipping it"));
        continue;
      }
      entry.grove_columns = columns.get<int64_t>();
    }
    // Note [Small-M tiled GEMM]: the tiled kernel's fields, all three or none.
    if (value.contains("tiled_us")) {
      if (!valid_time(value["tiled_us"]) || !value.contains("tiled_rows") ||
          !value.contains("tiled_columns") || !value["tiled_rows"].is_number_integer() ||
          !value["tiled_columns"].is_number_integer() || value["tiled_rows"].get<int64_t>() < 0 ||
          value["tiled_columns"].get<int64_t>() < 0) {
        warn(path, str_cat("entry '", key,
                           "' has a tiled_us without counts tiled_rows and tiled_columns; "
                           "skipping it"));
        continue;
      }
      entry.tiled_us = value["tiled_us"].get<double>();
      entry.tiled_rows = value["tiled_rows"].get<int64_t>();
      entry.tiled_columns = value["tiled_columns"].get<int64_t>();
      if (value.contains("tiled_warps") && value["tiled_warps"].is_number_integer() &&
          value["tiled_warps"].get<int64_t>() >= 0) {
        entry.tiled_warps = value["tiled_warps"].get<int64_t>();
      }
    }
    entries[key] = entry;
  }
  return entries;
}

}  // namespace

std::filesystem::path GemmTuningTable::default_path() {
  const char* cache = std::getenv("GROVE_CACHE_DIR");
  if (cache != nullptr && *cache != '\0') {
    return std::filesystem::path(cache) / "gemm_tuning.json";
  }
  const char* home = std::getenv("HOME");
  std::filesystem::path base = home != nullptr && *home != '\0'
                                   ? std::filesystem::path(home) / ".cache" / "grove"
                                   : std::filesystem::path(".grove_cache");
  return base / "gemm_tuning.json";
}

void GemmTuningTable::load() {
  std::optional<std::map<std::string, GemmTuningEntry>> entries = read_entries(path_);
  entries_ = entries ? std::move(*entries) : std::map<std::string, GemmTuningEntry>{};
}

std::optional<GemmTuningEntry> GemmTuningTable::find(const std::string& key) const {
  auto found = entries_.find(key);
  if (found == entries_.end()) return std::nullopt;
  return found->second;
}

void GemmTuningTable::store(const std::string& key, const GemmTuningEntry& entry) {
  if (std::optional<std::map<std::string, GemmTuningEntry>> on_disk = read_entries(path_)) {
    for (auto& [disk_key, disk_entry] : *on_disk) entries_.emplace(disk_key, disk_entry);
  }
  entries_[key] = entry;
  nlohmann::json document = {{"version", kVersion}, {"entries", nlohmann::json::object()}};
  for (const auto& [entry_key, value] : entries_) {
    document["entries"][entry_key] = {{"grove_us", value.grove_us},
                                      {"library_us", value.library_us},
                                      {"grove_rows", value.grove_rows},
                                      {"grove_columns", value.grove_columns}};
    if (value.tiled_us > 0) {
      document["entries"][entry_key]["tiled_us"] = value.tiled_us;
      document["entries"][entry_key]["tiled_rows"] = value.tiled_rows;
      document["entries"][entry_key]["tiled_columns"] = value.tiled_columns;
      document["entries"][entry_key]["tiled_warps"] = value.tiled_warps;
    }
  }
  std::error_code error;
  std::filesystem::create_directories(path_.parent_path(), error);
  const std::filesystem::path temporary =
      path_.string() + ".tmp." + std::to_string(static_cast<long>(getpid()));
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << document.dump(2) << '\n';
    if (!out) {
      warn(path_, str_cat("cannot write '", temporary.string(),
                          "'; the measurement is kept for this process only"));
      std::filesystem::remove(temporary, error);
      return;
    }
  }
  std::filesystem::rename(temporary, path_, error);
  if (error) {
    warn(path_, str_cat("cannot replace it (", error.message(),
                        "); the measurement is kept for this process only"));
    std::filesystem::remove(temporary, error);
  }
}

}  // namespace grove::compiler::lowering
