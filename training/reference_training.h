// Training on the float64 reference interpreter: the oracle that the
// backend-driven Trainer is compared with, and the way the autodiff tests run
// forward, backward and optimizer programs without code generation.
//
// Persistent state (params, buffers, gradient buffers "grad.<param>",
// optimizer state "<param>.momentum" / ".exp_avg" / ".exp_avg_sq") is kept by
// name: the forward, backward and optimizer programs declare the same
// persistent values under the same names, so each program's persistent inputs
// are looked up in one table, exactly as a device Trainer binds one tensor per
// name at a fixed address.
#pragma once

#include <map>
#include <string>

#include "compiler/autodiff/training_programs.h"
#include "compiler/reference/reference_interpreter.h"
#include "training/optimizer.h"

namespace grove::training {

using compiler::reference::HostTensor;
using compiler::reference::HostTensorList;

// The backward's arguments (one per backward.inputs()) after a forward run on
// `forward_inputs` returned `forward_outputs`; gradient buffers come from
// `persistent` by name, as do params and buffers. `loss_grad` is d(loss).
HostTensorList backward_arguments(const compiler::autodiff::TrainingPrograms& programs,
                                  const HostTensorList& forward_inputs,
                                  const HostTensorList& forward_outputs,
                                  const std::map<std::string, HostTensor>& persistent,
                                  double loss_grad = 1);

struct ForwardBackward {
  HostTensorList outputs;  // the forward's outputs (model outputs, loss, saved)
  double loss = 0;
  HostTensorList gradients;  // one per programs.params
};

// One forward and backward on the reference; gradient buffers start at zero.
ForwardBackward reference_forward_backward(const compiler::autodiff::TrainingPrograms& programs,
                                           const HostTensorList& forward_inputs);

class ReferenceTrainer {
 public:
  // `model` must contain `loss` (see losses.h); params start at their initializers.
  ReferenceTrainer(const compiler::ir::Program& model, compiler::ir::ValueId loss,
                   OptimizerKind kind, const compiler::autodiff::TrainingOptions& options = {});

  // Runs forward, backward and the optimizer step on `inputs` (one per model
  // `input`, in call order) and returns the loss computed before the update.
  double step(const HostTensorList& inputs, const Hyperparameters& hyperparameters);

  const compiler::autodiff::TrainingPrograms& programs() const { return programs_; }
  const OptimizerProgram& optimizer() const { return optimizer_; }
  // A param, buffer, gradient buffer or optimizer state tensor by name.
  const HostTensor& state(const std::string& name) const;
  HostTensor& mutable_state(const std::string& name);
  int64_t steps_taken() const { return steps_; }

 private:
  compiler::autodiff::TrainingPrograms programs_;
  OptimizerProgram optimizer_;
  std::map<std::string, HostTensor> state_;
  int64_t steps_ = 0;
};

// The persistent inputs (params and buffers) of `program`, by name, at their
// initial values.
std::map<std::string, HostTensor> initial_persistent_state(const compiler::ir::Program& program);

}  // namespace grove::training
