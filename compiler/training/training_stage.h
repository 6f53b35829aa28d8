// One program of a training step (forward, backward or optimizer step),
// lowered in training mode and prepared by an execution backend: what the
// Trainer and the data-parallel trainer each run three of.
//
//   std::unique_ptr<TrainerStage> forward = prepare_training_stage(program, "eager", "forward");
//   TensorList outputs = forward->call(arguments);
#pragma once

#include <map>
#include <memory>
#include <string>

#include "compiler/autodiff/training_programs.h"
#include "compiler/backends/stage.h"
#include "compiler/ir/program.h"
#include "compiler/lowered_function.h"
#include "compiler/lowering/lower.h"

namespace grove::compiler::training {

struct TrainerStage {
  lowering::LoweredProgram lowered;
  Callable call;
};

// Verifies `program`, lowers it in training mode and prepares it with
// `backend`; `stage` ("forward", "backward", "optimizer") tells graph backends
// which recording mode to use. Throws grove::Error for an unknown backend or a
// program that does not verify.
std::unique_ptr<TrainerStage> prepare_training_stage(const ir::Program& program,
                                                     const std::string& backend,
                                                     backends::Stage stage);

// A 0-d tensor on `device` holding `value` (the loss gradient seed, a
// hyper-parameter), for the inputs a training step passes to its programs.
runtime::Tensor scalar_tensor(double value, runtime::DType dtype, runtime::Device device);

// The backward's arguments in its input order, each taken from where
// programs.backward_inputs says: the loss gradient seed, a forward output or
// argument, or the gradient buffer of that name in `state`.
TensorList backward_arguments(const autodiff::TrainingPrograms& programs,
                              const runtime::Tensor& loss_gradient, const TensorList& forward_args,
                              const TensorList& forward_outputs,
                              const std::map<std::string, runtime::Tensor>& state);

}  // namespace grove::compiler::training
