// Runs a `grove` binary from the test's runfiles as a child process and
// captures its exit status, stdout and stderr.
#pragma once

#include <string>
#include <vector>

namespace grove::cli::testing {

struct CommandResult {
  int status = -1;  // exit status; -1 when the process did not exit normally
  std::string out;
  std::string err;
  long max_rss_kib = 0;  // the child's peak resident memory (getrusage's ru_maxrss)
  // The stderr lines (without their newlines).
  std::vector<std::string> err_lines() const;
};

struct CommandOptions {
  // "NAME=value" assignments added to the child's environment.
  std::vector<std::string> env;
  // The child's address-space limit (ulimit -v), in KiB; 0 leaves it unlimited.
  long max_virtual_kib = 0;
};

// `binary` is a runfiles path such as "cli/grove". Safe to call from several threads at once.
CommandResult run_command(const std::string& binary, const std::vector<std::string>& args,
                          const CommandOptions& options = {});

// A writable scratch path for this test (under TEST_TMPDIR).
std::string scratch_path(const std::string& name);
std::string read_text(const std::string& path);
void write_text(const std::string& path, const std::string& text);

}  // namespace grove::cli::testing
