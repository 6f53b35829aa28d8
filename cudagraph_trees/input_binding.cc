#include "cudagraph_trees/input_binding.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "cudagraph_trees/mutation_classifier.h"
#include "runtime/device_context.h"

namespace grove::cudagraph_trees {
namespace {

// The byte range [low, low + bytes) relative to element 0 that a strided view reaches.
void strided_span(const runtime::Tensor& tensor, int64_t& low_bytes, size_t& bytes) {
  low_bytes = 0;
  bytes = 0;
  if (tensor.numel() == 0) return;
  int64_t low = 0, high = 0;
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    int64_t reach = (tensor.shape()[d] - 1) * tensor.strides()[d];
    (reach < 0 ? low : high) += reach;
  }
  auto element = static_cast<int64_t>(runtime::dtype_size(tensor.dtype()));
  low_bytes = low * element;
  bytes = static_cast<size_t>((high - low + 1) * element);
}

}  // namespace

const char* input_kind_name(InputKind kind) {
  switch (kind) {
    case InputKind::kStatic:
      return "static";
    case InputKind::kManaged:
      return "managed";
    case InputKind::kCopied:
      return "copied";
  }
  return "?";
}

const char* invariant_status_text(InvariantStatus status) {
  switch (status) {
    case InvariantStatus::kOk:
      return "ok";
    case InvariantStatus::kInputCountChanged:
      return "number of inputs changed";
    case InvariantStatus::kManagedInputMoved:
      return "pool-managed input address changed";
    case InvariantStatus::kExpectedDeadOutputAlive:
      return "an output that was dead at recording is alive";
    case InvariantStatus::kStaticInputMoved:
      return "static input address changed";
    case InvariantStatus::kCopiedInputChanged:
      return "input shape, strides, dtype or device changed";
    case InvariantStatus::kMutatedInputAliased:
      return "a mutated input shares memory with another input or the tree's pool";
  }
  return "?";
}

InputBinding InputBinding::bind(const Request& request, TensorList& bound_inputs) {
  InputBinding binding;
  const TensorList& inputs = request.inputs;
  binding.kinds_.resize(inputs.size());
  bound_inputs.reserve(bound_inputs.size() + inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const runtime::Tensor& input = inputs[i];
    auto index = static_cast<uint32_t>(i);
    if (request.function.mutated_input(i)) binding.written_.push_back(index);
    bool pool_output = input.defined() && input.storage()->address() != nullptr &&
                       request.path_output_addresses.count(input.storage()->address()) > 0;
    if (request.function.static_input(i)) {
      GROVE_CHECK(input.defined(), request.function.describe(), ": static input ", i,
                  " is undefined; static inputs must be tensors with a fixed address");
      binding.kinds_[i] = InputKind::kStatic;
      binding.static_.push_back(CheckedInput{index, input.storage()->address(), input.offset()});
      if (request.function.mutated_input(i)) binding.written_fixed_.push_back(index);
      bound_inputs.push_back(input);
    } else if (pool_output && request.demoted.count(i) == 0) {
      binding.kinds_[i] = InputKind::kManaged;
      binding.managed_.push_back(CheckedInput{index, input.storage()->address(), input.offset()});
      if (request.function.mutated_input(i)) binding.written_fixed_.push_back(index);
      bound_inputs.push_back(input);
    } else {
      binding.kinds_[i] = InputKind::kCopied;
      CopiedInput copied;
      copied.index = index;
      copied.meta = TensorMeta::of(input);
      if (!input.defined()) {
        binding.copied_.push_back(copied);
        bound_inputs.push_back(input);
        continue;
      }
      strided_span(input, copied.span_low_bytes, copied.span_bytes);
      runtime::StoragePtr storage = request.allocator.allocate(copied.span_bytes, request.stream);
      int64_t element = static_cast<int64_t>(runtime::dtype_size(input.dtype()));
      runtime::Tensor placeholder(storage, input.shape(), input.strides(),
                                  -copied.span_low_bytes / element, input.dtype());
      copied.placeholder = storage->address();
      copied.copy_back = request.function.mutated_input(i);
      if (copied.copy_back)
        binding.copy_back_.push_back(static_cast<uint32_t>(binding.copied_.size()));
      if (copied.span_bytes > 0) {
        const char* source = static_cast<const char*>(input.data_ptr()) + copied.span_low_bytes;
        request.allocator.backend().copy_async(copied.placeholder, source, copied.span_bytes,
                                               runtime::CopyKind::kDeviceToDevice, request.stream);
      }
      binding.copied_.push_back(std::move(copied));
      bound_inputs.push_back(std::move(placeholder));
    }
  }
  if (!binding.copy_back_.empty()) {
    binding.copy_back_allocator_ = &request.allocator;
    binding.tree_pool_ = request.pool;
  }
  for (const CopiedInput& copied : binding.copied_) {
    if (copied.span_bytes == 0) continue;
    auto low = reinterpret_cast<uintptr_t>(copied.placeholder);
    uintptr_t high = low + copied.span_bytes;
    if (binding.placeholders_high_ == 0 || low < binding.placeholders_low_) {
      binding.placeholders_low_ = low;
    }
    binding.placeholders_high_ = std::max(binding.placeholders_high_, high);
  }
  return binding;
}

