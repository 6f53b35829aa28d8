// Command-line flags, the device choice and main() for grove's benchmarks:
//
//   const std::vector<FlagSpec> kFlags = {{"--iters", "N", "timed calls (default 200)"}};
//   int run(int argc, char** argv) {
//     FlagValues flags = parse_flags("my_bench", argc, argv, kFlags);
//     runtime::Device device = resolve_device(flags.text("--device", "auto"));
//     int64_t iters = flags.integer("--iters", 200, 1);
//     ...
//   }
//   int main(int argc, char** argv) { return benchmark_main("my_bench", run, argc, argv); }
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/error.h"

namespace grove::benchmarks {

// A bad command line: unknown flag, missing or malformed value.
class UsageError : public Error {
 public:
  using Error::Error;
};

struct FlagSpec {
  std::string name;   // "--iters"
  std::string value;  // "N" (shown in the usage text)
  std::string help;
};

// The values given on the command line, by flag name ("--iters").
class FlagValues {
 public:
  FlagValues(std::string program, std::map<std::string, std::string> values)
      : program_(std::move(program)), values_(std::move(values)) {}

  bool help_requested() const { return values_.count("--help") > 0; }
  std::string text(const std::string& name, const std::string& fallback) const;
  // Throws UsageError naming the flag when the value is not an integer in
  // [minimum, maximum].
  int64_t integer(const std::string& name, int64_t fallback, int64_t minimum,
                  int64_t maximum = INT64_MAX) const;
  // Throws UsageError naming the flag when the value is not a positive number.
  double positive_number(const std::string& name, double fallback) const;
  // A comma-separated list ("eager,cudagraphs").
  std::vector<std::string> list(const std::string& name,
                                const std::vector<std::string>& fallback) const;

 private:
  std::string program_;
  std::map<std::string, std::string> values_;
};

// Parses "--flag value" pairs (and "--help"); throws UsageError for a flag
// not in `known` or without a value, listing the known flags.
FlagValues parse_flags(const std::string& program, int argc, char** argv,
                       const std::vector<FlagSpec>& known);
// "usage: <program> [--flag VALUE] ...", one line per flag with its help.
std::string usage_text(const std::string& program, const std::string& summary,
                       const std::vector<FlagSpec>& known);

// "auto": cuda:0 when a CUDA device exists, else sim:0; otherwise a device
// name ("cuda", "sim", "cuda:1"). Throws DeviceError when that device is
// absent or cannot run graphs (cpu).
runtime::Device resolve_device(const std::string& flag);

// A benchmark's main(): runs `run`, and turns a UsageError into exit 2 and any
// other grove::Error into one line "<program>: <message>" and exit 1.
int benchmark_main(const char* program, int (*run)(int, char**), int argc, char** argv);

}  // namespace grove::benchmarks
