// CopyBack is how the writes of a function to its copied inputs reach the
// caller: after the recording and after every replay, each mutated copied
// input's placeholder is copied back into the caller's tensor (Note
// [Copy-back of mutated inputs], mutation_classifier.h), unless zero-copy let
// the graph write the caller's tensor directly. It also holds the replay check
// that keeps that copy-back equal to eager execution.
#pragma once

#include <cstdint>
#include <vector>

#include "cudagraph_trees/input_classification.h"
#include "cudagraph_trees/replay_context.h"

namespace grove::cudagraph_trees {

class CopyBack {
 public:
  CopyBack() = default;
  // `positions`: in the copied inputs, those the function writes;
  // `written_fixed`: indices of the static or managed inputs it writes.
  CopyBack(std::vector<uint32_t> positions, std::vector<uint32_t> written_fixed)
      : positions_(std::move(positions)), written_fixed_(std::move(written_fixed)) {}

  size_t count() const { return positions_.size(); }

  // No copy-back input shares memory with another input or lies in the tree's
  // pool (Note [Copy-back into the pool]), and (Note [Copied inputs aliasing
  // written inputs]) no copied input shares memory with a static or managed
  // input the function writes; a few comparisons per such input (and one pool
  // lookup per copy-back input), none without them.
  bool unaliased(const TensorList& inputs, const std::vector<CopiedInput>& copied,
                 const runtime::CachingAllocator* allocator, runtime::PoolId tree_pool) const {
    if (positions_.empty() && written_fixed_.empty()) [[likely]]
      return true;
    return unaliased_slow(inputs, copied, *allocator, tree_pool);
  }
  // After a replay's launch: copies mutated placeholders back to where the
  // replay said (CopiedInput::copy_back_to).
  void after_replay(std::vector<CopiedInput>& copied, ReplayContext& context) const {
    for (uint32_t position : positions_) {
      CopiedInput& input = copied[position];
      if (input.copy_back_to == nullptr) continue;
      context.platform.copy_async(input.copy_back_to, input.placeholder, input.span_bytes,
                                  runtime::CopyKind::kDeviceToDevice, context.stream);
      ++context.counters.input_copy_backs;
    }
  }
  // Right after recording: copies the placeholders of mutated inputs back into
  // `inputs` (the caller's tensors) on `stream`.
  void after_recording(const TensorList& inputs, const std::vector<CopiedInput>& copied,
                       runtime::Platform& platform, runtime::StreamHandle stream,
                       TreeCounters& counters) const;

 private:
  bool unaliased_slow(const TensorList& inputs, const std::vector<CopiedInput>& copied,
                      const runtime::CachingAllocator& allocator, runtime::PoolId tree_pool) const;

  std::vector<uint32_t> positions_;      // in the copied inputs
  std::vector<uint32_t> written_fixed_;  // input indices
};

}  // namespace grove::cudagraph_trees
