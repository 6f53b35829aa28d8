// Functions a tree manager runs. Each registration gets a dense FunctionId
// (0, 1, 2, ... per manager); forward, backward and every capturable segment
// of a model are distinct functions. The registry also keeps what the manager
// learns about each function over time: the input signatures it was warmed up
// with and, when it can never be captured, why.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "compiler/lowered_function.h"
#include "cudagraph_trees/fallback.h"
#include "cudagraph_trees/tensor_meta.h"

namespace grove::cudagraph_trees {

using compiler::TensorList;

enum class CompilationMode : uint8_t { kInference, kForward, kBackward };
const char* compilation_mode_name(CompilationMode mode);  // "inference", "forward", "backward"

struct FunctionId {
  uint32_t value = 0;
  friend bool operator==(FunctionId, FunctionId) = default;
  friend auto operator<=>(FunctionId, FunctionId) = default;
};

// The sizes of one dynamic dimension of a function that the tree records:
// dimension `dim` of input `input`. A call with any other size runs eagerly
// (BucketedFunction, shape_buckets.h, pads to the next size instead).
struct CaptureSizes {
  size_t input = 0;
  size_t dim = 0;
  std::vector<int64_t> sizes;  // increasing, positive

  // Null when the call's size is one of `sizes`, else why not (for the log).
  std::optional<std::string> rejects(const TensorList& inputs) const;
};

struct FunctionSpec {
  std::string name;  // for messages: "<model>:forward:segment0"
  CompilationMode mode = CompilationMode::kInference;
  // Inputs with persistent, fixed addresses (params, buffers): never copied.
  std::vector<size_t> static_input_indices;
  // Inputs the body writes in place.
  std::vector<size_t> mutated_input_indices;
  // Launches the work on the current stream and returns the outputs.
  compiler::Callable body;
  // Devices the body touches, when known (from the lowered function). A cpu
  // device or more than one device means the function is never captured.
  std::vector<runtime::Device> devices;

  // Controls (PyTorch's users have them too; Note [Function controls],
  // tree_manager.h):
  // Never record this function: it always runs eagerly (TreeConfig's
  // skip_functions names functions by name as well).
  bool never_capture = false;
  // Record on the first call instead of warming up first, for a body known
  // to be capture-safe (no lazy initialisation, no allocation outside the
  // pool, no host synchronisation).
  bool skip_warmup = false;
  // Only these sizes of one dynamic dimension are recorded.
  std::optional<CaptureSizes> capture_sizes;
};

struct RegisteredFunction {
  FunctionId id;
  FunctionSpec spec;
  std::vector<bool> is_static;   // indexed by input, sized to the largest static index + 1
  std::vector<bool> is_mutated;  // likewise for mutated inputs
  std::vector<InputSignature> warmed_signatures;
  // Set when the function can never be captured (cpu tensors, several devices).
  std::optional<EagerDecision> eager;
  // The "distinct input shapes" warning was given (once per function, under
  // whichever parent reached the limit first).
  bool shape_warning_given = false;

  bool static_input(size_t index) const { return index < is_static.size() && is_static[index]; }
  bool mutated_input(size_t index) const { return index < is_mutated.size() && is_mutated[index]; }
  bool has_mutated_inputs() const { return !spec.mutated_input_indices.empty(); }
  bool warmed_up_for(const TensorList& inputs) const;
  std::string describe() const;  // "function 3 'mlp:forward' (forward)"
};

class FunctionRegistry {
 public:
  // Validates the spec (name, body, unique indices) and assigns the next id.
  FunctionId add(FunctionSpec spec);
  // Throws Error when `id` was not registered with this registry.
  RegisteredFunction& at(FunctionId id) {
    GROVE_CHECK(id.value < functions_.size(), "function id ", id.value,
                " is not registered with this tree manager (", functions_.size(),
                " functions registered); register it with register_function() first");
    return functions_[id.value];
  }
  const RegisteredFunction& at(FunctionId id) const {
    return const_cast<FunctionRegistry*>(this)->at(id);
  }
  size_t size() const { return functions_.size(); }
  const std::deque<RegisteredFunction>& all() const { return functions_; }

 private:
  std::deque<RegisteredFunction> functions_;  // stable addresses
};

}  // namespace grove::cudagraph_trees