// Note [Sources inside placeholders]
// A source may lie in a block that is also a placeholder of this node: the
// placeholders return to the pool after the recording, and a later node's
// output can be allocated there (fuzz seed 1611 got there through a replay
// output that viewed a placeholder, which Note [Views of copied inputs] has
// since ruled out). Fed back into this node as one copied input, its values
// live in another input's placeholder that prepare_replay() overwrites:
// copying input 1 into its placeholder first and then input 3 out of that
// same block hands the graph the new input 1 where eager code reads the old
// values. So before any copy, each
// source is tested against the range that covers all of the node's
// placeholders (one compare per copied input; sources outside the pool never
// hit it). When one does overlap a placeholder for real, every such source
// is first copied to scratch memory outside the pool, then the placeholders
// are filled from the scratch copies; those inputs are not zero-copied this
// time (their slots point back at the placeholder).
bool InputBinding::prepare_replay_staged(const TensorList& inputs, ReplayContext& context) {
  auto overlaps_a_placeholder = [&](uintptr_t start, size_t bytes) {
    for (const CopiedInput& other : copied_) {
      auto low = reinterpret_cast<uintptr_t>(other.placeholder);
      if (other.span_bytes > 0 && start < low + other.span_bytes && low < start + bytes) return true;
    }
    return false;
  };
  std::vector<runtime::StoragePtr> scratch(copied_.size());
  bool any = false;
  for (size_t p = 0; p < copied_.size(); ++p) {
    const CopiedInput& copied = copied_[p];
    if (copied.span_bytes == 0) continue;
    const runtime::Tensor& input = inputs[copied.index];
    char* source = static_cast<char*>(input.data_ptr()) + copied.span_low_bytes;
    if (!overlaps_a_placeholder(reinterpret_cast<uintptr_t>(source), copied.span_bytes)) continue;
    scratch[p] = runtime::device_context(input.device())
                     .allocator()
                     .allocate(copied.span_bytes, context.stream);
    context.backend.copy_async(scratch[p]->data(), source, copied.span_bytes,
                               runtime::CopyKind::kDeviceToDevice, context.stream);
    any = true;
  }
  if (!any) return false;
  disarm_graph_copies(context);
  for (size_t p = 0; p < copied_.size(); ++p) {
    CopiedInput& copied = copied_[p];
    if (copied.span_bytes == 0) continue;
    char* source = static_cast<char*>(inputs[copied.index].data_ptr()) + copied.span_low_bytes;
    if (scratch[p] == nullptr) {
      if (copied.zero_copy >= 0 && bind_without_copy(copied, source, inputs, context)) {
        copied.copy_back_to = nullptr;
        continue;
      }
      context.backend.copy_async(copied.placeholder, source, copied.span_bytes,
                                 runtime::CopyKind::kDeviceToDevice, context.stream);
    } else {
      auto placeholder = reinterpret_cast<uintptr_t>(copied.placeholder);
      if (copied.zero_copy >= 0 && context.graph != nullptr &&
          zero_copy_.bound(copied.zero_copy) != placeholder) {
        zero_copy_.patch(copied.zero_copy, placeholder, *context.graph);
        ++context.counters.input_patches;
      }
      context.backend.copy_async(copied.placeholder, scratch[p]->data(), copied.span_bytes,
                                 runtime::CopyKind::kDeviceToDevice, context.stream);
    }
    ++context.counters.input_copies;
    copied.copy_back_to = copied.copy_back ? source : nullptr;
  }
  ++context.counters.staged_input_copies;
  // The scratch blocks return to the allocator on `context.stream`, after the
  // copies that read them in stream order.
  return true;
}

