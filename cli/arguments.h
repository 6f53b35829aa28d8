// Command-line parsing for the `grove` command: each subcommand declares its
// flags (FlagSpec), parse_flags() checks the arguments against them, and
// help_text() renders the same specs as the subcommand's --help.
//
//   ParsedArgs args = parse_flags("run", kRunFlags, arguments);
//   int64_t batch = args.has("--batch") ? parse_positive_int("--batch", args.value("--batch")) : 1;
//
// Every mistake throws UsageError with one line that names the flag, what
// was expected and what was found; main() prints it as "grove: error: ...".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/error.h"

namespace grove::cli {

// A malformed command line (unknown command or flag, missing or bad value).
class UsageError : public Error {
 public:
  using Error::Error;
};

struct FlagSpec {
  std::string name;        // "--batch"
  std::string value_name;  // "N"; empty for a switch such as "--train"
  std::string help;        // one line
  bool takes_value() const { return !value_name.empty(); }
};

struct CommandSpec {
  std::string name;         // "run"
  std::string positional;   // "MODEL.json"; empty when the command takes none
  std::string summary;      // one line, for `grove help`
  std::string description;  // a paragraph, for `grove <command> --help`
  std::vector<FlagSpec> flags;
};

class ParsedArgs {
 public:
  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& flag) const { return values_.count(flag) != 0; }
  // The flag's value; `fallback` when it was not given.
  std::string value(const std::string& flag, const std::string& fallback = "") const;

 private:
  friend ParsedArgs parse_flags(const CommandSpec& command, const std::vector<std::string>& args);
  bool help_requested_ = false;
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;  // switches map to ""
};

// Accepts "--flag value", "--flag=value", switches, "-h"/"--help", and at most
// one positional argument when the command declares one. A repeated flag is
// an error.
ParsedArgs parse_flags(const CommandSpec& command, const std::vector<std::string>& args);

// `grove <command> --help`.
std::string help_text(const CommandSpec& command);

// A decimal integer in [1, max]; UsageError naming `flag` otherwise.
int64_t parse_positive_int(const std::string& flag, const std::string& text,
                           int64_t max = int64_t{1} << 31);
// "auto" (cuda when a CUDA device exists, else sim), "cuda", "sim", "cuda:N", "sim:N".
runtime::Device parse_device_choice(const std::string& text);

}  // namespace grove::cli
