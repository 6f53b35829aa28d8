// The tree of a manager as Graphviz DOT: one box per recorded node (function,
// graph id, mode, output count, each input's kind: s(tatic), m(anaged) or
// c(opied)), edges parent -> child, the current node
// highlighted, warm-up nodes of the current path dashed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cudagraph_trees/tree_node.h"

namespace grove::cudagraph_trees {

std::string tree_dot(const std::vector<std::unique_ptr<TreeNode>>& roots,
                     const std::vector<const WarmupNode*>& warmup_path, const PathNode* current);

}  // namespace grove::cudagraph_trees
