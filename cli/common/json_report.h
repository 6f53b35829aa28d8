// The JSON that grove run --stats-json and every benchmark write: a header naming
// the command or benchmark, the device and the date, then its own fields.
//
//   nlohmann::json report = report_header("eager_latency", device);
//   report["results"].push_back({{"case", "mlp b=1"}, {"latency_median_us", 41.3}});
//   write_json_file(path, report);
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "cli/common/latency.h"
#include "runtime/device.h"

namespace grove::cli {

// {"benchmark": name, "device": "cuda:0", "device_name": <backend name>,
//  "date": "YYYY-MM-DD" (UTC)}.
nlohmann::json report_header(const std::string& benchmark, runtime::Device device);

// {"count", "min_us", "median_us", "p90_us", "p99_us", "max_us", "spread"}.
nlohmann::json latency_json(const LatencySummary& summary);

// Writes `text` to `path`; throws grove::Error naming the path when the file
// cannot be opened or any byte of it cannot be written (a full disk, /dev/full).
void write_text_file(const std::string& path, const std::string& text);
// Writes `json` (2-space indent, trailing newline) through write_text_file.
void write_json_file(const std::string& path, const nlohmann::json& json);

// Checks before any work that output file `path` (given as `flag`) can be
// written: its directory exists and is writable, and the path is not a
// directory nor an existing file grove may not overwrite. Throws grove::Error
// naming the flag and the path.
void check_output_path(const std::string& flag, const std::string& path);

// Today's date in UTC, "YYYY-MM-DD".
std::string utc_date();

}  // namespace grove::cli
