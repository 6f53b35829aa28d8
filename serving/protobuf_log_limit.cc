#include "serving/protobuf_log_limit.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace grove::serving {
namespace {

void counted(google::protobuf::LogLevel level, const char* filename, int line,
             const std::string& message) {
  static std::mutex mutex;
  static auto* per_site = new std::map<std::pair<std::string, int>, uint64_t>();
  uint64_t count = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    count = ++(*per_site)[{filename != nullptr ? filename : "?", line}];
  }
  if ((count & (count - 1)) != 0) return;  // the 1st, 2nd, 4th, 8th, ... only
  const LogLevel grove_level =
      level >= google::protobuf::LOGLEVEL_ERROR ? LogLevel::kWarn : LogLevel::kInfo;
  log(grove_level,
      str_cat("protobuf (", filename != nullptr ? filename : "?", ":", line, "): ", message,
              count > 1 ? str_cat(" [", count, " such messages so far]") : std::string()));
}

}  // namespace

void limit_protobuf_log() {
  static std::once_flag once;
  std::call_once(once, [] { google::protobuf::SetLogHandler(&counted); });
}

}  // namespace grove::serving
