// The subcommands of `grove`: their specs (flags and help, arguments.h) and
// entry points. Each entry point takes the arguments after the command name
// and returns the process exit status; errors are thrown (grove::Error,
// UsageError) and printed by main() as one line.
#pragma once

#include <string>
#include <vector>

#include "cli/arguments.h"

namespace grove::cli {

const CommandSpec& run_command_spec();
int run_command(const std::vector<std::string>& args);

const CommandSpec& demo_command_spec();
int demo_command(const std::vector<std::string>& args);

const CommandSpec& export_weights_command_spec();
int export_weights_command(const std::vector<std::string>& args);

const CommandSpec& serve_command_spec();
int serve_command(const std::vector<std::string>& args);
// `grove serve MODEL_DIR`: a language model's generate and completions routes.
const CommandSpec& serve_llm_command_spec();
int serve_llm_command(const std::vector<std::string>& args);

const CommandSpec& generate_command_spec();
int generate_command(const std::vector<std::string>& args);

// `grove help` / `grove --help`: the commands and their one-line summaries.
std::string overview_text();

}  // namespace grove::cli
