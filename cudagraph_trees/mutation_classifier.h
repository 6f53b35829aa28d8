// Decides whether a function's in-place writes to its inputs can be captured
// (docs/ARCHITECTURE.md, section 4). Writes to (a) nothing, (b) static inputs, (c) pool-managed
// inputs stay correct in a graph: the graph writes the very memory the caller
// sees. A write to any other input (d) would land in the copied placeholder,
// not the caller's tensor. The decision is made once per (parent node,
// function), cached, and re-made before each new recording of a function
// that mutates inputs. The classifier is pluggable; TreeConfig::mutation_policy
// picks one of the two below.
//
// Note [Copy-back of mutated inputs]
// Under the copy-back policy a type-(d) input is still copied into its pool
// placeholder before a replay, the graph writes the placeholder, and one more
// device-to-device copy (stream-ordered after the graph) writes the
// placeholder's span back into the caller's tensor, so the caller sees the
// write at every stage: warm-up runs the body on the caller's tensors, a
// recording copies back after the replay that produces its first outputs,
// and replays copy back after the launch. This is only eager-equivalent when
// the mutated input shares no memory with another input: with aliasing, eager
// code would see its own write through the other input, the graph reads a
// snapshot. So an aliased mutated input sends (parent, function) to eager with
// the reason, at classification and again on replay (a node with copy-back
// inputs checks, per copy-back input, that no other input overlaps it:
// InvariantStatus::kMutatedInputAliased, which re-classifies).
//
// Note [Copy-back into the pool]
// Copy-back also needs the caller's tensor to be memory the graph does not
// write. A type-(d) input living in the tree's pool is a replay output of a
// node off the current path (say, the previous replay of this very root, fed
// back after a new generation began): the graph may write its outputs or
// intermediates over that block, and the copy-back would then overwrite them
// with the mutated input. Such a call goes to eager with the reason, at
// classification and on replay (one pool lookup per copy-back input, only for
// nodes that have copy-back inputs). Guarded by
// TreeCopyBack.MutatedInputInTheTreesPoolFallsBackWithReason.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cudagraph_trees/config.h"
#include "cudagraph_trees/function_registry.h"

namespace grove::cudagraph_trees {

struct MutationQuery {
  const RegisteredFunction& function;
  const TensorList& inputs;
  // Whether input i is an output of a node on the current path (pool memory).
  std::function<bool(size_t)> is_pool_managed;
  // Whether input i lies anywhere in the tree's pool, on the path or not
  // (Note [Copy-back into the pool]); unset: never.
  std::function<bool(size_t)> in_tree_pool = {};
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

// The default: type-(d) mutated inputs are captured and copied back after each
// replay, unless one shares memory with another input (then eager, with why).
class CopyBackMutationClassifier final : public MutationClassifier {
 public:
  MutationVerdict classify(const MutationQuery& query) const override;
};

std::unique_ptr<MutationClassifier> make_mutation_classifier(MutationPolicy policy);

// Type-(d) mutated inputs of a call: mutated, not static, not pool-managed.
std::vector<size_t> unsafe_mutated_inputs(const MutationQuery& query);
// Whether the memory inputs[a] can reach overlaps the memory inputs[b] can reach.
bool inputs_overlap(const runtime::Tensor& a, const runtime::Tensor& b);

}  // namespace grove::cudagraph_trees
