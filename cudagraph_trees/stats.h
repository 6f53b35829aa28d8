// Counters a tree manager keeps (plain integers, bumped on every path,
// including the replay fast path). The value types live in the runtime
// (runtime/graph_tree_stats.h) so the door can hand them up; their JSON form
// is made at the edges (compiler/backends/backend_stats_json.h).
#pragma once

#include "runtime/graph_tree_stats.h"

namespace grove::cudagraph_trees {

using runtime::TreeCounters;

}  // namespace grove::cudagraph_trees
