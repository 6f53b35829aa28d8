#include "cli/paths.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace grove::cli {
namespace {

std::string& program_path() {
  static std::string path;
  return path;
}

}  // namespace

void set_program_path(const std::string& argv0) { program_path() = argv0; }

std::string resolve_input_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (path.empty() || fs::exists(path, error) || fs::path(path).is_absolute()) return path;
  std::vector<fs::path> bases;
  if (const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY")) bases.emplace_back(cwd);
  std::vector<fs::path> runfiles;
  if (const char* dir = std::getenv("RUNFILES_DIR")) runfiles.emplace_back(dir);
  if (!program_path().empty()) runfiles.emplace_back(program_path() + ".runfiles");
  // The workspace is named "grove"; "__main__" is Bazel's name for an unnamed one.
  for (const fs::path& dir : runfiles) {
    bases.push_back(dir / "grove");
    bases.push_back(dir / "__main__");
  }
  for (const fs::path& base : bases) {
    fs::path candidate = base / path;
    if (fs::exists(candidate, error)) return candidate.string();
  }
  return path;
}

}  // namespace grove::cli
