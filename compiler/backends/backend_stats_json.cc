#include "compiler/backends/backend_stats_json.h"

namespace grove::compiler::backends {

nlohmann::json pool_json(const runtime::PoolStats& pool) {
  return nlohmann::json{{"reserved_bytes", pool.reserved_bytes},
                        {"allocated_bytes", pool.allocated_bytes},
                        {"peak_allocated_bytes", pool.peak_allocated_bytes},
                        {"segments", pool.segments},
                        {"live_blocks", pool.live_blocks},
                        {"free_blocks", pool.free_blocks}};
}

nlohmann::json counters_json(const runtime::TreeCounters& counters) {
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

nlohmann::json tree_json(const runtime::GraphTreeStats& tree) {
  nlohmann::json json = counters_json(tree.counters);
  json["device"] = tree.device;
  json["state"] = tree.state;
  json["generation"] = tree.generation;
  json["shut_down"] = tree.shut_down;
  json["nodes"] = tree.nodes;
  json["roots"] = tree.roots;
  json["current_node"] = tree.current_node ? nlohmann::json(*tree.current_node) : nlohmann::json();
  nlohmann::json functions = nlohmann::json::array();
  for (const runtime::TreeFunctionStats& function : tree.functions) {
    nlohmann::json entry{{"id", function.id},
                         {"name", function.name},
                         {"mode", function.mode},
                         {"roots", function.roots},
                         {"warmed_signatures", function.warmed_signatures}};
    if (function.eager_reason) entry["eager_reason"] = *function.eager_reason;
    functions.push_back(std::move(entry));
  }
  json["functions"] = std::move(functions);
  const runtime::TreeBookkeeping& bookkeeping = tree.bookkeeping;
  json["bookkeeping"] = {{"child_slots", bookkeeping.child_slots},
                         {"checkpoint_segments", bookkeeping.checkpoint_segments},
                         {"checkpoint_blocks", bookkeeping.checkpoint_blocks},
                         {"path_list_entries", bookkeeping.path_list_entries},
                         {"estimated_host_bytes", bookkeeping.estimated_host_bytes}};
  json["pool"] = pool_json(tree.pool);
  if (tree.live_blocks_at_shutdown) {
    json["pool"]["live_blocks_at_shutdown"] = *tree.live_blocks_at_shutdown;
  }
  return json;
}

nlohmann::json stats_json(const BackendStats& stats) {
  if (stats.backend.empty()) return nlohmann::json::object();
  nlohmann::json programs = nlohmann::json::array();
  for (const ProgramStats& program : stats.programs) {
    nlohmann::json segments = nlohmann::json::array();
    for (const SegmentStats& segment : program.segments) {
      nlohmann::json entry{{"index", segment.index}, {"captured", segment.captured}};
      if (!segment.captured) {
        entry["reason"] = segment.reason;
        entry["category"] = segment.category;
      }
      segments.push_back(std::move(entry));
    }
    programs.push_back({{"model", program.model},
                        {"device", program.device},
                        {"calls", program.calls},
                        {"fallback_segments", program.fallback_segments},
                        {"pool_mutation_fallbacks", program.pool_mutation_fallbacks},
                        {"segments", std::move(segments)},
                        {"lowered", program.lowered}});
  }
  nlohmann::json json{{"backend", stats.backend}, {"programs", std::move(programs)}};
  if (stats.tree) json["tree"] = tree_json(*stats.tree);
  return json;
}

nlohmann::json memory_json(const BackendMemory& memory) {
  if (!memory.device) return nlohmann::json::object();
  return nlohmann::json{{"device", memory.device->str()}, {"pool", pool_json(memory.pool)}};
}

}  // namespace grove::compiler::backends
