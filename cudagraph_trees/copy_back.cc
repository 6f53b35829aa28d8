#include "cudagraph_trees/copy_back.h"

#include <optional>

#include "cudagraph_trees/mutation_classifier.h"

namespace grove::cudagraph_trees {

bool CopyBack::unaliased_slow(const TensorList& inputs, const std::vector<CopiedInput>& copied,
                              const runtime::CachingAllocator& allocator,
                              runtime::PoolId tree_pool) const {
  for (uint32_t position : positions_) {
    const CopiedInput& input = copied[position];
    const runtime::Tensor& written = inputs[input.index];
    for (size_t other = 0; other < inputs.size(); ++other) {
      if (other != input.index && inputs_overlap(written, inputs[other])) return false;
    }
    // Note [Copy-back into the pool].
    if (written.defined() && written.storage()->address() != nullptr) {
      std::optional<runtime::PoolId> owner =
          allocator.pool_containing(written.storage()->address());
      if (owner.has_value() && *owner == tree_pool) return false;
    }
  }
  // A written static or managed input keeps its address, but the copied
  // inputs may move onto it from one call to the next.
  for (uint32_t written : written_fixed_) {
    for (const CopiedInput& input : copied) {
      if (inputs_overlap(inputs[written], inputs[input.index])) return false;
    }
  }
  return true;
}

void CopyBack::after_recording(const TensorList& inputs, const std::vector<CopiedInput>& copied,
                               runtime::Platform& platform, runtime::StreamHandle stream,
                               TreeCounters& counters) const {
  for (uint32_t position : positions_) {
    const CopiedInput& input = copied[position];
    if (input.span_bytes == 0) continue;
    platform.copy_async(input.source_in(inputs[input.index]), input.placeholder, input.span_bytes,
                        runtime::CopyKind::kDeviceToDevice, stream);
    ++counters.input_copy_backs;
  }
}

}  // namespace grove::cudagraph_trees
