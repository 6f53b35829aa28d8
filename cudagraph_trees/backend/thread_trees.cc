#include "cudagraph_trees/backend/thread_trees.h"

#include <utility>

#include "cudagraph_trees/tree_manager.h"

namespace grove::cudagraph_trees::backend {

SharedTrees trees_of_calling_thread() { return current_thread_trees(); }

UseTrees::UseTrees(SharedTrees trees)
    : scope_(std::make_unique<ThreadTreesScope>(std::move(trees))) {}

UseTrees::~UseTrees() = default;

void begin_invocation(uint64_t key) { OuterInvocation::begin(key); }

void end_invocation() { OuterInvocation::end(); }

}  // namespace grove::cudagraph_trees::backend
