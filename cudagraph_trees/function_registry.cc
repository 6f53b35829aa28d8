#include "cudagraph_trees/function_registry.h"

#include <algorithm>
#include <set>

namespace grove::cudagraph_trees {
namespace {

std::vector<bool> index_flags(const std::vector<size_t>& indices, const std::string& name,
                              const char* what) {
  std::set<size_t> seen;
  size_t size = 0;
  for (size_t index : indices) {
    GROVE_CHECK(seen.insert(index).second, "function '", name, "': ", what, " index ", index,
                " is listed twice; list each input once");
    GROVE_CHECK(index < (size_t{1} << 20), "function '", name, "': ", what, " index ", index,
                " is out of range");
    size = std::max(size, index + 1);
  }
  std::vector<bool> flags(size, false);
  for (size_t index : indices) flags[index] = true;
  return flags;
}

}  // namespace

const char* compilation_mode_name(CompilationMode mode) {
  switch (mode) {
    case CompilationMode::kInference:
      return "inference";
    case CompilationMode::kForward:
      return "forward";
    case CompilationMode::kBackward:
      return "backward";
  }
  return "?";
}

bool RegisteredFunction::warmed_up_for(const TensorList& inputs) const {
  for (const InputSignature& signature : warmed_signatures) {
    if (signature.size() != inputs.size()) continue;
    bool same = true;
    for (size_t i = 0; i < inputs.size() && same; ++i) same = signature[i].matches(inputs[i]);
    if (same) return true;
  }
  return false;
}

std::optional<std::string> CaptureSizes::rejects(const TensorList& inputs) const {
  if (input >= inputs.size() || !inputs[input].defined() || dim >= inputs[input].shape().size()) {
    return str_cat("input ", input, " has no dimension ", dim,
                   " (the function's capture sizes name it)");
  }
  int64_t size = inputs[input].shape()[dim];
  if (std::binary_search(sizes.begin(), sizes.end(), size)) return std::nullopt;
  std::string listed;
  for (int64_t allowed : sizes) listed += str_cat(listed.empty() ? "" : ", ", allowed);
  return str_cat("dimension ", dim, " of input ", input, " is ", size,
                 ", not one of the capture sizes [", listed, "]");
}

std::string RegisteredFunction::describe() const {
  return str_cat("function ", id.value, " '", spec.name, "' (", compilation_mode_name(spec.mode),
                 ")");
}

FunctionId FunctionRegistry::add(FunctionSpec spec) {
  GROVE_CHECK(!spec.name.empty(),
              "register_function: the function spec has no name; give it one "
              "for messages (e.g. '<model>:forward')");
  GROVE_CHECK(static_cast<bool>(spec.body), "register_function('", spec.name,
              "'): the spec has no body to run");
  if (spec.capture_sizes) {
    const std::vector<int64_t>& sizes = spec.capture_sizes->sizes;
    GROVE_CHECK(!sizes.empty(), "register_function('", spec.name,
                "'): capture_sizes lists no size; list the sizes to record, or leave it unset");
    for (size_t i = 0; i < sizes.size(); ++i) {
      GROVE_CHECK(sizes[i] >= 1 && (i == 0 || sizes[i] > sizes[i - 1]), "register_function('",
                  spec.name, "'): capture_sizes must be positive and increasing; entry ", i, " is ",
                  sizes[i]);
    }
  }
  RegisteredFunction function;
  function.id = FunctionId{static_cast<uint32_t>(functions_.size())};
  function.is_static = index_flags(spec.static_input_indices, spec.name, "static input");
  function.is_mutated = index_flags(spec.mutated_input_indices, spec.name, "mutated input");
  function.spec = std::move(spec);
  functions_.push_back(std::move(function));
  return functions_.back().id;
}

}  // namespace grove::cudagraph_trees
