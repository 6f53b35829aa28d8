// How a recording classifies each input of a function, once, at record time:
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
#include <unordered_set>
#include <vector>

#include "cudagraph_trees/function_registry.h"
#include "cudagraph_trees/tensor_meta.h"
#include "runtime/caching_allocator.h"
#include "runtime/platform.h"

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
  kCheckedInputLayoutChanged,
  kMutatedInputAliased,
};
const char* invariant_status_text(InvariantStatus status);

// A static or managed input: replayed only at the address it was recorded at,
// and only with the layout it was recorded with.
//
// Note [Layouts of checked inputs]
// The graph bakes in a static or managed input's address and also the shape,
// strides and dtype its kernels were launched for. A call that passes another
// view of the same memory (a longer slice, a transpose) has the same address
// but must not replay: it warms up and records a new child. The replay check
// compares the layout after the address, two small-vector compares and one
// dtype compare per checked input (Note [Replay fast path]). Tests:
// TreeInvariants.StaticInputWithANewShapeAtTheSameAddressRecordsANewGraph,
// ManagedInputTransposedAtTheSameAddressRecordsANewGraph.
struct CheckedInput {
  uint32_t index = 0;
  const void* storage_address = nullptr;  // the storage's base at record time
  int64_t offset = 0;                     // the tensor's element offset at record time
  runtime::DType dtype = runtime::DType::kF32;
  runtime::Shape shape;
  runtime::Shape strides;

  static CheckedInput of(uint32_t index, const runtime::Tensor& tensor) {
    return CheckedInput{index,           tensor.storage()->address(),
                        tensor.offset(), tensor.dtype(),
                        tensor.shape(),  tensor.strides()};
  }
  // Inline on purpose (Note [Replay fast path]): two loads and two compares.
  bool matches(const runtime::Tensor& tensor) const {
    const runtime::StoragePtr& storage = tensor.storage();
    return storage != nullptr && storage->address() == storage_address && tensor.offset() == offset;
  }
  // Note [Layouts of checked inputs]; called after matches() held.
  bool layout_matches(const runtime::Tensor& tensor) const {
    return tensor.dtype() == dtype && tensor.shape() == shape && tensor.strides() == strides;
  }
  const void* address() const { return storage_address; }
};

struct CopiedInput {
  uint32_t index = 0;
  TensorMeta meta;
  int64_t span_low_bytes = 0;  // where the span starts, relative to element 0
  size_t span_bytes = 0;
  void* placeholder = nullptr;  // start of the placeholder's span in the pool
  bool copy_back = false;       // the function writes it (type-(d) mutation)
  int32_t zero_copy = -1;       // its ZeroCopyPlan input, or -1
  int32_t graph_copy = -1;      // its head copy kernel (GraphCopies), or -1
  // Set by each replay: where the copy-back goes (null: the graph wrote the
  // caller's memory directly, or no copy-back).
  void* copy_back_to = nullptr;

  // The first byte of this input's span in `input` (the caller's tensor).
  char* source_in(const runtime::Tensor& input) const {
    return static_cast<char*>(input.data_ptr()) + span_low_bytes;
  }
};

struct ClassifiedInputs {
  std::vector<InputKind> kinds;  // per input
  std::vector<CheckedInput> managed;
  std::vector<CheckedInput> statics;
  std::vector<CopiedInput> copied;
  std::vector<uint32_t> copy_back;      // positions in `copied` of the inputs the function writes
  std::vector<uint32_t> written;        // indices of inputs the function writes
  std::vector<uint32_t> written_fixed;  // the static or managed ones among them
};

struct ClassificationRequest {
  const TensorList& inputs;
  const RegisteredFunction& function;
  // Storage addresses of every output recorded on the current path, dead or alive.
  const std::unordered_set<const void*>& path_output_addresses;
  // Managed inputs demoted to copies under this (parent, function).
  const std::set<size_t>& demoted;
  runtime::CachingAllocator& allocator;  // the caller routes it to the tree's pool
  runtime::StreamHandle stream;          // placeholders are allocated and filled here
};

// Classifies the inputs, allocates each copied input's placeholder and fills
// it on `request.stream`, and appends to `bound_inputs` what the body must be
// called with (placeholders in place of copied inputs).
ClassifiedInputs classify_inputs(const ClassificationRequest& request, TensorList& bound_inputs);

}  // namespace grove::cudagraph_trees
