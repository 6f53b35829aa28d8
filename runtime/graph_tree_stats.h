// What a CUDA graph tree reports about itself, as plain values: the counters
// the tree manager bumps, its functions, what its nodes hold on the host and
// its pool. A value type of the runtime (like batch_buckets.h) because the
// tree manager produces it and the door (compiler/backends/backend_stats.h)
// hands it up; JSON is made only where text leaves C++ (the C API, the CLI,
// benchmarks: compiler/backends/backend_stats_json.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/caching_allocator.h"

namespace grove::runtime {

struct TreeCounters {
  uint64_t warmups = 0;
  uint64_t recordings = 0;
  uint64_t replays = 0;
  uint64_t eager_calls = 0;          // eager fallbacks, per call
  uint64_t checkpoint_restores = 0;  // allocator restores before warm-up/recording after a replay
  uint64_t rerecords = 0;            // recordings made because no existing node matched
  uint64_t outputs_poisoned = 0;     // storages invalidated at generation ends
  uint64_t state_tensors_moved = 0;  // kept by warm-ups, moved out of the pool
  uint64_t outputs_overwritten = 0;  // kept replay outputs a later replay overwrote
  uint64_t outputs_cloned = 0;       // kept replay outputs cloned before a later replay
  uint64_t demoted_inputs = 0;       // managed inputs turned into copied inputs
  uint64_t pending_backward_blocks = 0;
  uint64_t capture_failures = 0;
  uint64_t input_copies = 0;           // copied inputs copied into their placeholder (per replay)
  uint64_t input_copies_in_graph = 0;  // those of them copied by the graph's head kernels
  uint64_t copy_source_patches = 0;    // head copy kernels re-pointed at a moved input
  uint64_t input_patches = 0;          // zero-copy inputs bound by patching kernel nodes
  uint64_t zero_copy_refusals = 0;     // replays where a zero-copy input had to be copied
  uint64_t input_copy_backs = 0;       // mutated copied inputs copied back to the caller
  uint64_t zero_copy_inputs = 0;       // copied inputs recorded as zero-copy eligible
  uint64_t graph_copy_inputs = 0;      // copied inputs recorded with a head copy kernel
  uint64_t copy_back_inputs = 0;       // copied inputs recorded with copy-back
  uint64_t staged_input_copies = 0;    // replays whose inputs came from placeholders (staged)
  // The mutation classifier's other cases, counted per recording: inputs the
  // graph writes in place because their address is fixed (types (b) and (c)).
  uint64_t static_input_writes = 0;
  uint64_t managed_input_writes = 0;
  std::map<std::string, uint64_t> rerecord_reasons;    // by invariant failure
  std::map<std::string, uint64_t> fallback_calls;      // by fallback category
  std::map<std::string, uint64_t> fallback_decisions;  // (parent, function) pairs decided eager
};

// One function registered with the tree.
struct TreeFunctionStats {
  int64_t id = 0;
  std::string name;
  std::string mode;  // "inference", "forward", "backward"
  size_t roots = 0;
  size_t warmed_signatures = 0;
  std::optional<std::string> eager_reason;  // when the function always runs eagerly
};

// What the tree's nodes hold on the host besides their graphs.
struct TreeBookkeeping {
  size_t child_slots = 0;
  size_t checkpoint_segments = 0;
  size_t checkpoint_blocks = 0;
  size_t path_list_entries = 0;
  size_t estimated_host_bytes = 0;
};

// A snapshot of one tree manager (TreeManager::stats()).
struct GraphTreeStats {
  TreeCounters counters;
  std::string device;
  std::string state;  // path state: "none", "warmup", "recording", "execution"
  int64_t generation = 0;
  bool shut_down = false;
  size_t nodes = 0;
  size_t roots = 0;
  std::optional<int64_t> current_node;
  std::vector<TreeFunctionStats> functions;
  TreeBookkeeping bookkeeping;
  PoolStats pool;                                 // zero once shut down
  std::optional<size_t> live_blocks_at_shutdown;  // set once shut down
};

}  // namespace grove::runtime
