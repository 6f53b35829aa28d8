// Command lines of grove's binaries (the `grove` subcommands and every
// benchmark), parsed by CLI11 from one table of flags that also renders the
// --help text:
//
//   const CommandSpec kSpec{"", "tree_overhead", "", "Tree manager cost per call.", "...",
//                           {{"--iters", "N", "timed calls (default 200)"}}};
//   ParsedFlags flags = parse_flags(kSpec, args);
//   if (flags.help_requested()) { std::fputs(help_text(kSpec).c_str(), stdout); return 0; }
//   int64_t iters = flags.integer("--iters", 200, 1);
//
// Accepted: "--flag value", "--flag=value", switches (a FlagSpec without a
// value name), "-h"/"--help", and one positional argument when the spec names
// one. Every mistake throws UsageError with one line that names the flag, what
// was expected and what was found.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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
  std::string program;  // "grove" for a subcommand; empty for a binary of its own
  std::string name;     // "run", "tree_overhead"
  // "MODEL.json", or several words for as many arguments ("MODEL.json
  // OUT.safetensors"); empty when the command takes none.
  std::string positional;
  std::string summary;      // one line, for `grove help`
  std::string description;  // a paragraph, for --help
  std::vector<FlagSpec> flags;
  // "grove run" or "tree_overhead": what the user types.
  std::string invocation() const { return program.empty() ? name : program + " " + name; }
  // The most positional arguments: the words of `positional`.
  size_t positional_count() const;
};

// The flags one command line gave. Accessors that convert a value throw
// UsageError naming the flag when the value does not convert.
class ParsedFlags {
 public:
  ParsedFlags() = default;
  ParsedFlags(std::string command, bool help_requested, std::vector<std::string> positional,
              std::map<std::string, std::string> values);

  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& flag) const { return values_.count(flag) != 0; }
  // The flag's value ("" for a switch); `fallback` when it was not given.
  std::string value(const std::string& flag, const std::string& fallback = "") const;
  // A decimal integer in [minimum, maximum].
  int64_t integer(const std::string& flag, int64_t fallback, int64_t minimum,
                  int64_t maximum = INT64_MAX) const;
  // A finite decimal number (1e400, inf, nan and trailing text are refused).
  double finite_number(const std::string& flag, double fallback) const;
  // A finite number greater than zero.
  double positive_number(const std::string& flag, double fallback) const;
  // A comma-separated list without empty items ("eager,cudagraphs").
  std::vector<std::string> list(const std::string& flag,
                                const std::vector<std::string>& fallback) const;

 private:
  std::string command_;  // prefixes error messages: "run: ..."
  bool help_requested_ = false;
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
};

// Parses `args` (without the program name) against `command`'s flags. A flag
// not in the table, a value missing or empty, a value given to a switch, a
// flag given twice, and a positional argument beyond what the command takes
// are UsageErrors.
ParsedFlags parse_flags(const CommandSpec& command, const std::vector<std::string>& args);
// The same for main()'s arguments.
ParsedFlags parse_flags(const CommandSpec& command, int argc, char** argv);

// "usage: <invocation> [POSITIONAL] [options]", the description, and one
// aligned line per flag ("  --batch N   help"), ending with -h, --help.
std::string help_text(const CommandSpec& command);

// The integer of `text` in [minimum, maximum]; UsageError naming `flag` otherwise.
int64_t parse_integer(const std::string& flag, const std::string& text, int64_t minimum,
                      int64_t maximum);

}  // namespace grove::cli
