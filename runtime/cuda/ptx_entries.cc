#include "runtime/cuda/ptx_entries.h"

#include <cctype>
#include <cstdlib>
#include <vector>

namespace grove::runtime::cuda_detail {
namespace {

// Note [One entry of a PTX module]: cuda's own kernels come as one PTX module
// per source with every instantiation in it (small_m_tiled_gemm_f32: 12
// entries, 660 KB), and cudaLibraryLoadData JITs the whole module before the
// first launch of any of them: ~0.3-0.6 s of ptxas for one tile. ptxas
// compiles each .entry on its own, so the module cut down to the declarations,
// the .func definitions and the one entry gives that entry the same machine
// code; each other entry is JITed when it is first loaded. Entries that share
// a module-scope .global variable must share one module, so such modules
// load whole. GROVE_PTX_ONE_ENTRY=0 loads every module whole (the old path).
// Tests: PtxEntries.* (tests/runtime/ptx_entries_test.cc); on cuda,
// KernelLoadingTest.EachEntryOfAModuleLoadsAloneAndMatchesTheWholeModuleBitwise.

// A top-level function definition: [begin, end) of its text, from the start
// of the line that declares it to its closing brace.
struct Definition {
  size_t begin = 0;
  size_t end = 0;
  bool is_entry = false;
  std::string_view name;
};

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.';
}

// Whether `text` at `at` is the directive `word` as a whole token.
bool token_at(std::string_view text, size_t at, std::string_view word) {
  if (text.compare(at, word.size(), word) != 0) return false;
  if (at > 0 && is_name_char(text[at - 1])) return false;
  const size_t after = at + word.size();
  return after >= text.size() || !is_name_char(text[after]);
}

struct Scan {
  std::vector<Definition> definitions;
  bool has_global_variable = false;
  bool well_formed = true;
};

// Walks the module's top level (depth 0 outside comments) and finds each
// .entry/.func definition; declarations (ending in ';') stay in place.
Scan scan(std::string_view text) {
  Scan result;
  size_t line_start = 0;
  size_t i = 0;
  int depth = 0;
  std::optional<Definition> open;  // a definition whose body has not begun or ended yet
  while (i < text.size()) {
    const char c = text[i];
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      const size_t newline = text.find('\n', i);
      i = newline == std::string_view::npos ? text.size() : newline;
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      const size_t close = text.find("*/", i + 2);
      if (close == std::string_view::npos) {
        result.well_formed = false;
        return result;
      }
      i = close + 2;
      continue;
    }
    if (c == '"') {
      const size_t close = text.find('"', i + 1);
      if (close == std::string_view::npos) {
        result.well_formed = false;
        return result;
      }
      i = close + 1;
      continue;
    }
    if (c == '\n') {
      line_start = i + 1;
      ++i;
      continue;
    }
    if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (--depth < 0) {
        result.well_formed = false;
        return result;
      }
      if (depth == 0 && open && open->end == 1) {  // end == 1: its body began
        open->end = i + 1;
        result.definitions.push_back(*open);
        open.reset();
      }
    } else if (depth == 0) {
      if (c == ';' && open) {
        open.reset();  // a prototype (.extern .func f(...);): a declaration
      } else if (c == '.' && !open) {
        const bool entry = token_at(text, i, ".entry");
        if (entry || token_at(text, i, ".func")) {
          Definition definition;
          definition.begin = line_start;
          definition.is_entry = entry;
          size_t at = i + (entry ? 6 : 5);
          while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
          if (!entry && at < text.size() && text[at] == '(') {  // .func (.reg .b32 r) name(...)
            const size_t close = text.find(')', at);
            at = close == std::string_view::npos ? text.size() : close + 1;
            while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
          }
          size_t name_end = at;
          while (name_end < text.size() && is_name_char(text[name_end])) ++name_end;
          definition.name = text.substr(at, name_end - at);
          open = definition;
          i = name_end;
          continue;
        }
        if (token_at(text, i, ".global")) {
          // Declared at module scope and not .extern: a variable entries share.
          std::string_view line = text.substr(line_start, i - line_start);
          if (line.find(".extern") == std::string_view::npos) result.has_global_variable = true;
        }
      }
    }
    if (c == '{' && depth == 1 && open && open->end == 0) open->end = 1;
    ++i;
  }
  if (depth != 0 || open) result.well_formed = false;
  return result;
}

}  // namespace

std::optional<std::string> ptx_with_only_entry(std::string_view module, std::string_view entry) {
  const Scan found = scan(module);
  if (!found.well_formed || found.has_global_variable) return std::nullopt;
  size_t entries = 0;
  bool named = false;
  for (const Definition& definition : found.definitions) {
    if (!definition.is_entry) continue;
    ++entries;
    named = named || definition.name == entry;
  }
  if (!named || entries < 2) return std::nullopt;
  std::string kept;
  kept.reserve(module.size() / entries + 4096);
  size_t from = 0;
  for (const Definition& definition : found.definitions) {
    if (!definition.is_entry || definition.name == entry) continue;
    kept.append(module.substr(from, definition.begin - from));
    from = definition.end;
  }
  kept.append(module.substr(from));
  return kept;
}

bool one_entry_per_module_enabled() {
  const char* value = std::getenv("GROVE_PTX_ONE_ENTRY");
  return value == nullptr || std::string_view(value) != "0";
}

}  // namespace grove::runtime::cuda_detail
