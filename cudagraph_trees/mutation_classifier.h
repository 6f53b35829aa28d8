// Decides whether a function's in-place writes to its inputs can be captured
// (DESIGN §4.6). Writes to (a) nothing, (b) static inputs, (c) pool-managed
// inputs stay correct in a graph: the graph writes the very memory the caller
// sees. A write to any other input (d) would land in the copied placeholder,
// not the caller's tensor. The decision is made once per (parent node,
// function), cached, and re-made before each new recording of a function
// that mutates inputs. The classifier is pluggable so that a policy that
// handles (d) (copy-back after replay) can replace the default.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cudagraph_trees/function_registry.h"

namespace grove::cudagraph_trees {

struct MutationQuery {
  const RegisteredFunction& function;
  const TensorList& inputs;
  // Whether input i is an output of a node on the current path (pool memory).
  std::function<bool(size_t)> is_pool_managed;
};

struct MutationVerdict {
  bool capture = true;
  std::vector<size_t> unsafe_inputs;  // type-(d) mutated inputs
  std::string reason;                 // when !capture
};

class MutationClassifier {
 public:
  virtual ~MutationClassifier() = default;
  virtual MutationVerdict classify(const MutationQuery& query) const = 0;
};

// The default: type-(d) mutation runs the function eagerly, with a reason.
class EagerFallbackMutationClassifier final : public MutationClassifier {
 public:
  MutationVerdict classify(const MutationQuery& query) const override;
};

// Type-(d) mutated inputs of a call: mutated, not static, not pool-managed.
std::vector<size_t> unsafe_mutated_inputs(const MutationQuery& query);

}  // namespace grove::cudagraph_trees
