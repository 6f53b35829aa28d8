// Command-line flags, the device choice and main() for grove's benchmarks, on
// the flag tables of cli/common/flags.h (CLI11):
//
//   const std::vector<FlagSpec> kFlags = {kDeviceFlag, {"--iters", "N", "timed calls (default
//   200)"}, kJsonFlag};
//   int run(int argc, char** argv) {
//     std::optional<FlagValues> parsed = parse_flags_or_help("my_bench", "...", argc, argv,
//     kFlags); if (!parsed) return 0;  // --help was printed const FlagValues& flags = *parsed;
//     runtime::Device device = resolve_device(flags.text("--device", "auto"));
//     int64_t iters = flags.integer("--iters", 200, 1);
//     ...
//   }
//   int main(int argc, char** argv) { return benchmark_main("my_bench", run, argc, argv); }
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/common/flags.h"
#include "runtime/device.h"

namespace grove::benchmarks {

using cli::FlagSpec;
using cli::UsageError;

// The values given on the command line, by flag name ("--iters").
class FlagValues : public cli::ParsedFlags {
 public:
  explicit FlagValues(cli::ParsedFlags parsed) : ParsedFlags(std::move(parsed)) {}
  // Values given directly, e.g. to check one item of a list with integer().
  FlagValues(std::string program, std::map<std::string, std::string> values)
      : ParsedFlags(std::move(program), false, {}, std::move(values)) {}
  std::string text(const std::string& flag, const std::string& fallback) const {
    return value(flag, fallback);
  }
};

// Parses main()'s arguments against `known` (and -h/--help); throws
// UsageError for an unknown flag, a missing value or a flag given twice.
FlagValues parse_flags(const std::string& program, int argc, char** argv,
                       const std::vector<FlagSpec>& known);
// The --help text: "usage: <program> [options]", the summary, one line per flag.
std::string usage_text(const std::string& program, const std::string& summary,
                       const std::vector<FlagSpec>& known);
// parse_flags(); for -h/--help, usage_text() on stdout and nullopt (run() then
// returns 0).
std::optional<FlagValues> parse_flags_or_help(const std::string& program,
                                              const std::string& summary, int argc, char** argv,
                                              const std::vector<FlagSpec>& known);

// The flags most benchmarks take, worded once. Inline: a benchmark's flag
// table at namespace scope is initialized after them.
inline const FlagSpec kDeviceFlag = {"--device", "auto|cuda|sim",
                                     "where to run (auto: cuda when present, else sim)"};
inline const FlagSpec kJsonFlag = {"--json", "FILE", "write the results as JSON"};

// "auto": cuda:0 when a CUDA device exists, else sim:0; otherwise a device
// name ("cuda", "sim", "cuda:1"). Throws DeviceError when that device is
// absent or cannot run graphs (cpu).
runtime::Device resolve_device(const std::string& flag);

// A benchmark's main(): runs `run`, and turns a UsageError into exit 2 and any
// other exception into one line "<program>: <message>" and exit 1.
int benchmark_main(const char* program, int (*run)(int, char**), int argc, char** argv);

}  // namespace grove::benchmarks
