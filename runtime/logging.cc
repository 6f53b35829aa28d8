#include "runtime/logging.h"

#include <cstdlib>
#include <deque>
#include <iostream>
#include <mutex>
#include <unordered_set>

namespace grove {
namespace {

constexpr size_t kRecentLogLines = 256;

LogLevel level_from_environment() {
  const char* value = std::getenv("GROVE_LOG");
  if (value == nullptr) return LogLevel::kWarn;
  std::string_view text(value);
  if (text == "error") return LogLevel::kError;
  if (text == "info") return LogLevel::kInfo;
  if (text == "debug") return LogLevel::kDebug;
  return LogLevel::kWarn;
}

struct LogState {
  std::mutex mutex;
  LogLevel level = level_from_environment();
  std::unordered_set<std::string> seen_keys;
  std::deque<std::string> recent;
};

LogState& state() {
  static LogState* instance = new LogState();  // never destroyed: safe at exit
  return *instance;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

void emit_locked(LogState& s, LogLevel level, std::string_view message) {
  std::string line = std::string("[grove ") + level_name(level) + "] " + std::string(message);
  s.recent.push_back(line);
  if (s.recent.size() > kRecentLogLines) s.recent.pop_front();
  if (level <= s.level) std::cerr << line << "\n";
}

}  // namespace

LogLevel log_level() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().level;
}

void set_log_level(LogLevel level) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().level = level;
}

bool log_enabled(LogLevel level) { return level <= log_level(); }

void log(LogLevel level, std::string_view message) {
  std::lock_guard<std::mutex> lock(state().mutex);
  emit_locked(state(), level, message);
}

bool log_once(LogLevel level, const std::string& key, std::string_view message) {
  std::lock_guard<std::mutex> lock(state().mutex);
  if (!state().seen_keys.insert(key).second) return false;
  emit_locked(state(), level, message);
  return true;
}

std::string recent_log() {
  std::lock_guard<std::mutex> lock(state().mutex);
  std::string all;
  for (const auto& line : state().recent) all += line + "\n";
  return all;
}

void clear_recent_log() {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().recent.clear();
}

}  // namespace grove
