// InputBinding is how one recorded node receives its inputs. At record time
// each input is classified:
//   static  - a param or buffer (the function says so): never copied, its
//             address is baked into the graph and checked before replay;
//   managed - an output of an earlier node on the current path (its storage
//             lives in the tree's pool): never copied, address checked;
//   copied  - anything else: copied before every replay into a placeholder
//             in the pool that has the input's exact layout.
// Placeholders cover only the span of memory the input's strides reach, so a
// stride-0 (expanded) input copies just its distinct elements. A copied input
// the function writes is copied back after each replay (Note [Copy-back of
// mutated inputs]); a copied input whose readers are all grove kernels may be
// bound by patching the graph instead of copying (Note [Zero-copy inputs]).
//
// Note [Input copies inside the graph]
// A copied input that is not zero-copied is copied by a span copy kernel
// (runtime/span_copy_kernel.h) that grove adds at the head of the recorded
// graph, before every captured node, instead of by a device-to-device copy
// enqueued before each launch: a replay whose inputs kept their addresses
// then enqueues nothing but the graph launch, and the copy costs the GPU one
// more node of the graph instead of a separate operation on the stream. The
// kernel reads the caller's memory when the graph runs, which is stream
// order after the call, exactly like the separate copy. Because it runs
// before every captured node, the graph's own writes (pool intermediates,
// written inputs) cannot reach its source first, so the zero-copy rules 4-6
// do not apply: any source address is fine (the kernel falls back to byte
// copies when a pointer is not 16-byte aligned). When the input moves, the
// replay re-points the kernel's source slot (one kernel-node update), as a
// zero-copy patch does. The head copies of one graph run concurrently, so a
// source inside another placeholder would race with that placeholder's copy:
// the staged path (Note [Sources inside placeholders]) then disarms every
// head copy (bytes slot 0) and copies outside the graph; the next ordinary
// replay re-arms them.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cudagraph_trees/function_registry.h"
#include "cudagraph_trees/stats.h"
#include "cudagraph_trees/tensor_meta.h"
#include "cudagraph_trees/zero_copy.h"
#include "runtime/backend.h"
#include "runtime/caching_allocator.h"
#include "runtime/span_copy_kernel.h"

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
  kMutatedInputAliased,
};
const char* invariant_status_text(InvariantStatus status);

struct CheckedInput {
  uint32_t index = 0;
  const void* storage_address = nullptr;  // the storage's base at record time
  int64_t offset = 0;                     // the tensor's element offset at record time

  // Inline on purpose (Note [Replay fast path]): two loads and two compares.
  bool matches(const runtime::Tensor& tensor) const {
    const runtime::StoragePtr& storage = tensor.storage();
    return storage != nullptr && storage->address() == storage_address && tensor.offset() == offset;
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
  int32_t graph_copy = -1;      // its head copy kernel (graph_copies_), or -1
  // Set by each replay: where the copy-back goes (null: the graph wrote the
  // caller's memory directly, or no copy-back).
  void* copy_back_to = nullptr;
};

// What a replay needs besides the inputs.
struct ReplayContext {
  runtime::Backend& backend;
  runtime::StreamHandle stream;
  runtime::GraphRecording* graph;  // null for a kernel-free function
  TreeCounters& counters;
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
    runtime::PoolId pool;                  // the tree's pool (Note [Copy-back into the pool])
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
  // Note [Copy-back of mutated inputs]: no copy-back input shares memory with
  // another input or lies in the tree's pool (Note [Copy-back into the
  // pool]), and (Note [Copied inputs aliasing written inputs]) no copied
  // input shares memory with a static or managed input the function writes;
  // a few comparisons per such input (and one pool lookup per copy-back
  // input), none without them.
  bool copy_back_inputs_unaliased(const TensorList& inputs) const {
    if (copy_back_.empty() && written_fixed_.empty()) [[likely]]
      return true;
    return copy_back_unaliased_slow(inputs);
  }
  // Binds the copied inputs for one replay: per input one device-to-device copy
  // into its placeholder, or (zero-copy) nothing when its address is unchanged
  // and a patch of the graph's pointer slots when it moved. Remembers where the
  // copy-backs go, so the caller may drop the inputs before finish_replay().
  void prepare_replay(const TensorList& inputs, ReplayContext& context) {
    // Note [Sources inside placeholders]: one range test per copied input.
    for (const CopiedInput& copied : copied_) {
      if (copied.span_bytes == 0) continue;
      auto start = reinterpret_cast<uintptr_t>(inputs[copied.index].data_ptr()) +
                   static_cast<uintptr_t>(copied.span_low_bytes);
      if (start < placeholders_high_ && placeholders_low_ < start + copied.span_bytes) [[unlikely]] {
        if (prepare_replay_staged(inputs, context)) return;
        break;
      }
    }
    for (CopiedInput& copied : copied_) {
      if (copied.span_bytes == 0) continue;
      char* source = static_cast<char*>(inputs[copied.index].data_ptr()) + copied.span_low_bytes;
      if (copied.zero_copy >= 0 && bind_without_copy(copied, source, inputs, context)) {
        copied.copy_back_to = nullptr;
        continue;
      }
      if (copied.graph_copy >= 0) [[likely]] {
        copy_in_graph(copied, source, context);
      } else {
        context.backend.copy_async(copied.placeholder, source, copied.span_bytes,
                                   runtime::CopyKind::kDeviceToDevice, context.stream);
      }
      ++context.counters.input_copies;
      copied.copy_back_to = copied.copy_back ? source : nullptr;
    }
  }
  // After the graph launch: copies mutated placeholders back to the caller.
  void finish_replay(ReplayContext& context) {
    for (uint32_t position : copy_back_) {
      CopiedInput& copied = copied_[position];
      if (copied.copy_back_to == nullptr) continue;
      context.backend.copy_async(copied.copy_back_to, copied.placeholder, copied.span_bytes,
                                 runtime::CopyKind::kDeviceToDevice, context.stream);
      ++context.counters.input_copy_backs;
    }
  }
  // Right after recording: copies the placeholders of mutated inputs back into
  // `inputs` (the caller's tensors) on `stream`.
  void copy_back_after_recording(const TensorList& inputs, runtime::Backend& backend,
                                 runtime::StreamHandle stream, TreeCounters& counters) const;
  // Right after capture: decides which copied inputs can be bound by
  // patching `graph` (Note [Zero-copy inputs], rules 1-3). Returns why the
  // graph is ineligible as a whole, or "".
  std::string plan_zero_copy(const runtime::GraphRecording& graph,
                             const RegisteredFunction& function,
                             const runtime::CachingAllocator& allocator, runtime::PoolId pool);
  // Between capture and instantiation, after plan_zero_copy(): adds a head
  // copy kernel to `graph` for every copied input that is neither empty nor
  // zero-copied, reading `inputs` (the recording's own call); returns how
  // many (Note [Input copies inside the graph]).
  size_t add_graph_copies(runtime::GraphRecording& graph, const TensorList& inputs);

