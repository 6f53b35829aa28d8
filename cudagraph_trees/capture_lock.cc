#include "cudagraph_trees/capture_lock.h"

namespace grove::cudagraph_trees {

std::mutex& process_capture_lock() {
  static auto* lock = new std::mutex();  // never destroyed: usable from thread exits
  return *lock;
}

}  // namespace grove::cudagraph_trees
