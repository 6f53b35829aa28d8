// The C API's trees across threads (grove_trees_*): a thread's trees of CUDA
// graphs entered from another thread, Note [Trees of another thread]
// (cudagraph_trees/tree_manager.h).
#include <memory>
#include <vector>

#include "capi/api_support.h"
#include "cudagraph_trees/backend/thread_trees.h"

using grove::capi::require;
using grove::capi::run_api;
using grove::cudagraph_trees::backend::SharedTrees;
using grove::cudagraph_trees::backend::UseTrees;

struct grove_trees {
  SharedTrees trees;
};

namespace {

// The scopes grove_trees_enter opened on this thread, innermost last.
std::vector<std::unique_ptr<UseTrees>>& entered() {
  thread_local std::vector<std::unique_ptr<UseTrees>> scopes;
  return scopes;
}

}  // namespace

extern "C" {

grove_status grove_trees_of_thread(grove_trees** trees) {
  return run_api("grove_trees_of_thread", [&] {
    require(trees != nullptr, "the output pointer `trees` is null");
    *trees = new grove_trees{grove::cudagraph_trees::backend::trees_of_calling_thread()};
  });
}

grove_status grove_trees_enter(const grove_trees* trees) {
  return run_api("grove_trees_enter", [&] {
    require(trees != nullptr, "the trees handle is null; pass one from grove_trees_of_thread");
    entered().push_back(std::make_unique<UseTrees>(trees->trees));
  });
}

grove_status grove_trees_exit(void) {
  return run_api("grove_trees_exit", [&] {
    require(!entered().empty(),
            "no grove_trees_enter is open on this thread; call grove_trees_exit once per enter, "
            "on the thread that entered");
    entered().pop_back();
  });
}

void grove_trees_destroy(grove_trees* trees) {
  grove::runtime::CallerDeviceGuard
      caller_device;  // Note [The caller's current device stays as it was]
  delete trees;
}

grove_status grove_invocation_begin(uint64_t key) {
  return run_api("grove_invocation_begin",
                 [&] { grove::cudagraph_trees::backend::begin_invocation(key); });
}

grove_status grove_invocation_end(void) {
  return run_api("grove_invocation_end",
                 [&] { grove::cudagraph_trees::backend::end_invocation(); });
}

}  // extern "C"
