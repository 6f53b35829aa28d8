#include "cudagraph_trees/stats.h"

#include <nlohmann/json.hpp>

namespace grove::cudagraph_trees {

nlohmann::json counters_json(const TreeCounters& counters) {
  nlohmann::json json;
  json["warmups"] = counters.warmups;
  json["recordings"] = counters.recordings;
  json["replays"] = counters.replays;
  json["eager_calls"] = counters.eager_calls;
  json["checkpoint_restores"] = counters.checkpoint_restores;
  json["rerecords"] = counters.rerecords;
  json["rerecord_reasons"] = counters.rerecord_reasons;
  json["fallback_calls"] = counters.fallback_calls;
  json["fallback_decisions"] = counters.fallback_decisions;
  json["outputs_poisoned"] = counters.outputs_poisoned;
  json["state_tensors_moved"] = counters.state_tensors_moved;
  json["outputs_overwritten"] = counters.outputs_overwritten;
  json["outputs_cloned"] = counters.outputs_cloned;
  json["demoted_inputs"] = counters.demoted_inputs;
  json["pending_backward_blocks"] = counters.pending_backward_blocks;
  json["capture_failures"] = counters.capture_failures;
  json["input_copies"] = counters.input_copies;
  json["input_copies_in_graph"] = counters.input_copies_in_graph;
  json["copy_source_patches"] = counters.copy_source_patches;
  json["staged_input_copies"] = counters.staged_input_copies;
  json["input_patches"] = counters.input_patches;
  json["zero_copy_refusals"] = counters.zero_copy_refusals;
  json["input_copy_backs"] = counters.input_copy_backs;
  json["zero_copy_inputs"] = counters.zero_copy_inputs;
  json["graph_copy_inputs"] = counters.graph_copy_inputs;
  json["copy_back_inputs"] = counters.copy_back_inputs;
  json["static_input_writes"] = counters.static_input_writes;
  json["managed_input_writes"] = counters.managed_input_writes;
  return json;
}

nlohmann::json pool_json(const runtime::PoolStats& stats) {
  return nlohmann::json{{"reserved_bytes", stats.reserved_bytes},
                        {"allocated_bytes", stats.allocated_bytes},
                        {"peak_allocated_bytes", stats.peak_allocated_bytes},
                        {"segments", stats.segments},
                        {"live_blocks", stats.live_blocks},
                        {"free_blocks", stats.free_blocks}};
}

}  // namespace grove::cudagraph_trees
