#include "cudagraph_trees/input_binding.h"

#include <algorithm>
#include <optional>
#include <sstream>

namespace grove::cudagraph_trees {

InputBinding InputBinding::bind(const Request& request, TensorList& bound_inputs) {
  ClassifiedInputs classified =
      classify_inputs({request.inputs, request.function, request.path_output_addresses,
                       request.demoted, request.allocator, request.stream},
                      bound_inputs);
  InputBinding binding;
  binding.kinds_ = std::move(classified.kinds);
  binding.managed_ = std::move(classified.managed);
  binding.static_ = std::move(classified.statics);
  binding.copied_ = std::move(classified.copied);
  binding.written_ = std::move(classified.written);
  binding.copy_back_ =
      CopyBack(std::move(classified.copy_back), std::move(classified.written_fixed));
  binding.allocator_ = &request.allocator;
  binding.pool_ = request.pool;
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

bool InputBinding::prepare_replay_staged(const TensorList& inputs, ReplayContext& context) {
  // Note [Sources inside placeholders].
  auto overlaps_a_placeholder = [&](uintptr_t start, size_t bytes) {
    for (const CopiedInput& other : copied_) {
      auto low = reinterpret_cast<uintptr_t>(other.placeholder);
      if (other.span_bytes > 0 && start < low + other.span_bytes && low < start + bytes)
        return true;
    }
    return false;
  };
  // Scratch comes from the tree's allocator outside any pool routing (a
  // replay routes nothing), so it never lies in the tree's pool.
  std::vector<runtime::StoragePtr> scratch(copied_.size());
  bool any = false;
  for (size_t p = 0; p < copied_.size(); ++p) {
    const CopiedInput& copied = copied_[p];
    if (copied.span_bytes == 0) continue;
    char* source = copied.source_in(inputs[copied.index]);
    if (!overlaps_a_placeholder(reinterpret_cast<uintptr_t>(source), copied.span_bytes)) continue;
    scratch[p] = allocator_->allocate(copied.span_bytes, context.stream);
    context.platform.copy_async(scratch[p]->data(), source, copied.span_bytes,
                                runtime::CopyKind::kDeviceToDevice, context.stream);
    any = true;
  }
  if (!any) return false;
  graph_copies_.disarm(context);
  for (size_t p = 0; p < copied_.size(); ++p) {
    CopiedInput& copied = copied_[p];
    if (copied.span_bytes == 0) continue;
    char* source = copied.source_in(inputs[copied.index]);
    if (scratch[p] == nullptr) {
      if (copied.zero_copy >= 0 && bind_without_copy(copied, source, inputs, context)) {
        copied.copy_back_to = nullptr;
        continue;
      }
      context.platform.copy_async(copied.placeholder, source, copied.span_bytes,
                                  runtime::CopyKind::kDeviceToDevice, context.stream);
    } else {
      auto placeholder = reinterpret_cast<uintptr_t>(copied.placeholder);
      if (copied.zero_copy >= 0 && context.graph != nullptr &&
          zero_copy_.bound(copied.zero_copy) != placeholder) {
        zero_copy_.patch(copied.zero_copy, placeholder, *context.graph);
        ++context.counters.input_patches;
      }
      context.platform.copy_async(copied.placeholder, scratch[p]->data(), copied.span_bytes,
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

std::string InputBinding::plan_zero_copy(const runtime::GraphRecording& graph) {
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
  return why_not;
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

const CopiedInput* InputBinding::find_copied(size_t index) const {
  for (const CopiedInput& copied : copied_) {
    if (copied.index == index) return &copied;
  }
  return nullptr;
}

std::pair<const void*, size_t> InputBinding::placeholder_span(size_t index) const {
  if (const CopiedInput* copied = find_copied(index))
    return {copied->placeholder, copied->span_bytes};
  return {nullptr, 0};
}

bool InputBinding::copied_in_graph(size_t index) const {
  const CopiedInput* copied = find_copied(index);
  return copied != nullptr && copied->graph_copy >= 0;
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
      } else if (!c.layout_matches(inputs[c.index])) {
        const runtime::Tensor& now = inputs[c.index];
        text << "input " << c.index << " (" << kind << "): recorded as "
             << runtime::shape_str(c.shape) << " strides " << runtime::shape_str(c.strides)
             << ", now " << runtime::shape_str(now.shape()) << " strides "
             << runtime::shape_str(now.strides()) << " at the same address; ";
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
