// The JSON form of what the door reports (backend_stats.h): made only where
// the report leaves C++ as text (the C API's grove_model_stats_json, the CLI's
// and benchmarks' output). Keys are those the C API has always returned, so
// the text is byte for byte what Python and older callers read.
#pragma once

#include <nlohmann/json.hpp>

#include "compiler/backends/backend_stats.h"

namespace grove::compiler::backends {

// {"reserved_bytes", "allocated_bytes", "peak_allocated_bytes", "segments",
//  "live_blocks", "free_blocks"}
nlohmann::json pool_json(const runtime::PoolStats& pool);
// Every counter by its field name, with "rerecord_reasons", "fallback_calls"
// and "fallback_decisions" as objects.
nlohmann::json counters_json(const runtime::TreeCounters& counters);
// The counters plus "device", "state", "generation", "shut_down", "nodes",
// "roots", "current_node", "functions", "bookkeeping" and "pool" (with
// "live_blocks_at_shutdown" once shut down).
nlohmann::json tree_json(const runtime::GraphTreeStats& tree);
// {} for a backend that keeps nothing; else {"backend", "programs", "tree"?}.
nlohmann::json stats_json(const BackendStats& stats);
// {} when the backend holds no memory; else {"device", "pool"}.
nlohmann::json memory_json(const BackendMemory& memory);

}  // namespace grove::compiler::backends
