#include "cli/common/json_report.h"

#include <ctime>
#include <fstream>

#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::cli {

std::string utc_date() {
  std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", &parts);
  return date;
}

nlohmann::json report_header(const std::string& benchmark, runtime::Device device) {
  return nlohmann::json{{"benchmark", benchmark},
                        {"device", device.str()},
                        {"device_name", runtime::device_context(device).backend().name()},
                        {"date", utc_date()}};
}

nlohmann::json latency_json(const LatencySummary& summary) {
  return nlohmann::json{{"count", summary.count},         {"min_us", summary.min_us},
                        {"median_us", summary.median_us}, {"p90_us", summary.p90_us},
                        {"p99_us", summary.p99_us},       {"max_us", summary.max_us},
                        {"spread", summary.spread()}};
}

void write_json_file(const std::string& path, const nlohmann::json& json) {
  std::ofstream file(path);
  GROVE_CHECK(file.good(), "cannot open '", path,
              "' for writing; check that its directory exists and is writable");
  file << json.dump(2) << "\n";
  file.close();
  GROVE_CHECK(!file.fail(), "writing '", path, "' failed (disk full?)");
}

}  // namespace grove::cli
