#include "cudagraph_trees/capture_lock.h"

#include <map>
#include <memory>
#include <utility>

namespace grove::cudagraph_trees {

std::mutex& capture_lock(runtime::Device device) {
  // Never destroyed: usable from thread exits and from managers destroyed late.
  static auto* guard = new std::mutex();
  static auto* locks = new std::map<std::pair<int, int>, std::unique_ptr<std::mutex>>();
  std::lock_guard<std::mutex> lock(*guard);
  std::unique_ptr<std::mutex>& entry = (*locks)[{static_cast<int>(device.type), device.index}];
  if (entry == nullptr) entry = std::make_unique<std::mutex>();
  return *entry;
}

}  // namespace grove::cudagraph_trees
