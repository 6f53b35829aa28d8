// What binding a recorded node's inputs for one replay needs besides the
// inputs: the device, the stream, the node's graph and the tree's counters.
#pragma once

#include "cudagraph_trees/stats.h"
#include "runtime/graph_recording.h"
#include "runtime/platform.h"

namespace grove::cudagraph_trees {

struct ReplayContext {
  runtime::Platform& platform;
  runtime::StreamHandle stream;
  runtime::GraphRecording* graph;  // null for a kernel-free function
  TreeCounters& counters;
};

}  // namespace grove::cudagraph_trees
