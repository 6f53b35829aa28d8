#include "cli/common/json_report.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
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
                        {"device_name", runtime::device_context(device).platform().name()},
                        {"date", utc_date()}};
}

nlohmann::json latency_json(const LatencySummary& summary) {
  return nlohmann::json{{"count", summary.count},         {"min_us", summary.min_us},
                        {"median_us", summary.median_us}, {"p90_us", summary.p90_us},
                        {"p99_us", summary.p99_us},       {"max_us", summary.max_us},
                        {"spread", summary.spread()}};
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  GROVE_CHECK(file.good(), "cannot open '", path,
              "' for writing; check that its directory exists and is writable");
  file << text;
  file.close();
  GROVE_CHECK(!file.fail(), "writing '", path, "' failed (", text.size(),
              " bytes; is the disk full?); nothing was written there");
}

void write_json_file(const std::string& path, const nlohmann::json& json) {
  write_text_file(path, json.dump(2) + "\n");
}

void check_output_path(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::file_status status = fs::status(path, error);
  GROVE_CHECK(!fs::is_directory(status), flag, " ", path, ": is a directory; name a file to write");
  if (fs::exists(status)) {
    GROVE_CHECK(::access(path.c_str(), W_OK) == 0, flag, " ", path,
                ": exists and is not writable; choose another path");
    return;
  }
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  GROVE_CHECK(fs::is_directory(parent, error), flag, " ", path, ": directory '", parent.string(),
              "' does not exist; create it first");
  GROVE_CHECK(::access(parent.c_str(), W_OK) == 0, flag, " ", path, ": directory '",
              parent.string(), "' is not writable; choose another path");
}

}  // namespace grove::cli
