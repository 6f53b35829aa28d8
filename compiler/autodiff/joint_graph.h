// The joint graph: a model's forward nodes followed by the nodes that compute
// the gradients of a scalar loss with respect to chosen params, in one
// Program, built by reverse-mode differentiation through the ops' gradient
// rules. build_training_programs (training_programs.h) splits it into the
// forward and backward programs; tests may use it directly.
#pragma once

#include <vector>

#include "compiler/ir/program.h"

namespace grove::compiler::autodiff {

struct JointGraph {
  ir::Program program;
  // Nodes [0, forward_node_count) are the model's nodes, in order, with the
  // model's node names; later nodes compute gradients.
  size_t forward_node_count = 0;
  // Model value id -> joint value id (every model value has one).
  std::vector<ir::ValueId> joint_of_model;
  // The joint input holding d(final objective)/d(loss), a scalar of the loss's
  // dtype (normally 1); it is the last of program.inputs().
  ir::ValueId loss_grad = ir::kNoValue;
  // Per requested param (model value id order of the request): the joint value
  // holding its gradient, or kNoValue when the loss does not depend on it.
  std::vector<ir::ValueId> param_grads;
};

// Differentiates `loss` (a floating scalar value of `model`) with respect to
// `params` (params of `model`; floating). Throws grove::Error naming the node
// when a gradient must flow through an op without a gradient rule, or when the
// loss is not a floating scalar.
JointGraph build_joint_graph(const ir::Program& model, ir::ValueId loss,
                             const std::vector<ir::ValueId>& params);

}  // namespace grove::compiler::autodiff
