#include "cudagraph_trees/dot.h"

#include <sstream>

namespace grove::cudagraph_trees {
namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string node_name(const PathNode& node) {
  return node.id() >= 0 ? str_cat("g", node.id()) : str_cat("w", -node.id());
}

void emit_node(std::ostringstream& dot, const PathNode& node, const PathNode* current) {
  const RegisteredFunction& function = node.function();
  size_t outputs = node.is_warmup() ? node.tracked().size()
                                    : static_cast<const TreeNode&>(node).outputs().records().size();
  dot << "  " << node_name(node) << " [label=\"" << escape(function.spec.name) << "\\n"
      << (node.is_warmup() ? "warm-up " : "graph ") << node.id() << "\\n"
      << compilation_mode_name(function.spec.mode) << "\\n"
      << outputs << (node.is_warmup() ? " tracked outputs" : " outputs");
  if (!node.is_warmup()) {
    // Which inputs the replay copies: "inputs ssmc" (static, managed, copied) by position.
    dot << "\\ninputs ";
    for (InputKind kind : static_cast<const TreeNode&>(node).inputs().kinds())
      dot << input_kind_name(kind)[0];
  }
  dot << "\"";
  if (node.is_warmup()) dot << ", style=dashed";
  if (&node == current) dot << ", penwidth=3";
  dot << "];\n";
  if (node.parent() != nullptr) {
    dot << "  " << node_name(*node.parent()) << " -> " << node_name(node) << ";\n";
  }
}

void emit_subtree(std::ostringstream& dot, const TreeNode& node, const PathNode* current) {
  emit_node(dot, node, current);
  for (const auto& child : node.owned_children()) emit_subtree(dot, *child, current);
}

}  // namespace

std::string tree_dot(const std::vector<std::unique_ptr<TreeNode>>& roots,
                     const std::vector<const WarmupNode*>& warmup_path, const PathNode* current) {
  std::ostringstream dot;
  dot << "digraph cudagraph_tree {\n  node [shape=box];\n";
  for (const auto& root : roots) emit_subtree(dot, *root, current);
  for (const WarmupNode* node : warmup_path) emit_node(dot, *node, current);
  dot << "}\n";
  return dot.str();
}

}  // namespace grove::cudagraph_trees
