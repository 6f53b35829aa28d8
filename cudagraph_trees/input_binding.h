// InputBinding is how one recorded node receives its inputs. At record time
// each input is classified:
//   static  - a param or buffer (the function says so): never copied, its
//             address is baked into the graph and checked before replay;
//   managed - an output of an earlier node on the current path (its storage
//             lives in the tree's pool): never copied, address checked;
//   copied  - anything else: copied before every replay into a placeholder
//             in the pool that has the input's exact layout.
// Placeholders cover only the span of memory the input's strides reach, so a
// stride-0 (expanded) input copies just its distinct elements.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "cudagraph_trees/function_registry.h"
#include "cudagraph_trees/tensor_meta.h"
#include "runtime/backend.h"
#include "runtime/caching_allocator.h"

namespace grove::cudagraph_trees {

enum class InputKind : uint8_t { kStatic, kManaged, kCopied };
const char* input_kind_name(InputKind kind);

// Why a recorded node cannot be replayed for the inputs at hand, in the order
// the checks run.
enum class InvariantStatus : uint8_t {
  kOk,
  kInputCountChanged,
  kManagedInputMoved,
  kExpectedDeadOutputAlive,
  kStaticInputMoved,
  kCopiedInputChanged,
};
const char* invariant_status_text(InvariantStatus status);

struct CheckedInput {
  uint32_t index = 0;
  const void* storage_address = nullptr;  // the storage's base at record time
  int64_t offset = 0;                     // the tensor's element offset at record time

  // Inline on purpose (Note [Replay fast path]): two loads and two compares.
  bool matches(const runtime::Tensor& tensor) const {
    const runtime::StoragePtr& storage = tensor.storage();
    return storage != nullptr && storage->address() == storage_address &&
           tensor.offset() == offset;
  }
  const void* address() const { return storage_address; }
};

struct CopiedInput {
  uint32_t index = 0;
  TensorMeta meta;
  int64_t span_low_bytes = 0;  // where the span starts, relative to element 0
  size_t span_bytes = 0;
  void* placeholder = nullptr;  // start of the placeholder's span in the pool
};

class InputBinding {
 public:
  struct Request {
    const TensorList& inputs;
    const RegisteredFunction& function;
    // Storage addresses of every output recorded on the current path, dead or alive.
    const std::unordered_set<const void*>& path_output_addresses;
    // Managed inputs demoted to copies under this (parent, function).
    const std::set<size_t>& demoted;
    runtime::CachingAllocator& allocator;  // the caller routes it to the tree's pool
    runtime::StreamHandle stream;          // placeholders are allocated and filled here
  };

  InputBinding() = default;
  // Classifies the inputs, allocates and fills placeholders, and appends to
  // `bound_inputs` what the body must be called with (placeholders in place
  // of copied inputs).
  static InputBinding bind(const Request& request, TensorList& bound_inputs);

  // Replay-path checks; each is a few comparisons per input.
  bool count_matches(const TensorList& inputs) const { return inputs.size() == kinds_.size(); }
  bool managed_addresses_match(const TensorList& inputs) const {
    for (const CheckedInput& checked : managed_) {
      if (!checked.matches(inputs[checked.index])) return false;
    }
    return true;
  }
  bool static_addresses_match(const TensorList& inputs) const {
    for (const CheckedInput& checked : static_) {
      if (!checked.matches(inputs[checked.index])) return false;
    }
    return true;
  }
  bool copied_layouts_match(const TensorList& inputs) const {
    for (const CopiedInput& copied : copied_) {
      if (!copied.meta.matches(inputs[copied.index])) return false;
    }
    return true;
  }
  // Enqueues one device-to-device copy per copied input on `stream`.
  void copy_inputs(const TensorList& inputs, runtime::Backend& backend,
                   runtime::StreamHandle stream) const {
    for (const CopiedInput& copied : copied_) {
      if (copied.span_bytes == 0) continue;
      const char* source =
          static_cast<const char*>(inputs[copied.index].data_ptr()) + copied.span_low_bytes;
      backend.copy_async(copied.placeholder, source, copied.span_bytes,
                         runtime::CopyKind::kDeviceToDevice, stream);
    }
  }

  // Managed inputs whose address differs from the recorded one (slow path).
  std::vector<size_t> moved_managed_inputs(const TensorList& inputs) const;
  // "input 2 (static): address changed from 0x.. to 0x.." for each mismatch (slow path).
  std::string describe_mismatches(const TensorList& inputs) const;

  const std::vector<InputKind>& kinds() const { return kinds_; }
  size_t copied_count() const { return copied_.size(); }
  size_t checked_count() const { return managed_.size() + static_.size(); }

 private:
  std::vector<InputKind> kinds_;
  std::vector<CheckedInput> managed_;
  std::vector<CheckedInput> static_;
  std::vector<CopiedInput> copied_;
};

}  // namespace grove::cudagraph_trees
