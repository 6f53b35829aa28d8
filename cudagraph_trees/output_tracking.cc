#include "cudagraph_trees/output_tracking.h"

#include <unordered_map>

namespace grove::cudagraph_trees {

const char* output_kind_name(OutputKind kind) {
  switch (kind) {
    case OutputKind::kUndefined:
      return "undefined";
    case OutputKind::kFixed:
      return "fixed";
    case OutputKind::kPoolStorage:
      return "pool";
    case OutputKind::kAliasesOutput:
      return "aliases-output";
    case OutputKind::kAliasesInput:
      return "aliases-input";
  }
  return "?";
}

NodeOutputs NodeOutputs::classify(const TensorList& outputs, const TensorList& inputs,
                                  const TensorList& bound, const PoolMembership& in_pool,
                                  runtime::Device device) {
  NodeOutputs result;
  result.device_ = device;
  // Static and managed inputs are passed to the body as themselves, copied
  // inputs as their placeholders (Note [Views of copied inputs]).
  std::unordered_map<const void*, size_t> input_by_storage;
  for (size_t i = 0; i < bound.size() && i < inputs.size(); ++i) {
    if (!bound[i].defined() || !inputs[i].defined()) continue;
    const void* address = bound[i].storage()->address();
    if (address != nullptr) input_by_storage.emplace(address, i);
  }
  std::unordered_map<const void*, size_t> storage_by_address;
  for (size_t j = 0; j < outputs.size(); ++j) {
    const runtime::Tensor& output = outputs[j];
    OutputRecord record;
    if (!output.defined()) {
      result.records_.push_back(std::move(record));
      continue;
    }
    record.shape = output.shape();
    record.strides = output.strides();
    record.offset = output.offset();
    record.dtype = output.dtype();
    const void* address = output.storage()->address();
    if (address == nullptr || output.storage()->nbytes() == 0) {
      record.kind = OutputKind::kFixed;
      record.fixed = output;
    } else if (auto in = input_by_storage.find(address); in != input_by_storage.end()) {
      record.kind = OutputKind::kAliasesInput;
      record.input_index = in->second;
      record.offset_from_input = output.offset() - bound[in->second].offset();
    } else if (auto earlier = storage_by_address.find(address);
               earlier != storage_by_address.end()) {
      record.kind = OutputKind::kAliasesOutput;
      record.storage_index = earlier->second;
    } else if (in_pool(address)) {
      record.kind = OutputKind::kPoolStorage;
      record.storage_index = result.storages_.size();
      storage_by_address.emplace(address, record.storage_index);
      TrackedStorage tracked;
      tracked.address = address;
      tracked.nbytes = output.storage()->nbytes();
      tracked.ref = output.storage();
      tracked.first_output = j;
      result.storages_.push_back(std::move(tracked));
    } else {
      record.kind = OutputKind::kFixed;
      record.fixed = output;
    }
    result.records_.push_back(std::move(record));
  }
  return result;
}

void NodeOutputs::rebase_input_views(TensorList& outputs, const TensorList& inputs) const {
  for (size_t j = 0; j < records_.size() && j < outputs.size(); ++j) {
    if (records_[j].kind == OutputKind::kAliasesInput) {
      outputs[j] = view_of_input(records_[j], inputs);
    }
  }
}

void NodeOutputs::build_set(OutputSet& set) {
  set.retired = false;
  set.storages.assign(storages_.size(), nullptr);
  for (size_t k = 0; k < storages_.size(); ++k) {
    // Non-owning: the pool block belongs to the tree (Note [Replay outputs]).
    set.storages[k] = std::make_shared<runtime::Storage>(const_cast<void*>(storages_[k].address),
                                                         storages_[k].nbytes, device_, nullptr);
  }
  set.outputs.assign(records_.size(), runtime::Tensor());
  for (size_t j = 0; j < records_.size(); ++j) {
    const OutputRecord& record = records_[j];
    switch (record.kind) {
      case OutputKind::kFixed:
        set.outputs[j] = record.fixed;
        break;
      case OutputKind::kPoolStorage:
      case OutputKind::kAliasesOutput:
        set.outputs[j] = runtime::Tensor(set.storages[record.storage_index], record.shape,
                                         record.strides, record.offset, record.dtype);
        break;
      case OutputKind::kUndefined:
      case OutputKind::kAliasesInput:
        break;
    }
  }
}

void NodeOutputs::build_cache() {
  active_ = 0;
  sets_[1] = OutputSet{};
  build_set(sets_[0]);
  for (size_t k = 0; k < storages_.size(); ++k) {
    storages_[k].ref = sets_[0].storages[k];
    storages_[k].internal_refs = 1;
  }
  for (const OutputRecord& record : records_) {
    if (record.kind == OutputKind::kPoolStorage || record.kind == OutputKind::kAliasesOutput) {
      ++storages_[record.storage_index].internal_refs;
    }
  }
  cache_valid_ = true;
}

void NodeOutputs::retire(ReplayContext& context, runtime::CachingAllocator* clone_into,
                         const std::string& function_name, int64_t node_id) {
  // Note [Kept replay outputs].
  OutputSet& kept = sets_[active_];
  for (size_t k = 0; k < storages_.size(); ++k) {
    const runtime::StoragePtr& storage = kept.storages[k];
    bool held = storages_[k].live();
    if (clone_into != nullptr) {
      if (!held) continue;
      runtime::StoragePtr clone = clone_into->allocate(storage->nbytes(), context.stream);
      context.platform.copy_async(clone->address(), storage->address(), storage->nbytes(),
                                  runtime::CopyKind::kDeviceToDevice, context.stream);
      void* address = clone->address();
      storage->rebind(address, clone->release_owner());
      kept.retired = true;
      ++context.counters.outputs_cloned;
      continue;
    }
    if (overwritten_message_ == nullptr) {
      overwritten_message_ = std::make_shared<const std::string>(str_cat(
          "accessing an output of function '", function_name, "' (graph node ", node_id,
          ") that a later replay of the CUDA graph tree overwrote. Replay outputs live in the "
          "graphs' memory, which the next step's replays rewrite: clone the output before the "
          "next call or step, or set GROVE_CUDAGRAPHS_CLONE_KEPT_OUTPUTS=1 "
          "(TreeConfig::clone_kept_outputs) to have kept outputs cloned"));
    }
    storage->mark_overwritten(overwritten_message_);
    if (held) ++context.counters.outputs_overwritten;
  }
  OutputSet& next = sets_[1 - active_];
  bool reusable = !next.storages.empty() && !next.retired;
  for (size_t k = 0; reusable && k < storages_.size(); ++k) {
    reusable = next.storages[k].use_count() == storages_[k].internal_refs;
  }
  if (reusable) {
    for (const runtime::StoragePtr& storage : next.storages) storage->clear_overwritten();
  } else {
    build_set(next);
  }
  active_ = 1 - active_;
  for (size_t k = 0; k < storages_.size(); ++k) storages_[k].ref = next.storages[k];
}

void NodeOutputs::drop_cache() {
  sets_[0] = OutputSet{};
  sets_[1] = OutputSet{};
  active_ = 0;
  for (TrackedStorage& tracked : storages_) tracked.internal_refs = 0;
  cache_valid_ = false;
}

std::vector<TrackedStorage> track_warmup_outputs(const TensorList& outputs,
                                                 const TensorList& inputs,
                                                 const PoolMembership& in_pool) {
  std::unordered_map<const void*, bool> seen;
  for (const runtime::Tensor& input : inputs) {
    if (input.defined()) seen.emplace(input.storage()->address(), true);
  }
  std::vector<TrackedStorage> tracked;
  for (size_t j = 0; j < outputs.size(); ++j) {
    const runtime::Tensor& output = outputs[j];
    if (!output.defined() || output.storage()->nbytes() == 0) continue;
    const void* address = output.storage()->address();
    if (address == nullptr || !seen.emplace(address, true).second || !in_pool(address)) continue;
    TrackedStorage entry;
    entry.address = address;
    entry.nbytes = output.storage()->nbytes();
    entry.ref = output.storage();
    entry.first_output = j;
    tracked.push_back(std::move(entry));
  }
  return tracked;
}

}  // namespace grove::cudagraph_trees
