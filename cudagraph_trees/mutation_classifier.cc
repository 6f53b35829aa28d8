#include "cudagraph_trees/mutation_classifier.h"

#include <sstream>

namespace grove::cudagraph_trees {

std::vector<size_t> unsafe_mutated_inputs(const MutationQuery& query) {
  std::vector<size_t> unsafe;
  for (size_t index : query.function.spec.mutated_input_indices) {
    if (index >= query.inputs.size()) continue;
    if (query.function.static_input(index) || query.is_pool_managed(index)) continue;
    unsafe.push_back(index);
  }
  return unsafe;
}

MutationVerdict EagerFallbackMutationClassifier::classify(const MutationQuery& query) const {
  MutationVerdict verdict;
  verdict.unsafe_inputs = unsafe_mutated_inputs(query);
  if (verdict.unsafe_inputs.empty()) return verdict;
  verdict.capture = false;
  std::ostringstream inputs;
  for (size_t i = 0; i < verdict.unsafe_inputs.size(); ++i) {
    inputs << (i ? ", " : "") << verdict.unsafe_inputs[i];
  }
  verdict.reason = str_cat(
      "mutated inputs (", verdict.unsafe_inputs.size(), " instance(s): input ", inputs.str(),
      ") are neither static nor outputs of earlier graphs on the path; a graph would write a "
      "copy, not the caller's tensor. Mark them static if their address is fixed");
  return verdict;
}

}  // namespace grove::cudagraph_trees
