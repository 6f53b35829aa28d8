// TreeManager's end of life (shutdown) and the per-thread registry of managers.
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "cudagraph_trees/capture_lock.h"
#include "cudagraph_trees/tree_manager.h"
#include "cudagraph_trees/tree_node.h"
#include "runtime/collectives/held_locks.h"
#include "runtime/logging.h"

namespace grove::cudagraph_trees {

struct ThreadTrees {
  std::map<runtime::Device, std::unique_ptr<TreeManager>> managers;
};

namespace {

// Note [Trees of another thread]: the managers the calling thread uses now.
std::shared_ptr<ThreadTrees>& active_trees() {
  thread_local std::shared_ptr<ThreadTrees> trees = std::make_shared<ThreadTrees>();
  return trees;
}

std::map<runtime::Device, std::unique_ptr<TreeManager>>& thread_managers() {
  return active_trees()->managers;
}

}  // namespace

std::shared_ptr<ThreadTrees> current_thread_trees() { return active_trees(); }

ThreadTreesScope::ThreadTreesScope(std::shared_ptr<ThreadTrees> trees) {
  GROVE_CHECK(trees != nullptr,
              "ThreadTreesScope: null trees; pass current_thread_trees() of "
              "the thread whose trees this one should use");
  previous_ = std::exchange(active_trees(), std::move(trees));
}

ThreadTreesScope::~ThreadTreesScope() { active_trees() = std::move(previous_); }

class TreeLease {
 public:
  explicit TreeLease(std::shared_ptr<LeaseState> state) : state_(std::move(state)) {}
  TreeLease(const TreeLease&) = delete;
  TreeLease& operator=(const TreeLease&) = delete;
  ~TreeLease() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    TreeManager* manager = state_->manager;
    if (--state_->leases != 0 || manager == nullptr || manager->is_shut_down()) return;
    if (state_->leased_functions < manager->registry_.size()) return;  // unleased functions
    try {
      log(LogLevel::kInfo, str_cat("cudagraph tree manager for ", manager->device().str(),
                                   ": the last function using it went; releasing its ",
                                   manager->node_count(), " graphs and its pool"));
      manager->shutdown();
    } catch (const std::exception& error) {
      log(LogLevel::kError, str_cat("cudagraph tree manager for ", manager->device().str(),
                                    ": release after its last function failed: ", error.what()));
    }
  }

 private:
  std::shared_ptr<LeaseState> state_;
};

std::shared_ptr<TreeLease> TreeManager::lease_functions(size_t count) {
  std::lock_guard<std::mutex> lock(lease_state_->mutex);
  GROVE_CHECK(!shut_down_, "lease_functions() on a tree manager for ", device_.str(),
              " that was shut down; use tree_manager_for() for a new one");
  ++lease_state_->leases;
  lease_state_->leased_functions += count;
  return std::make_shared<TreeLease>(lease_state_);
}

void TreeManager::shutdown() {
  if (shut_down_) return;
  std::lock_guard<std::mutex> lock(capture_lock(device_));
  // Note [Waiting under the capture lock] (runtime/collectives/held_locks.h).
  runtime::collectives::HeldLock held(capture_lock(device_));
  retire_before_next_replay_.clear();
  auto invalidate = [&](PathNode& node) {
    if (!node.is_warmup()) static_cast<TreeNode&>(node).outputs().drop_cache();
    for (const TrackedStorage& storage : node.tracked()) {
      runtime::StoragePtr alive = storage.lock_if_live();
      if (alive == nullptr || alive->is_poisoned()) continue;
      StaleOutputOrigin origin{node.function().spec.name, node.function().spec.mode,
                               storage.first_output,      node.id(),
                               node.is_warmup(),          node.generation()};
      alive->poison(shutdown_output_message(origin));
      ++counters_.outputs_poisoned;
    }
  };
  for_each_node(roots_, [&](TreeNode& node) {
    invalidate(node);
    node.release_graph();
  });
  for (const auto& node : warmup_path_) invalidate(*node);
  current_ = nullptr;
  state_ = PathState::kNone;
  warmup_path_.clear();
  roots_.clear();
  root_slots_.clear();
  live_blocks_at_shutdown_ = allocator_.stats(pool_).live_blocks;
  if (live_blocks_at_shutdown_ != 0) {
    log(LogLevel::kWarn,
        str_cat("cudagraph tree manager for ", device_.str(), ": ", live_blocks_at_shutdown_,
                " pool blocks are still held by tensors the tree does not track; "
                "they lose their memory now"));
  }
  allocator_.release_pool(pool_);
  platform_.destroy_event(caller_ready_);
  platform_.destroy_event(capture_done_);
  platform_.destroy_stream(capture_stream_);
  shut_down_ = true;
}

TreeManager& tree_manager_for(runtime::Device device) {
  std::unique_ptr<TreeManager>& manager = thread_managers()[device];
  if (manager == nullptr || manager->is_shut_down()) {
    manager = std::make_unique<TreeManager>(device, TreeConfig::from_environment());
  }
  return *manager;
}

TreeManager* find_tree_manager(runtime::Device device) {
  auto found = thread_managers().find(device);
  if (found == thread_managers().end() || found->second == nullptr ||
      found->second->is_shut_down()) {
    return nullptr;
  }
  return found->second.get();
}

void reset_tree_manager(runtime::Device device) { thread_managers().erase(device); }

void mark_step_begin() {
  for (auto& [device, manager] : thread_managers()) {
    if (manager != nullptr && !manager->is_shut_down()) manager->mark_step_begin();
  }
}

void reset_tree_managers() { thread_managers().clear(); }

}  // namespace grove::cudagraph_trees
