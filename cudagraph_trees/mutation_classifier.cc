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

bool inputs_overlap(const runtime::Tensor& a, const runtime::Tensor& b) {
  if (!a.defined() || !b.defined()) return false;
  const auto* a_low = static_cast<const char*>(a.storage()->address());
  const auto* b_low = static_cast<const char*>(b.storage()->address());
  if (a_low == nullptr || b_low == nullptr) return false;
  // Storage granularity: two views of one storage count as overlapping.
  return a_low < b_low + b.storage()->nbytes() && b_low < a_low + a.storage()->nbytes();
}

// Note [Copied inputs aliasing written inputs]: an input the graph writes in
// place because its address is fixed (static, or pool-managed on the path)
// must not share memory with an input that a replay copies into a
// placeholder: eager code reads that input after the write, a replay reads
// the snapshot copied before it (say, a view of an updated buffer fed back in).
std::string written_input_aliasing_a_copy(const MutationQuery& query) {
  auto copied = [&](size_t i) {
    return !query.function.static_input(i) && !query.is_pool_managed(i);
  };
  for (size_t index : query.function.spec.mutated_input_indices) {
    if (index >= query.inputs.size() || copied(index)) continue;
    for (size_t other = 0; other < query.inputs.size(); ++other) {
      if (other == index || !copied(other)) continue;
      if (!inputs_overlap(query.inputs[index], query.inputs[other])) continue;
      return str_cat("input ", other, " shares memory with input ", index,
                     ", which the function writes in place; a replay would read a copy taken "
                     "before the write where eager code reads the written values. Pass tensors "
                     "that do not alias, or clone one");
    }
  }
  return "";
}

MutationVerdict EagerFallbackMutationClassifier::classify(const MutationQuery& query) const {
  MutationVerdict verdict;
  verdict.reason = written_input_aliasing_a_copy(query);
  if (!verdict.reason.empty()) {
    verdict.capture = false;
    return verdict;
  }
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

namespace grove::cudagraph_trees {

MutationVerdict CopyBackMutationClassifier::classify(const MutationQuery& query) const {
  // Note [Copy-back of mutated inputs].
  MutationVerdict verdict;
  verdict.reason = written_input_aliasing_a_copy(query);
  if (!verdict.reason.empty()) {
    verdict.capture = false;
    return verdict;
  }
  verdict.unsafe_inputs = unsafe_mutated_inputs(query);
  for (size_t index : verdict.unsafe_inputs) {
    if (query.in_tree_pool && query.in_tree_pool(index)) {
      // Note [Copy-back into the pool].
      verdict.capture = false;
      verdict.reason = str_cat(
          "mutated input ", index,
          " lives in the graph tree's memory pool (an output of an "
          "earlier replay that is not on the current path); the graph may write that memory, "
          "so copying the mutation back would overwrite its results. Clone the input first");
      return verdict;
    }
    for (size_t other = 0; other < query.inputs.size(); ++other) {
      if (other == index || !inputs_overlap(query.inputs[index], query.inputs[other])) continue;
      verdict.capture = false;
      verdict.reason = str_cat(
          "mutated input ", index, " shares memory with input ", other,
          "; a graph would write a copy and read a snapshot where eager code sees its own "
          "write (copy-back cannot express that). Pass tensors that do not alias, or clone one");
      return verdict;
    }
  }
  return verdict;
}

std::unique_ptr<MutationClassifier> make_mutation_classifier(MutationPolicy policy) {
  if (policy == MutationPolicy::kEager) return std::make_unique<EagerFallbackMutationClassifier>();
  return std::make_unique<CopyBackMutationClassifier>();
}

}  // namespace grove::cudagraph_trees