bool InputBinding::copy_back_unaliased_slow(const TensorList& inputs) const {
  for (uint32_t position : copy_back_) {
    const CopiedInput& copied = copied_[position];
    const runtime::Tensor& written = inputs[copied.index];
    for (size_t other = 0; other < inputs.size(); ++other) {
      if (other != copied.index && inputs_overlap(written, inputs[other])) return false;
    }
    // Note [Copy-back into the pool].
    if (written.defined() && written.storage()->address() != nullptr) {
      std::optional<runtime::PoolId> owner =
          copy_back_allocator_->pool_containing(written.storage()->address());
      if (owner.has_value() && *owner == tree_pool_) return false;
    }
  }
  // A written static or managed input keeps its address, but the copied
  // inputs may move onto it from one call to the next.
  for (uint32_t written : written_fixed_) {
    for (const CopiedInput& copied : copied_) {
      if (inputs_overlap(inputs[written], inputs[copied.index])) return false;
    }
  }
  return true;
}

void InputBinding::copy_back_after_recording(const TensorList& inputs, runtime::Backend& backend,
                                             runtime::StreamHandle stream,
                                             TreeCounters& counters) const {
  for (uint32_t position : copy_back_) {
    const CopiedInput& copied = copied_[position];
    if (copied.span_bytes == 0) continue;
    char* destination = static_cast<char*>(inputs[copied.index].data_ptr()) + copied.span_low_bytes;
    backend.copy_async(destination, copied.placeholder, copied.span_bytes,
                       runtime::CopyKind::kDeviceToDevice, stream);
    ++counters.input_copy_backs;
  }
}

std::string InputBinding::plan_zero_copy(const runtime::GraphRecording& graph,
                                         const RegisteredFunction& function,
                                         const runtime::CachingAllocator& allocator,
                                         runtime::PoolId pool) {
  (void)function;
  std::vector<ZeroCopyCandidate> candidates;
  std::vector<uint32_t> positions;
  for (uint32_t p = 0; p < copied_.size(); ++p) {
    const CopiedInput& copied = copied_[p];
    if (copied.placeholder == nullptr || copied.span_bytes == 0) continue;
    candidates.push_back({reinterpret_cast<uintptr_t>(copied.placeholder), copied.span_bytes});
    positions.push_back(p);
  }
  if (candidates.empty()) return "";
  std::vector<int32_t> plan_index;
  std::string why_not;
  zero_copy_ = ZeroCopyPlan::build(graph, candidates, plan_index, why_not);
  for (size_t c = 0; c < candidates.size(); ++c) copied_[positions[c]].zero_copy = plan_index[c];
  if (!zero_copy_.empty()) {
    allocator_ = &allocator;
    pool_ = pool;
  }
  return why_not;
}

size_t InputBinding::add_graph_copies(runtime::GraphRecording& graph, const TensorList& inputs) {
  runtime::KernelHandle kernel;
  for (CopiedInput& copied : copied_) {
    if (copied.span_bytes == 0 || copied.zero_copy >= 0) continue;
    if (!kernel) kernel = runtime::span_copy_kernel(graph.device());
    const char* source =
        static_cast<const char*>(inputs[copied.index].data_ptr()) + copied.span_low_bytes;
    GraphCopy copy;
    copy.args = runtime::span_copy_args(copied.placeholder, source, copied.span_bytes);
    copy.kernel_node =
        graph.add_head_kernel(kernel, runtime::span_copy_dims(copied.span_bytes), copy.args);
    copied.graph_copy = static_cast<int32_t>(graph_copies_.size());
    graph_copies_.push_back(std::move(copy));
  }
  return graph_copies_.size();
}

void InputBinding::repoint_graph_copy(GraphCopy& copy, const CopiedInput& copied,
                                      const char* source, ReplayContext& context) {
  copy.args.slots[runtime::kSpanCopySourceSlot] = reinterpret_cast<uint64_t>(source);
  copy.args.slots[runtime::kSpanCopyBytesSlot] = copied.span_bytes;
  context.graph->set_kernel_node_args(copy.kernel_node, copy.args);
  copy.armed = true;
  ++context.counters.copy_source_patches;
}