  // Managed inputs whose address differs from the recorded one (slow path).
  std::vector<size_t> moved_managed_inputs(const TensorList& inputs) const;
  // "input 2 (static): address changed from 0x.. to 0x.." for each mismatch (slow path).
  std::string describe_mismatches(const TensorList& inputs) const;

  const std::vector<InputKind>& kinds() const { return kinds_; }
  size_t copied_count() const { return copied_.size(); }
  size_t copy_back_count() const { return copy_back_.size(); }
  size_t zero_copy_count() const { return zero_copy_.input_count(); }
  // Whether copied input `index` (an input index) is copied by a head kernel.
  bool copied_in_graph(size_t index) const;
  // The placeholder span of copied input `index` (an input index): [start, start + bytes).
  std::pair<const void*, size_t> placeholder_span(size_t index) const;
  // Whether copied input `index` (an input index) is bound by patching.
  bool zero_copied(size_t index) const;
  size_t checked_count() const { return managed_.size() + static_.size(); }

 private:
  std::vector<InputKind> kinds_;
  std::vector<CheckedInput> managed_;
  std::vector<CheckedInput> static_;
  std::vector<CopiedInput> copied_;
  std::vector<uint32_t> copy_back_;  // positions in copied_
  std::vector<uint32_t> written_;    // indices of inputs the function writes
  std::vector<uint32_t> written_fixed_;  // the static or managed ones among them
  // For the pool test of copy-back inputs; set when copy_back_ is not empty.
  const runtime::CachingAllocator* copy_back_allocator_ = nullptr;
  runtime::PoolId tree_pool_;
  ZeroCopyPlan zero_copy_;
  // A head copy kernel and its arguments as currently set in the graph.
  struct GraphCopy {
    size_t kernel_node = 0;
    runtime::KernelArgs args;
    bool armed = true;  // false: its bytes slot is 0 (staged replays)
  };
  std::vector<GraphCopy> graph_copies_;
  const runtime::CachingAllocator* allocator_ = nullptr;  // set with a non-empty plan
  runtime::PoolId pool_;

  bool copy_back_unaliased_slow(const TensorList& inputs) const;
  // The copied input for input `index`, or null.
  const CopiedInput* find_copied(size_t index) const;
  // Note [Sources inside placeholders]: false when no source overlaps a
  // placeholder after all (the common path then binds the inputs).
  bool prepare_replay_staged(const TensorList& inputs, ReplayContext& context);
  // The address range [low, high) that covers every placeholder's span.
  uintptr_t placeholders_low_ = 0;
  uintptr_t placeholders_high_ = 0;
  // Note [Zero-copy inputs], rules 4-6; true when the graph now reads `source`.
  bool bind_without_copy(CopiedInput& copied, char* source, const TensorList& inputs,
                         ReplayContext& context) {
    auto start = reinterpret_cast<uintptr_t>(source);
    if (start == zero_copy_.bound(copied.zero_copy)) [[likely]]
      return true;
    return rebind_slow(copied, start, inputs, context);
  }
  bool rebind_slow(CopiedInput& copied, uintptr_t start, const TensorList& inputs,
                   ReplayContext& context);
  // Note [Input copies inside the graph]: nothing when the head kernel
  // already reads `source`, else one kernel-node update.
  void copy_in_graph(const CopiedInput& copied, const char* source, ReplayContext& context) {
    GraphCopy& copy = graph_copies_[static_cast<size_t>(copied.graph_copy)];
    if (!copy.armed ||
        copy.args.slots[runtime::kSpanCopySourceSlot] != reinterpret_cast<uint64_t>(source)) [[unlikely]] {
      repoint_graph_copy(copy, copied, source, context);
    }
    ++context.counters.input_copies_in_graph;
  }
  void repoint_graph_copy(GraphCopy& copy, const CopiedInput& copied, const char* source,
                          ReplayContext& context);
  // Staged replays copy outside the graph: every head copy then copies nothing.
  void disarm_graph_copies(ReplayContext& context);
};

}  // namespace grove::cudagraph_trees
