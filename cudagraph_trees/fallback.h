// Why a function runs eagerly instead of through the tree: the category is a
// stable key for stats; the message says what happened and what to do.
#pragma once

#include <cstdint>
#include <string>

namespace grove::cudagraph_trees {

enum class FallbackCategory : uint8_t {
  kMutatedInputs,       // writes an input that is neither static nor pool-managed
  kRerecordLimit,       // re-recorded too often under one parent
  kCaptureFailure,      // the body did something capture forbids
  kCpuTensors,          // an input or the function's devices include cpu
  kSeveralDevices,      // inputs on another device than the manager's
  kSkipped,             // the user marked it never to be captured (not an error in strict mode)
  kUncapturedSize,      // its dynamic dimension has a size outside its capture sizes (likewise)
  kMovingManagedInput,  // a pool-managed input keeps moving and the policy is eager
};

// Eager runs the user asked for: strict mode does not turn them into errors.
inline bool fallback_requested(FallbackCategory category) {
  return category == FallbackCategory::kSkipped || category == FallbackCategory::kUncapturedSize;
}

inline const char* fallback_category_name(FallbackCategory category) {
  switch (category) {
    case FallbackCategory::kMutatedInputs:
      return "mutated inputs";
    case FallbackCategory::kRerecordLimit:
      return "re-record limit";
    case FallbackCategory::kCaptureFailure:
      return "capture failure";
    case FallbackCategory::kCpuTensors:
      return "cpu tensors";
    case FallbackCategory::kSeveralDevices:
      return "several devices";
    case FallbackCategory::kSkipped:
      return "skipped";
    case FallbackCategory::kUncapturedSize:
      return "uncaptured size";
    case FallbackCategory::kMovingManagedInput:
      return "moving managed input";
  }
  return "?";
}

struct EagerDecision {
  FallbackCategory category;
  std::string message;
};

}  // namespace grove::cudagraph_trees
