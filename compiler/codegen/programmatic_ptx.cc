#include "compiler/codegen/programmatic_ptx.h"

#include <cstdlib>
#include <sstream>

#include "runtime/error.h"

namespace grove::compiler::codegen {
namespace {

// Whether `line` (without leading blanks) is an instruction, not a directive,
// a declaration, a brace, a label or a comment.
bool is_instruction(const std::string& line) {
  const size_t first = line.find_first_not_of(" \t");
  if (first == std::string::npos) return false;
  const char c = line[first];
  if (c == '.' || c == '{' || c == '}' || c == '/' || c == ')' || c == '(') return false;
  const size_t end = line.find_last_not_of(" \t");
  return line[end] != ':';  // a label
}

}  // namespace

std::string programmatic_ptx(const std::string& ptx) {
  std::istringstream in(ptx);
  std::ostringstream out;
  std::string line;
  bool version_seen = false, target_seen = false;
  int entries = 0;
  bool waiting_for_body = false, in_body = false;
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(" \t");
    const std::string trimmed = first == std::string::npos ? "" : line.substr(first);
    if (!version_seen && trimmed.rfind(".version ", 0) == 0) {
      version_seen = true;
      const double version = std::strtod(trimmed.c_str() + 9, nullptr);
      out << (version < 7.8 ? std::string(".version 7.8") : line) << "\n";
      continue;
    }
    if (!target_seen && trimmed.rfind(".target sm_", 0) == 0) {
      target_seen = true;
      const int sm = std::atoi(trimmed.c_str() + 11);
      out << (sm < 90 ? std::string(".target sm_90") : line) << "\n";
      continue;
    }
    if (trimmed.find(".entry ") != std::string::npos) {
      ++entries;
      waiting_for_body = true;
    } else if (waiting_for_body && trimmed.rfind("{", 0) == 0) {
      waiting_for_body = false;
      in_body = true;
    } else if (in_body && is_instruction(line)) {
      out << "\tgriddepcontrol.wait;\n";
      in_body = false;
    }
    out << line << "\n";
  }
  GROVE_CHECK(version_seen && target_seen && entries > 0 && !in_body && !waiting_for_body,
              "codegen: the programmatic form of a kernel's PTX needs a .version, a .target and "
              "entries with instructions (a grove bug; GROVE_PROGRAMMATIC_GENERATED=0 avoids it)");
  return out.str();
}

bool programmatic_generated_enabled() {
  const char* value = std::getenv("GROVE_PROGRAMMATIC_GENERATED");
  return value != nullptr && std::string(value) == "1";
}

}  // namespace grove::compiler::codegen
