// The `grove` command's value parsers, beside the flag tables of
// cli/common/flags.h that each subcommand declares:
//
//   ParsedFlags args = parse_flags(run_command_spec(), arguments);
//   int64_t batch = args.has("--batch") ? parse_positive_int("--batch", args.value("--batch")) : 1;
//
// Every mistake throws UsageError with one line that names the flag, what
// was expected and what was found; main() prints it as "grove: error: ...".
#pragma once

#include <cstdint>
#include <string>

#include "cli/common/flags.h"
#include "runtime/device.h"

namespace grove::cli {

// A decimal integer in [1, max]; UsageError naming `flag` otherwise.
int64_t parse_positive_int(const std::string& flag, const std::string& text,
                           int64_t max = int64_t{1} << 31);
// "auto" (cuda when a CUDA device exists, else sim), "cuda", "sim", "cuda:N", "sim:N".
runtime::Device parse_device_choice(const std::string& text);

}  // namespace grove::cli
