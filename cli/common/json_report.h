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

// Writes `json` (2-space indent, trailing newline); throws grove::Error naming
// the path when the file cannot be written.
void write_json_file(const std::string& path, const nlohmann::json& json);

// Today's date in UTC, "YYYY-MM-DD".
std::string utc_date();

}  // namespace grove::cli