void InputBinding::disarm_graph_copies(ReplayContext& context) {
  for (GraphCopy& copy : graph_copies_) {
    if (!copy.armed) continue;
    copy.args.slots[runtime::kSpanCopyBytesSlot] = 0;
    context.graph->set_kernel_node_args(copy.kernel_node, copy.args);
    copy.armed = false;
  }
}

const CopiedInput* InputBinding::find_copied(size_t index) const {
  for (const CopiedInput& copied : copied_) {
    if (copied.index == index) return &copied;
  }
  return nullptr;
}

std::pair<const void*, size_t> InputBinding::placeholder_span(size_t index) const {
  if (const CopiedInput* copied = find_copied(index)) return {copied->placeholder, copied->span_bytes};
  return {nullptr, 0};
}

bool InputBinding::copied_in_graph(size_t index) const {
  const CopiedInput* copied = find_copied(index);
  return copied != nullptr && copied->graph_copy >= 0;
}

bool InputBinding::rebind_slow(CopiedInput& copied, uintptr_t start, const TensorList& inputs,
                               ReplayContext& context) {
  // Note [Zero-copy inputs], rules 4-6.
  uintptr_t placeholder = reinterpret_cast<uintptr_t>(copied.placeholder);
  bool patchable = context.graph != nullptr && (start - placeholder) % kZeroCopyAlignment == 0;
  if (patchable) {
    std::optional<runtime::PoolId> owner =
        allocator_->pool_containing(reinterpret_cast<void*>(start));
    patchable = !owner.has_value() || *owner != pool_;
  }
  if (patchable) {
    uintptr_t end = start + copied.span_bytes;
    for (uint32_t index : written_) {
      if (index == copied.index || !inputs[index].defined()) continue;
      const runtime::StoragePtr& storage = inputs[index].storage();
      auto low = reinterpret_cast<uintptr_t>(storage->address());
      if (low < end && start < low + storage->nbytes()) {
        patchable = false;
        break;
      }
    }
  }
  if (!patchable) {
    if (zero_copy_.bound(copied.zero_copy) != placeholder && context.graph != nullptr) {
      zero_copy_.patch(copied.zero_copy, placeholder, *context.graph);
      ++context.counters.input_patches;
    }
    ++context.counters.zero_copy_refusals;
    return false;
  }
  zero_copy_.patch(copied.zero_copy, start, *context.graph);
  ++context.counters.input_patches;
  return true;
}

bool InputBinding::zero_copied(size_t index) const {
  const CopiedInput* copied = find_copied(index);
  return copied != nullptr && copied->zero_copy >= 0;
}

std::vector<size_t> InputBinding::moved_managed_inputs(const TensorList& inputs) const {
  std::vector<size_t> moved;
  if (!count_matches(inputs)) return moved;
  for (const CheckedInput& checked : managed_) {
    if (!checked.matches(inputs[checked.index])) moved.push_back(checked.index);
  }
  return moved;
}

std::string InputBinding::describe_mismatches(const TensorList& inputs) const {
  std::ostringstream text;
  if (!count_matches(inputs)) {
    text << "recorded with " << kinds_.size() << " inputs, called with " << inputs.size();
    return text.str();
  }
  auto checked = [&](const std::vector<CheckedInput>& list, const char* kind) {
    for (const CheckedInput& c : list) {
      if (!c.matches(inputs[c.index])) {
        const runtime::Tensor& now = inputs[c.index];
        text << "input " << c.index << " (" << kind << "): storage " << c.storage_address
             << " offset " << c.offset << " became "
             << (now.defined() ? now.storage()->address() : nullptr) << " offset " << now.offset()
             << "; ";
      }
    }
  };
  checked(managed_, "managed");
  checked(static_, "static");
  for (const CopiedInput& copied : copied_) {
    if (!copied.meta.matches(inputs[copied.index])) {
      text << "input " << copied.index << " (copied): recorded as " << copied.meta.str() << ", now "
           << TensorMeta::of(inputs[copied.index]).str() << "; ";
    }
  }
  return text.str();
}

}  // namespace grove::cudagraph_trees
