// Trainer: the training-step API. It builds the forward and backward programs
// (compiler/autodiff) and an optimizer step program (optimizer.h) for a model
// with a loss, compiles each through compile() (compiler/backends/compile.h)
// as one stage of a step (backends::Stage) with one execution backend instance
// shared by the three, and owns the persistent state they share by name:
// params, buffers, the gradient buffers "grad.<param>" and the optimizer state.
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
// device], hyperparameter_slots.h). Guarded by
// Trainer.ParamsGradientsAndOptimizerStateKeepTheirAddresses.
//
// Note [Argument sources]: where each argument of a step's programs comes from
// is worked out once, when the Trainer is built: the persistent ones are bound
// to the state when each stage is compiled, the forward takes the caller's
// inputs, the optimizer step the hyper-parameter slots in order, and each
// per-call input of the backward is the loss gradient seed, a forward output
// (a saved activation) or one of the caller's inputs, by position. A step
// looks nothing up by name. Guarded by Trainer.BackwardArgumentsComeFromTheirSources.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/autodiff/training_programs.h"
#include "compiler/backends/compile.h"
#include "compiler/lowered_function.h"
#include "compiler/lowered_program.h"
#include "training/optimizer.h"

namespace grove::training {

class HyperparameterSlots;

// Note [Gradient bucket in one buffer]: a stage compiler may be asked to lay
// groups of persistent tensors out back to back, each group in one storage in
// the order given (a data-parallel gradient bucket, so that its all-reduce
// is one collective over one buffer: Note [Adjacent buffers reduce as one] in
// runtime/collectives/communicator.h). Each tensor is a view of its group's
// storage starting where the previous one ends, rounded up to
// kStateAlignmentBytes (so sizes that are multiples of it leave no gaps);
// a new storage starts where the dtype changes. Tensors that exist already
// (bound by an earlier stage) keep theirs. The layout depends only on the
// names, types and order, so every rank that builds the same program lays
// its buckets out alike. Tested by
// DataParallel.BucketBuffersLieBackToBackAndTrainLikeSeparateBuffersBitwise
// (tests/distributed/data_parallel_test.cc, sim and 2 GPUs).
using StateGroups = std::vector<std::vector<std::string>>;
constexpr int64_t kStateAlignmentBytes = 256;

// Compiles one program of the step with the trainer's backend and state,
// laying `contiguous_state` out first (Note [Gradient bucket in one buffer]).
using StageCompiler = std::function<compiler::backends::CompiledModel(
    const compiler::ir::Program& program, const StateGroups& contiguous_state)>;
// Compiles the backward stage from autodiff's backward program, through
// `compile`; the program it compiles must keep the backward's inputs and
// outputs, in order.
using BackwardCompiler = std::function<compiler::backends::CompiledModel(
    const compiler::ir::Program& backward, const StageCompiler& compile)>;
// Compiles the optimizer step from its program (optimizer.h), through
// `compile`, after the backward; the program it compiles must keep the
// step's inputs and outputs, in order.
using OptimizerCompiler = BackwardCompiler;

struct TrainerOptions {
  std::string backend = "eager";
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  compiler::autodiff::TrainingOptions training;
  // How the backward stage is compiled; empty: autodiff's backward as is.
  // Data-parallel training adds its gradient all-reduces here
  // (distributed/data_parallel_trainer.h). Called only while the
  // Trainer is built.
  BackwardCompiler compile_backward;
  // How the optimizer stage is compiled; empty: the optimizer program as is.
  // Data-parallel training may reduce its last buckets there
  // (distributed/deferred_all_reduce.h). Called only while the Trainer is built.
  OptimizerCompiler compile_optimizer;
};

class Trainer {
 public:
  // `model` must contain `loss` (see losses.h); it runs on the model's device,
  // which must be available. Params start at their initializers.
  Trainer(const compiler::ir::Program& model, compiler::ir::ValueId loss,
          const TrainerOptions& options = {});
  ~Trainer();
  Trainer(Trainer&&) noexcept;
  Trainer& operator=(Trainer&&) noexcept;

