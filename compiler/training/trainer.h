// Trainer: the training-step API. It builds the forward and backward programs
// (compiler/autodiff) and an optimizer step program (optimizer.h) for a model
// with a loss, lowers each, prepares each with one execution backend
// ("eager" today), and owns the persistent state they share by name: params,
// buffers, the gradient buffers "grad.<param>" and the optimizer state.
//
//   Trainer trainer(model, loss, {.backend = "eager", .optimizer = OptimizerKind::kAdamW});
//   for (...) {
//     runtime::Tensor loss = trainer.step({tokens}, {.lr = schedule(step)});
//   }
//
// Note [Training state addresses]: every persistent tensor is allocated once,
// when the Trainer is built, and every program call receives that same tensor;
// the backward writes gradients into the gradient buffers in place and the
// optimizer updates params and state in place (their lowered functions list
// them in mutated_input_indices). So params, gradients and optimizer state keep
// their addresses across steps, which is what lets a graph backend capture
// the forward, the backward and the optimizer step once and replay them.
// d(loss) is a persistent scalar 1 for the same reason; the hyper-parameters
// are small per-step inputs, so a schedule needs no recompilation, held in
// device scalars that keep their addresses too (Note [Hyperparameters on the
// device], hyperparameter_slots.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/autodiff/training_programs.h"
#include "compiler/lowered_function.h"
#include "compiler/lowering/lower.h"
#include "compiler/training/optimizer.h"

namespace grove::compiler::training {

// One lowered and prepared program (trainer.cc).
struct TrainerStage;
class HyperparameterSlots;

struct TrainerOptions {
  std::string backend = "eager";
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  autodiff::TrainingOptions training;
};

class Trainer {
 public:
  // `model` must contain `loss` (see losses.h); it runs on the model's device,
  // which must be available. Params start at their initializers.
  Trainer(const ir::Program& model, ir::ValueId loss, const TrainerOptions& options = {});
  ~Trainer();
  Trainer(Trainer&&) noexcept;
  Trainer& operator=(Trainer&&) noexcept;

  // One training step on `inputs` (the model's `input` values, in call order):
  // forward, backward into the gradient buffers, then the optimizer update in
  // place with `hyperparameters` (AdamW's step count is steps_taken() + 1).
  // Returns the loss computed before the update, as a device scalar (reading
  // it synchronizes). Errors name the program and the input.
  runtime::Tensor step(const TensorList& inputs, const Hyperparameters& hyperparameters);
  // Forward and backward only: the gradients land in the gradient buffers.
  runtime::Tensor forward_backward(const TensorList& inputs);

  // A param, buffer, gradient buffer or optimizer state tensor by name.
  const runtime::Tensor& state(const std::string& name) const;
  std::vector<std::string> state_names() const;
  int64_t steps_taken() const { return steps_; }
  // Host-to-device copies of hyper-parameter values so far: one per step whose
  // values differ from the previous step's (Note [Hyperparameters on the device]).
  uint64_t hyperparameter_copies() const;
  const std::string& backend() const { return backend_; }

  const autodiff::TrainingPrograms& programs() const { return programs_; }
  const OptimizerProgram& optimizer() const { return optimizer_; }
  // The lowered programs (kernel reports, mutated-input metadata).
  const lowering::LoweredProgram& lowered_forward() const;
  const lowering::LoweredProgram& lowered_backward() const;
  const lowering::LoweredProgram& lowered_optimizer() const;

 private:
  TensorList arguments(const ir::Program& program, const TensorList& inputs) const;

  autodiff::TrainingPrograms programs_;
  OptimizerProgram optimizer_;
  std::string backend_;
  std::unique_ptr<TrainerStage> forward_;
  std::unique_ptr<TrainerStage> backward_;
  std::unique_ptr<TrainerStage> optimizer_step_;
  std::map<std::string, runtime::Tensor> state_;
  runtime::Tensor loss_grad_;
  std::unique_ptr<HyperparameterSlots> hyperparameters_;
  int64_t steps_ = 0;
};

}  // namespace grove::compiler::training
