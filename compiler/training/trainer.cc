#include "compiler/training/trainer.h"

#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"
#include "compiler/training/hyperparameter_slots.h"
#include "compiler/training/training_stage.h"
#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::compiler::training {

using runtime::Tensor;

Trainer::Trainer(const ir::Program& model, ir::ValueId loss, const TrainerOptions& options)
    : programs_(autodiff::build_training_programs(model, loss, options.training)),
      optimizer_(build_optimizer_program(programs_.forward, programs_.params, options.optimizer)),
      backend_(options.backend) {
  GROVE_CHECK(programs_.gradient_storage == autodiff::GradientStorage::kPersistentBuffers,
              "Trainer: the optimizer reads gradient buffers; keep "
              "TrainingOptions::gradient_storage = kPersistentBuffers");
  runtime::Device device = model.device();
  GROVE_CHECK_AS(DeviceError, runtime::device_available(device), "Trainer for '", model.name(),
                 "': device ", device.str(), " is not available here; build the model for ",
                 runtime::default_device().str(), " instead");
  forward_ = prepare_training_stage(programs_.forward, backend_, backends::Stage::kForward);
  backward_ = prepare_training_stage(programs_.backward, backend_, backends::Stage::kBackward);
  optimizer_step_ =
      prepare_training_stage(optimizer_.program, backend_, backends::Stage::kOptimizer);
  // Note [Training state addresses]: one tensor per persistent name, for good.
  for (const ir::Program* program :
       {&programs_.forward, &programs_.backward, &optimizer_.program}) {
    for (ir::ValueId id : program->inputs()) {
      const ir::Value& value = program->value(id);
      if (value.is_persistent() && !state_.count(value.name)) {
        state_[value.name] = backends::initial_tensor(value, device);
      }
    }
  }
  const ir::Value& loss_grad = programs_.backward.value(programs_.backward.inputs().at(0));
  loss_grad_ = scalar_tensor(1.0, loss_grad.type.dtype, device);
  hyperparameters_ =
      std::make_unique<HyperparameterSlots>(optimizer_.hyperparameter_names.size(), device);
}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;

TensorList Trainer::arguments(const ir::Program& program, const TensorList& inputs) const {
  TensorList args;
  size_t next = 0;
  size_t expected = program.inputs_of_kind(ir::ValueKind::kInput).size();
  GROVE_CHECK(inputs.size() == expected, "Trainer: program '", program.name(), "' takes ", expected,
              " inputs (its `input` values in call order), found ", inputs.size());
  for (ir::ValueId id : program.inputs()) {
    const ir::Value& value = program.value(id);
    args.push_back(value.is_persistent() ? state_.at(value.name) : inputs[next++]);
  }
  return args;
}

Tensor Trainer::forward_backward(const TensorList& inputs) {
  TensorList forward_args = arguments(programs_.forward, inputs);
  TensorList outputs = forward_->call(forward_args);
  TensorList backward_args =
      backward_arguments(programs_, loss_grad_, forward_args, outputs, state_);
  backward_->call(backward_args);
  return outputs.at(programs_.loss_output);
}

Tensor Trainer::step(const TensorList& inputs, const Hyperparameters& hyperparameters) {
  Tensor loss = forward_backward(inputs);
  // Note [Hyperparameters on the device].
  const TensorList& hyper =
      hyperparameters_->write(optimizer_.hyperparameter_values(hyperparameters, steps_ + 1));
  optimizer_step_->call(arguments(optimizer_.program, hyper));
  ++steps_;
  return loss;
}

uint64_t Trainer::hyperparameter_copies() const { return hyperparameters_->copies(); }

const Tensor& Trainer::state(const std::string& name) const {
  auto found = state_.find(name);
  GROVE_CHECK(found != state_.end(),
              "Trainer: no param, buffer, gradient or optimizer state named '", name, "'");
  return found->second;
}

std::vector<std::string> Trainer::state_names() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : state_) names.push_back(name);
  return names;
}

const lowering::LoweredProgram& Trainer::lowered_forward() const { return forward_->lowered; }
const lowering::LoweredProgram& Trainer::lowered_backward() const { return backward_->lowered; }
const lowering::LoweredProgram& Trainer::lowered_optimizer() const {
  return optimizer_step_->lowered;
}

}  // namespace grove::compiler::training
