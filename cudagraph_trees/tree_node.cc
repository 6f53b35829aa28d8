#include "cudagraph_trees/tree_node.h"

namespace grove::cudagraph_trees {

PathNode::PathNode(PathNode* parent, const RegisteredFunction& function, int64_t id,
                   int64_t generation)
    : parent_(parent),
      function_(&function),
      id_(id),
      generation_(generation),
      depth_(parent == nullptr ? 0 : parent->depth() + 1) {}

ChildSlot& PathNode::slot(FunctionId id) {
  if (ChildSlot* found = find_slot(id)) return *found;
  slot_functions_.push_back(id.value);
  slots_.push_back(std::make_unique<ChildSlot>());
  return *slots_.back();
}

bool PathNode::any_output_live() const {
  for (const TrackedStorage& storage : tracked()) {
    if (storage.live()) return true;
  }
  return false;
}

WarmupNode::WarmupNode(PathNode* parent, const RegisteredFunction& function, int64_t id,
                       int64_t generation, std::vector<TrackedStorage> outputs)
    : PathNode(parent, function, id, generation), outputs_(std::move(outputs)) {
  set_tracked(&outputs_);
}

TreeNode::TreeNode(TreeNode* parent, const RegisteredFunction& function, int64_t id,
                   int64_t generation, Parts parts)
    : PathNode(parent, function, id, generation), parts_(std::move(parts)) {
  set_tracked(&parts_.outputs.storages());
}

TreeNode* TreeNode::add_child(std::unique_ptr<TreeNode> child) {
  TreeNode* raw = child.get();
  slot(child->function_id()).children.push_back(raw);
  children_.push_back(std::move(child));
  return raw;
}

const std::vector<TreeNode*>& TreeNode::children(FunctionId id) const {
  static const std::vector<TreeNode*> kNone;
  const ChildSlot* found = find_slot(id);
  return found != nullptr ? found->children : kNone;
}

size_t TreeNode::num_descendants() const {
  size_t count = 0;
  for (const auto& child : children_) count += 1 + child->num_descendants();
  return count;
}

void TreeNode::check_deaths_after_replay() const {
  for (const TrackedStorage* storage : parts_.expected_dead_after) {
    GROVE_CHECK(!storage->live(), function().describe(), ", graph node ", id(),
                ": an input that died during recording (the caller handed it over with "
                "run(id, std::move(inputs))) is still alive after this replay; pass inputs the "
                "same way on every call, and do not keep references to handed-over inputs");
  }
}

void for_each_node(const std::vector<std::unique_ptr<TreeNode>>& roots,
                   const std::function<void(TreeNode&)>& visit) {
  for (const auto& node : roots) {
    visit(*node);
    for_each_node(node->owned_children(), visit);
  }
}

}  // namespace grove::cudagraph_trees
