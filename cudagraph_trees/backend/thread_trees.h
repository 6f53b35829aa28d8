// One thread's trees of CUDA graphs used from another thread, for the product
// layer (the C API): Note [Trees of another thread] (cudagraph_trees/tree_manager.h).
//
//   SharedTrees forward_trees = trees_of_calling_thread();   // on the forward's thread
//   UseTrees scope(forward_trees);                          // on autograd's thread
//   backward_model(inputs);                                 // lands in the forward's tree
#pragma once

#include <cstdint>
#include <memory>

namespace grove::cudagraph_trees {
struct ThreadTrees;
class ThreadTreesScope;
}  // namespace grove::cudagraph_trees

namespace grove::cudagraph_trees::backend {

// The trees (one per device) the calling thread uses now, shared.
using SharedTrees = std::shared_ptr<ThreadTrees>;
SharedTrees trees_of_calling_thread();

// While it lives, the calling thread's graph calls use `trees`.
class UseTrees {
 public:
  explicit UseTrees(SharedTrees trees);
  ~UseTrees();
  UseTrees(const UseTrees&) = delete;
  UseTrees& operator=(const UseTrees&) = delete;

 private:
  std::unique_ptr<ThreadTreesScope> scope_;
};

// Groups the calling thread's graph calls until the matching end into one
// generation (Note [Invocations of several models], generations.h): key 0 is
// a fresh invocation, another key continues earlier invocations of that key.
void begin_invocation(uint64_t key);
void end_invocation();

}  // namespace grove::cudagraph_trees::backend
