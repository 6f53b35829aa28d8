#include "tests/cli/command_runner.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace grove::cli::testing {
namespace {

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::vector<std::string> CommandResult::err_lines() const {
  std::vector<std::string> lines;
  std::istringstream stream(err);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

std::string scratch_path(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
}

CommandResult run_command(const std::string& binary, const std::vector<std::string>& args,
                          const CommandOptions& options) {
  // Atomic: tests run several commands at once (ranks of one group).
  static std::atomic<int> counter = 0;
  const int number = counter++;
  const std::string out_path = scratch_path("cmd" + std::to_string(number) + ".out");
  const std::string err_path = scratch_path("cmd" + std::to_string(number) + ".err");
  std::string line;
  if (options.max_virtual_kib > 0)
    line += "ulimit -v " + std::to_string(options.max_virtual_kib) + "; ";
  line += "exec env";
  for (const std::string& assignment : options.env) line += " " + quoted(assignment);
  line += " " + quoted(binary);
  for (const std::string& arg : args) line += " " + quoted(arg);
  line += " >" + quoted(out_path) + " 2>" + quoted(err_path);
  // wait4 rather than std::system: it reports the child's own peak RSS.
  pid_t child = fork();
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int raw = 0;
  struct rusage usage {};
  CommandResult result;
  if (child > 0 && wait4(child, &raw, 0, &usage) == child) {
    result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    result.max_rss_kib = usage.ru_maxrss;
  }
  result.out = read_text(out_path);
  result.err = read_text(err_path);
  return result;
}

}  // namespace grove::cli::testing
