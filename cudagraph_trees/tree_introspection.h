// The read-only views of a tree manager, complete: include this (not only
// tree_manager.h) to use what TreeManager::stats(), dot(), verify(),
// current_node(), all_roots(), roots() and current_path_graphs() return, or
// to walk the tree's nodes (for_each_node). tree_manager.h keeps these types
// incomplete so that callers that only run functions compile less.
#pragma once

#include "cudagraph_trees/input_binding.h"
#include "cudagraph_trees/output_tracking.h"
#include "cudagraph_trees/tree_manager.h"
#include "cudagraph_trees/tree_node.h"
#include "runtime/graph_recording.h"