  // One training step on `inputs` (the model's `input` values, in call order):
  // forward, backward into the gradient buffers, then the optimizer update in
  // place with `hyperparameters` (AdamW's step count is steps_taken() + 1).
  // Returns the loss computed before the update, as a device scalar (reading
  // it synchronizes). Errors name the program and the input.
  runtime::Tensor step(const compiler::TensorList& inputs, const Hyperparameters& hyperparameters);
  // Forward and backward only: the gradients land in the gradient buffers.
  runtime::Tensor forward_backward(const compiler::TensorList& inputs);
  // A forward whose backward runs later, for micro-batches: several
  // forward()s, then their backward()s in any order, each writing its
  // gradients into the gradient buffers as forward_backward() does.
  struct PendingBackward {
    runtime::Tensor loss;
    compiler::TensorList backward_inputs;  // the backward stage's per-call inputs
  };
  PendingBackward forward(const compiler::TensorList& inputs);
  void backward(const PendingBackward& pending);
  // Runs the forward on `inputs` and returns every argument of the backward
  // program (Program::inputs() order) without running it, for tools and tests
  // that run or capture lowered_backward() themselves; `loss` receives the loss.
  compiler::TensorList backward_arguments(const compiler::TensorList& inputs,
                                          runtime::Tensor* loss = nullptr);

  // A param, buffer, gradient buffer or optimizer state tensor by name.
  const runtime::Tensor& state(const std::string& name) const;
  std::vector<std::string> state_names() const;
  int64_t steps_taken() const { return steps_; }
  // Host-to-device copies of hyper-parameter values so far: one per step whose
  // values differ from the previous step's (Note [Hyperparameters on the device]).
  uint64_t hyperparameter_copies() const;
  const std::string& backend() const { return backend_; }

  const compiler::autodiff::TrainingPrograms& programs() const { return programs_; }
  const OptimizerProgram& optimizer() const { return optimizer_; }
  // The compiled stages; backward_stage().program() is the backward that runs
  // (TrainerOptions::compile_backward may have rewritten autodiff's).
  const compiler::backends::CompiledModel& forward_stage() const { return *forward_; }
  const compiler::backends::CompiledModel& backward_stage() const { return *backward_; }
  const compiler::backends::CompiledModel& optimizer_stage() const { return *optimizer_step_; }
  // The lowered programs (kernel reports, mutated-input metadata).
  const compiler::lowering::LoweredProgram& lowered_forward() const { return forward_->lowered(); }
  const compiler::lowering::LoweredProgram& lowered_backward() const {
    return backward_->lowered();
  }
  const compiler::lowering::LoweredProgram& lowered_optimizer() const {
    return optimizer_step_->lowered();
  }

  // The door to the execution backend the three stages share (CompiledModel's
  // of the same names): its stats and Graphviz picture, the memory it holds,
  // the start of a step, dropping its recordings, the graphs of the last path.
  compiler::backends::BackendStats backend_stats() const { return forward_->backend_stats(); }
  std::string backend_dot() const { return forward_->backend_dot(); }
  compiler::backends::BackendMemory backend_memory() const { return forward_->backend_memory(); }
  void mark_step_begin() const { forward_->mark_step_begin(); }
  void reset_backend() const { forward_->reset_backend(); }
  std::vector<runtime::GraphRecording*> backend_graphs() const {
    return forward_->backend_graphs();
  }

 private:
  // Note [Argument sources]: one per `input` value of the backward, in order.
  struct BackwardSource {
    enum class Kind : uint8_t { kLossGradient, kForwardOutput, kCallInput };
    Kind kind = Kind::kLossGradient;
    size_t index = 0;  // into the forward's outputs or the caller's inputs
  };

  compiler::backends::CompiledModel compile_stage(const compiler::ir::Program& program,
                                                  compiler::backends::Stage stage,
                                                  const StateGroups& contiguous_state = {});
  // Note [Gradient bucket in one buffer].
  void lay_out_contiguously(const compiler::ir::Program& program, const StateGroups& groups);
  void plan_backward_sources();
  // The forward's outputs and the backward's per-call inputs, for `inputs`.
  compiler::TensorList run_forward(const compiler::TensorList& inputs,
                                   compiler::TensorList* backward_inputs);

  compiler::autodiff::TrainingPrograms programs_;
  OptimizerProgram optimizer_;
  std::string backend_;
  std::shared_ptr<compiler::backends::ExecutionBackend> execution_;  // shared by the stages
  std::map<std::string, runtime::Tensor> state_;
  std::optional<compiler::backends::CompiledModel> forward_;
  std::optional<compiler::backends::CompiledModel> backward_;
  std::optional<compiler::backends::CompiledModel> optimizer_step_;
  std::vector<BackwardSource> backward_sources_;
  runtime::Tensor loss_grad_;
  std::unique_ptr<HyperparameterSlots> hyperparameters_;
  int64_t steps_ = 0;
};

}  // namespace grove::training
