// Finding files the `grove` command reads, wherever it is started from: the
// current directory, the directory `bazel run` was invoked in
// (BUILD_WORKING_DIRECTORY), or the binary's runfiles (the benchmark models).
#pragma once

#include <string>

namespace grove::cli {

// Remembers argv[0], to find the runfiles next to the binary.
void set_program_path(const std::string& argv0);

// `path` if it exists as given; a relative path is also tried under
// BUILD_WORKING_DIRECTORY and then in the runfiles. Returns `path` unchanged
// when none exists (the caller's open reports it).
std::string resolve_input_path(const std::string& path);

}  // namespace grove::cli
