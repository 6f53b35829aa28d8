// TreeConfig is everything a tree manager can be told: strictness, the limits
// on re-recording, and the dynamic-shape warning. Defaults follow PyTorch's
// CUDA Graph Trees; each field can be overridden by an environment variable
// (documented in README.md) through TreeConfig::from_environment().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace grove::cudagraph_trees {

// What to do with a function that writes an input the tree copies (type (d),
// mutation_classifier.h): copy the placeholder back into the caller's tensor after
// each replay, or run the function eagerly.
enum class MutationPolicy : uint8_t { kCopyBack, kEager };
const char* mutation_policy_name(MutationPolicy policy);  // "copy-back", "eager"

// What to do with a pool-managed input whose address keeps changing under one
// parent (TreeConfig::managed_input_move_limit): copy it into the graph from
// then on, or run the function eagerly under that parent.
enum class ManagedInputPolicy : uint8_t { kCopy, kEager };
const char* managed_input_policy_name(ManagedInputPolicy policy);  // "copy", "eager"

struct TreeConfig {
  // GROVE_CUDAGRAPHS_STRICT=1: a function that would fall back to eager
  // execution throws NotCapturedError instead.
  bool strict = false;
  // GROVE_CUDAGRAPHS_RERECORD_LIMIT: re-recordings of one function under one
  // parent (parameter-address churn and new input shapes not counted) before
  // it runs eagerly there.
  int rerecord_limit = 128;
  // GROVE_CUDAGRAPHS_MANAGED_INPUT_LIMIT: changes of one pool-managed input's
  // address under one parent before that input is copied instead of checked.
  int managed_input_move_limit = 5;
  // GROVE_CUDAGRAPHS_MANAGED_INPUT_POLICY=copy|eager: what happens once that
  // limit is reached.
  ManagedInputPolicy managed_input_policy = ManagedInputPolicy::kCopy;
  // GROVE_CUDAGRAPHS_SKIP="name,prefix*": functions never captured (they run
  // eagerly, also in strict mode), by exact name or by a prefix ending in
  // '*'; FunctionSpec::never_capture marks one in its spec.
  std::vector<std::string> skip_functions;
  // GROVE_CUDAGRAPHS_INITIAL_POOL_BYTES: device memory reserved for the
  // tree's private pool when the manager is made (0: grown on demand), so
  // that recordings do not each ask the device for new segments.
  size_t initial_pool_bytes = 0;
  // GROVE_CUDAGRAPHS_SHAPE_WARN_LIMIT: recordings of one function under one
  // parent for distinct input shapes before a warning suggests padding
  // (given once per function).
  int shape_warn_limit = 8;
  // GROVE_CUDAGRAPHS_MUTATION_POLICY=copy-back|eager: how type-(d) input
  // mutation is handled (Note [Copy-back of mutated inputs], mutation_classifier.h).
  MutationPolicy mutation_policy = MutationPolicy::kCopyBack;
  // GROVE_CUDAGRAPHS_ZERO_COPY=1/0: patch the pointer arguments of grove's
  // kernels in a recorded graph instead of copying a copied input whose
  // address changed, where that is safe (Note [Zero-copy inputs], zero_copy.h).
  bool zero_copy_inputs = true;
  // GROVE_CUDAGRAPHS_CLONE_KEPT_OUTPUTS=1/0: before a replay rewrites outputs
  // of the previous replay that the caller still holds, clone them so that
  // kept outputs keep their values (off: accessing one throws; Note [Kept
  // replay outputs], output_tracking.h).
  bool clone_kept_outputs = false;
  // GROVE_CUDAGRAPHS_GRAPH_INPUT_COPIES=1/0: a copied input that is not
  // zero-copied is copied by a kernel at the head of the recorded graph
  // instead of a separate copy before each launch (Note [Input copies inside
  // the graph], input_binding.h). On by default: on an H200 it brought the
  // cudagraphs call of mlp16x512 b=1 from about 5.6 us over the bare replay
  // to about 0.6 us (benchmarks/RESULTS.md, backend_latency).
  bool graph_input_copies = true;
  // GROVE_CUDAGRAPHS_MIN_SEGMENT_KERNELS: the "cudagraphs" backend runs a
  // segment launching fewer kernels (generated + library) than this eagerly.
  int min_segment_kernels = 1;
  // GROVE_CUDAGRAPHS_BATCH_BUCKETS="1,2,4,8": default batch sizes for
  // BucketedFunction (shape_buckets.h); empty: no buckets.
  std::vector<int64_t> batch_buckets;

  // The defaults overridden by the environment; throws ConfigError naming the
  // variable for a malformed value.
  static TreeConfig from_environment();
  // Throws ConfigError when a field is out of range.
  void validate() const;
  // The skip_functions entry that names `function_name`, or null.
  const std::string* skip_entry_for(const std::string& function_name) const;
};

// A function would not be captured and TreeConfig::strict forbids the eager
// fallback. The message names the function and the reason.
class NotCapturedError : public Error {
 public:
  using Error::Error;
};

}  // namespace grove::cudagraph_trees
