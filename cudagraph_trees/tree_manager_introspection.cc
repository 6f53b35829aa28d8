// TreeManager's read-only views: stats, DOT, verify, the nodes of the tree
// and of the current path (declared in tree_manager.h; tree_introspection.h
// completes the types they return).
#include <set>
#include <sstream>
#include <unordered_set>

#include "cudagraph_trees/dot.h"
#include "cudagraph_trees/tree_introspection.h"
#include "runtime/logging.h"

namespace grove::cudagraph_trees {
namespace {

std::string address_list(const std::set<const void*>& addresses) {
  std::ostringstream text;
  for (const void* address : addresses) text << address << " ";
  return text.str();
}

}  // namespace

const std::vector<TreeNode*>& TreeManager::roots(FunctionId id) const {
  static const std::vector<TreeNode*> kNone;
  return id.value < root_slots_.size() ? root_slots_[id.value].children : kNone;
}

std::vector<runtime::GraphRecording*> TreeManager::current_path_graphs() const {
  std::vector<runtime::GraphRecording*> graphs;
  for (PathNode* node : path()) {
    if (node->is_warmup()) continue;
    if (runtime::GraphRecording* graph = static_cast<TreeNode*>(node)->mutable_graph()) {
      graphs.push_back(graph);
    }
  }
  return graphs;
}

size_t TreeManager::node_count() const {
  size_t count = 0;
  for_each_node(roots_, [&](TreeNode&) { ++count; });
  return count;
}

runtime::GraphTreeStats TreeManager::stats() const {
  runtime::GraphTreeStats stats;
  stats.counters = counters_;
  stats.device = device_.str();
  stats.state = path_state_name(state_);
  stats.generation = generations_.current();
  stats.shut_down = shut_down_;
  stats.nodes = node_count();
  stats.roots = roots_.size();
  if (current_ != nullptr) stats.current_node = current_->id();
  for (const RegisteredFunction& function : registry_.all()) {
    stats.functions.push_back(
        {.id = static_cast<int64_t>(function.id.value),
         .name = function.spec.name,
         .mode = compilation_mode_name(function.spec.mode),
         .roots = roots(function.id).size(),
         .warmed_signatures = function.warmed_signatures.size(),
         .eager_reason =
             function.eager ? std::optional<std::string>(function.eager->message) : std::nullopt});
  }
  stats.bookkeeping = bookkeeping();
  if (shut_down_) {
    stats.live_blocks_at_shutdown = live_blocks_at_shutdown_;
  } else {
    stats.pool = allocator_.stats(pool_);
  }
  return stats;
}

// What the tree's nodes hold on the host besides their graphs, as counts and
// an estimate in bytes: each must grow linearly with the nodes (Note [Child
// slots by function]).
runtime::TreeBookkeeping TreeManager::bookkeeping() const {
  runtime::TreeBookkeeping bookkeeping;
  size_t nodes = 0;
  bookkeeping.child_slots = root_slots_.size();
  for_each_node(roots_, [&](TreeNode& node) {
    ++nodes;
    bookkeeping.child_slots += node.slot_count();
    bookkeeping.checkpoint_segments += node.checkpoint().segments.size();
    for (const runtime::SegmentState& segment : node.checkpoint().segments) {
      bookkeeping.checkpoint_blocks += segment.blocks.size();
    }
    bookkeeping.path_list_entries += node.live_after().size() + node.expected_dead_before().size() +
                                     node.expected_dead_after().size();
  });
  for (const auto& node : warmup_path_) bookkeeping.child_slots += node->slot_count();
  bookkeeping.estimated_host_bytes =
      nodes * sizeof(TreeNode) + bookkeeping.child_slots * sizeof(ChildSlot) +
      bookkeeping.checkpoint_segments * sizeof(runtime::SegmentState) +
      bookkeeping.checkpoint_blocks * sizeof(runtime::BlockState) +
      bookkeeping.path_list_entries * sizeof(const TrackedStorage*);
  return bookkeeping;
}

std::string TreeManager::dot() const {
  std::vector<const WarmupNode*> warmups;
  for (const auto& node : warmup_path_) warmups.push_back(node.get());
  return tree_dot(roots_, warmups, current_);
}

std::unordered_set<const void*> TreeManager::owned_pool_addresses() const {
  std::unordered_set<const void*> owned;
  auto collect = [&](const PathNode& node) {
    for (const TrackedStorage& storage : node.tracked()) {
      runtime::StoragePtr alive = storage.lock_if_live();
      if (alive != nullptr && alive->owns_memory() && !alive->is_poisoned()) {
        owned.insert(storage.address);
      }
    }
  };
  for_each_node(roots_, [&](TreeNode& node) { collect(node); });
  for (const auto& node : warmup_path_) collect(*node);
  return owned;
}

void TreeManager::check_no_foreign_blocks(const RegisteredFunction& function) const {
  // Note [Foreign blocks in the pool].
  std::unordered_set<const void*> owned = owned_pool_addresses();
  for (const runtime::SegmentState& segment : allocator_.checkpoint(pool_).segments) {
    for (const runtime::BlockState& block : segment.blocks) {
      const void* address = static_cast<const char*>(segment.base) + block.offset;
      if (!block.allocated || owned.count(address) > 0) continue;
      throw Error(str_cat(
          function.describe(), " keeps a block of ", block.size, " bytes (at ", address,
          ") of the CUDA graph tree's pool that none of its outputs owns, after its ",
          state_ == PathState::kWarmup ? "warm-up" : "recording",
          ". A body must not cache pool tensors across calls (a workspace): allocate such "
          "buffers outside the captured function and pass them in as static inputs, or return "
          "them as outputs"));
    }
  }
}

void TreeManager::move_kept_state_out_of_pool(const RegisteredFunction& function) {
  // Note [State created inside a function].
  std::vector<size_t> moved =
      allocator_.move_blocks_out_of_pool(pool_, owned_pool_addresses(), capture_stream_);
  if (moved.empty()) return;
  size_t bytes = 0;
  for (size_t size : moved) bytes += size;
  counters_.state_tensors_moved += moved.size();
  log(LogLevel::kInfo,
      str_cat(function.describe(), ": its warm-up kept ", moved.size(), " tensor(s) of ", bytes,
              " bytes in all that it did not return (state created inside the function: a "
              "cache or a buffer made on the first call); they now live in memory of their own, "
              "outside the CUDA graph tree's pool, and are ordinary tensors from here on"));
}

// Note [Inputs in reclaimed pool memory]
// An input that lies in the tree's pool must lie in an allocated block: one a
// live output owns. A free block there is an output whose path ended (a new
// generation reclaimed it) that reached the call without grove's storage, as
// a bare pointer (DLPack hands PyTorch one), so Note [Stale inputs throw
// first] cannot see its poison. The body would allocate over the memory it
// reads; instead the call throws StaleTensorError naming the input. Checked
// before every warm-up and recording (the slow path; replays check their
// inputs' addresses). Test: TreeGenerations.AnInputInReclaimedPoolMemoryThrows.
void TreeManager::check_pool_inputs_are_owned(const RegisteredFunction& function,
                                              const TensorList& inputs) const {
  std::optional<runtime::PoolCheckpoint> blocks;
  for (size_t index = 0; index < inputs.size(); ++index) {
    const runtime::Tensor& input = inputs[index];
    if (!input.defined() || input.nbytes() == 0) continue;
    const auto* address = static_cast<const char*>(input.data_ptr());
    if (!in_pool(address)) continue;
    if (!blocks) blocks = allocator_.checkpoint(pool_);
    for (const runtime::SegmentState& segment : blocks->segments) {
      const auto* base = static_cast<const char*>(segment.base);
      if (address < base || address >= base + segment.size) continue;
      for (const runtime::BlockState& block : segment.blocks) {
        if (address < base + block.offset || address >= base + block.offset + block.size) continue;
        if (block.allocated) break;
        throw StaleTensorError(str_cat(
            function.describe(), ": input ", index, " (at ", input.data_ptr(),
            ") lies in pool memory that no live output owns: it is an output of an earlier "
            "generation whose memory was reclaimed when that generation ended. Run the models "
            "that hand outputs to each other as one invocation (grove_invocation_begin / "
            "grove.invocation()), or clone the output before the next step"));
      }
    }
  }
}

void TreeManager::verify() const {
  GROVE_CHECK(!shut_down_, "verify() of a tree manager that was shut down");
  // The tree: parents, slots and ids agree.
  std::set<int64_t> ids;
  std::string problem;
  auto check_slot = [&](const ChildSlot& slot, size_t f, const TreeNode* parent) {
    for (const TreeNode* child : slot.children) {
      if (child->parent() != parent)
        problem = str_cat("node ", child->id(), " has the wrong parent");
      if (child->function_id().value != f) {
        problem = str_cat("node ", child->id(), " sits in the slot of function ", f);
      }
    }
  };
  for (size_t f = 0; f < root_slots_.size(); ++f) check_slot(root_slots_[f], f, nullptr);
  size_t slotted = 0;
  for (const ChildSlot& slot : root_slots_) slotted += slot.children.size();
  GROVE_CHECK(slotted == roots_.size(), "verify: ", roots_.size(), " roots but ", slotted,
              " in root slots");
  for_each_node(roots_, [&](TreeNode& node) {
    if (!ids.insert(node.id()).second) problem = str_cat("graph id ", node.id(), " repeats");
    size_t in_slots = 0;
    std::set<uint32_t> slot_functions;
    for (size_t i = 0; i < node.slot_count(); ++i) {
      const uint32_t f = node.slot_function(i).value;
      if (!slot_functions.insert(f).second) {
        problem = str_cat("node ", node.id(), " has two slots for function ", f);
      }
      check_slot(node.slot_at(i), f, &node);
      in_slots += node.slot_at(i).children.size();
    }
    if (in_slots != node.owned_children().size()) {
      problem = str_cat("node ", node.id(), " owns ", node.owned_children().size(),
                        " children but its slots list ", in_slots);
    }
  });
  GROVE_CHECK(problem.empty(), "verify: tree inconsistent: ", problem);

  // The path and its state.
  switch (state_) {
    case PathState::kNone:
      GROVE_CHECK(current_ == nullptr && warmup_path_.empty(),
                  "verify: state none with a current node");
      break;
    case PathState::kWarmup:
      GROVE_CHECK(current_ != nullptr && current_->is_warmup() && !warmup_path_.empty() &&
                      current_ == warmup_path_.back().get(),
                  "verify: state warmup but the current node is not the last warm-up node");
      break;
    case PathState::kRecording:
    case PathState::kExecution:
      GROVE_CHECK(current_ != nullptr && !current_->is_warmup() && warmup_path_.empty(),
                  "verify: state ", path_state_name(state_), " needs a graph node as current");
      break;
  }
  for (PathNode* node = current_; node != nullptr; node = node->parent()) {
    GROVE_CHECK(node->parent() == nullptr || node->parent()->depth() + 1 == node->depth(),
                "verify: depth of node ", node->id(), " disagrees with its parent's");
  }

  // The pool: allocated blocks are exactly the live storages the tree tracks
  // that own memory (Note [Replay outputs]).
  std::set<const void*> allocated;
  runtime::PoolCheckpoint snapshot = allocator_.checkpoint(pool_);
  for (const runtime::SegmentState& segment : snapshot.segments) {
    for (const runtime::BlockState& block : segment.blocks) {
      if (block.allocated) allocated.insert(static_cast<const char*>(segment.base) + block.offset);
    }
  }
  std::set<const void*> owning;
  auto collect = [&](const PathNode& node) {
    for (const TrackedStorage& storage : node.tracked()) {
      runtime::StoragePtr alive = storage.lock_if_live();
      if (alive != nullptr && alive->owns_memory() && !alive->is_poisoned()) {
        owning.insert(storage.address);
      }
    }
  };
  for_each_node(roots_, [&](TreeNode& node) { collect(node); });
  for (const auto& node : warmup_path_) collect(*node);
  std::set<const void*> untracked, unallocated;
  for (const void* address : allocated) {
    if (owning.count(address) == 0) untracked.insert(address);
  }
  for (const void* address : owning) {
    if (allocated.count(address) == 0) unallocated.insert(address);
  }
  GROVE_CHECK(untracked.empty() && unallocated.empty(), "verify: pool ", pool_.value, " of ",
              device_.str(), " disagrees with the tree: allocated blocks no tracked output owns: [",
              address_list(untracked), "]; tracked outputs whose block is free: [",
              address_list(unallocated),
              "]. A function body probably keeps a pool tensor alive outside its outputs");
  if (state_ == PathState::kWarmup || state_ == PathState::kRecording) {
    for (PathNode* node = current_; node != nullptr; node = node->parent()) {
      for (const TrackedStorage& storage : node->tracked()) {
        runtime::StoragePtr alive = storage.lock_if_live();
        GROVE_CHECK(alive == nullptr || alive->owns_memory(), "verify: live output ",
                    storage.first_output, " of node ", node->id(),
                    " does not own its block while the path allocates");
      }
    }
  }
}

}  // namespace grove::cudagraph_trees
