// Leveled logging to stderr, controlled by GROVE_LOG=warn|info|debug.
// `log_once` prints a message the first time its key is seen, so perf hints
// ("not captured: ...") appear once per function.
#pragma once

#include <string>
#include <string_view>

namespace grove {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// The level read from GROVE_LOG (default warn); may be overridden in tests.
LogLevel log_level();
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);

void log(LogLevel level, std::string_view message);
// Logs `message` the first time `key` is seen in this process; returns whether it logged.
bool log_once(LogLevel level, const std::string& key, std::string_view message);

// Messages logged so far are also kept in a bounded in-memory ring so tests can
// assert on them without scraping stderr.
std::string recent_log();
void clear_recent_log();

}  // namespace grove
