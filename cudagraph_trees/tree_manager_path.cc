// TreeManager's path bookkeeping: the nodes and outputs of the current path,
// pool membership, the ordering between the caller's stream and the capture
// stream, and the end of a path (Note [Stale outputs] in tree_manager.cc).
#include <algorithm>

#include "cudagraph_trees/tree_manager.h"
#include "cudagraph_trees/tree_node.h"
#include "runtime/logging.h"

namespace grove::cudagraph_trees {

std::vector<PathNode*> TreeManager::path() const {
  std::vector<PathNode*> nodes;
  for (PathNode* node = current_; node != nullptr; node = node->parent()) nodes.push_back(node);
  std::reverse(nodes.begin(), nodes.end());
  return nodes;
}

bool TreeManager::all_path_outputs_dead() const {
  for (PathNode* node = current_; node != nullptr; node = node->parent()) {
    if (node->any_output_live()) return false;
  }
  return true;
}

std::unordered_set<const void*> TreeManager::path_output_addresses() const {
  // Recorded outputs count dead or alive (pool memory stays the tree's); a
  // warm-up's outputs only while alive (their addresses are not stable).
  std::unordered_set<const void*> addresses;
  for (PathNode* node = current_; node != nullptr; node = node->parent()) {
    for (const TrackedStorage& storage : node->tracked()) {
      if (!node->is_warmup() || storage.live()) addresses.insert(storage.address);
    }
  }
  return addresses;
}

bool TreeManager::in_pool(const void* address) const {
  std::optional<runtime::PoolId> pool = allocator_.pool_containing(address);
  return pool.has_value() && *pool == pool_;
}

void TreeManager::order_capture_after(runtime::StreamHandle caller) {
  platform_.record_event(caller_ready_, caller);
  platform_.stream_wait_event(capture_stream_, caller_ready_);
}

void TreeManager::order_caller_after(runtime::StreamHandle caller) {
  platform_.record_event(capture_done_, capture_stream_);
  platform_.stream_wait_event(caller, capture_done_);
}

void TreeManager::try_end_recording_or_warmup(const RegisteredFunction& function) {
  if (generations_.can_start_new_generation(generation_, function.spec.mode)) {
    end_path(true);
    return;
  }
  if (all_path_outputs_dead()) {
    end_path(false);
    return;
  }
  if (generations_.blocked_by_pending_backward(generation_)) {
    ++counters_.pending_backward_blocks;
    for (PathNode* node = current_; node != nullptr; node = node->parent()) {
      if (node->function_id() == function.id) {
        log_once(LogLevel::kWarn,
                 str_cat("cudagraph_trees:pending_backward:", serial_, ":", function.id.value),
                 pending_backward_message(function.spec.name));
        break;
      }
    }
  }
}

bool TreeManager::try_end_execution(const RegisteredFunction& function) {
  if (generations_.can_start_new_generation(generation_, function.spec.mode) ||
      all_path_outputs_dead()) {
    end_path(false);
    return true;
  }
  return false;
}

void TreeManager::end_path(bool invalidate_outputs) {
  if (log_enabled(LogLevel::kDebug)) {
    log(LogLevel::kDebug, str_cat("ending the ", path_state_name(state_), " path of generation ",
                                  generation_, " (current ", generations_.current(), ")",
                                  invalidate_outputs ? ", invalidating its live outputs" : ""));
  }
  if (invalidate_outputs) {
    invalidate_path_outputs();
  } else if (state_ == PathState::kExecution) {
    // Note [Kept replay outputs]: the next replay may write over this path's
    // memory; it retires the outputs still held once it has bound its inputs.
    for (PathNode* node = current_; node != nullptr; node = node->parent()) {
      auto* replayed = static_cast<TreeNode*>(node);
      if (!node->is_warmup() &&
          std::find(retire_before_next_replay_.begin(), retire_before_next_replay_.end(),
                    replayed) == retire_before_next_replay_.end()) {
        retire_before_next_replay_.push_back(replayed);
      }
    }
  }
  current_ = nullptr;
  state_ = PathState::kNone;
  warmup_path_.clear();
}

void TreeManager::invalidate_path_outputs() {
  // Note [Stale outputs].
  std::vector<PathNode*> nodes = path();
  for (PathNode* node : nodes) {
    if (!node->is_warmup()) static_cast<TreeNode*>(node)->outputs().drop_cache();
  }
  for (PathNode* node : nodes) {
    for (const TrackedStorage& storage : node->tracked()) {
      runtime::StoragePtr alive = storage.lock_if_live();
      if (alive == nullptr || alive->is_poisoned()) continue;
      StaleOutputOrigin origin{node->function().spec.name, node->function().spec.mode,
                               storage.first_output,       node->id(),
                               node->is_warmup(),          node->generation()};
      alive->poison(stale_output_message(origin));
      ++counters_.outputs_poisoned;
    }
  }
}

}  // namespace grove::cudagraph_trees
