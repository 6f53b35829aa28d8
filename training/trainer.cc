#include "training/trainer.h"

#include <map>

#include "runtime/device_context.h"
#include "runtime/error.h"
#include "training/hyperparameter_slots.h"

namespace grove::training {

using runtime::Tensor;

Trainer::Trainer(const compiler::ir::Program& model, compiler::ir::ValueId loss,
                 const TrainerOptions& options)
    : programs_(compiler::autodiff::build_training_programs(model, loss, options.training)),
      optimizer_(build_optimizer_program(programs_.forward, programs_.params, options.optimizer)),
      backend_(options.backend) {
  GROVE_CHECK(programs_.gradient_storage == compiler::autodiff::GradientStorage::kPersistentBuffers,
              "Trainer: the optimizer reads gradient buffers; keep "
              "TrainingOptions::gradient_storage = kPersistentBuffers");
  runtime::Device device = model.device();
  GROVE_CHECK_AS(DeviceError, runtime::device_available(device), "Trainer for '", model.name(),
                 "': device ", device.str(), " is not available here; build the model for ",
                 runtime::default_device().str(), " instead");
  execution_ = compiler::backends::make_backend(backend_);
  forward_ = compile_stage(programs_.forward, compiler::backends::Stage::kForward);
  // The backward and the optimizer step go through their hooks where the options give one.
  auto compile_hooked = [this](const BackwardCompiler& hook, const compiler::ir::Program& program,
                               compiler::backends::Stage stage) {
    if (!hook) return compile_stage(program, stage);
    return hook(program, [this, stage](const compiler::ir::Program& rewritten,
                                       const StateGroups& contiguous_state) {
      return compile_stage(rewritten, stage, contiguous_state);
    });
  };
  backward_ = compile_hooked(options.compile_backward, programs_.backward,
                             compiler::backends::Stage::kBackward);
  optimizer_step_ = compile_hooked(options.compile_optimizer, optimizer_.program,
                                   compiler::backends::Stage::kOptimizer);
  plan_backward_sources();
  const compiler::ir::Value& loss_grad =
      programs_.backward.value(programs_.backward.inputs().at(0));
  loss_grad_ = Tensor::scalar(1.0, loss_grad.type.dtype, device);
  const size_t hyperparameter_count = optimizer_.hyperparameter_names.size();
  GROVE_CHECK(optimizer_step_->input_names().size() == hyperparameter_count, "Trainer: program '",
              optimizer_.program.name(), "' takes ", optimizer_step_->input_names().size(),
              " inputs, expected its ", hyperparameter_count, " hyper-parameters");
  hyperparameters_ = std::make_unique<HyperparameterSlots>(hyperparameter_count, device);
}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;

void Trainer::lay_out_contiguously(const compiler::ir::Program& program,
                                   const StateGroups& groups) {
  // Note [Gradient bucket in one buffer].
  std::map<std::string, const compiler::ir::Value*> persistent;
  for (compiler::ir::ValueId id : program.inputs()) {
    const compiler::ir::Value& value = program.value(id);
    if (value.is_persistent()) persistent.emplace(value.name, &value);
  }
  auto padded_numel = [](const compiler::ir::TensorType& type) {
    const auto per = kStateAlignmentBytes / static_cast<int64_t>(runtime::dtype_size(type.dtype));
    return (type.numel() + per - 1) / per * per;
  };
  for (const std::vector<std::string>& group : groups) {
    std::vector<const compiler::ir::Value*> values;
    for (const std::string& name : group) {
      auto found = persistent.find(name);
      GROVE_CHECK(found != persistent.end(), "Trainer: '", name,
                  "' of a contiguous state group "
                  "is not a persistent input of program '",
                  program.name(), "'");
      if (state_.count(name) == 0) values.push_back(found->second);
    }
    for (size_t first = 0; first < values.size();) {
      const runtime::DType dtype = values[first]->type.dtype;
      size_t end = first;
      int64_t total = 0;
      for (; end < values.size() && values[end]->type.dtype == dtype; ++end) {
        total += padded_numel(values[end]->type);
      }
      const runtime::Device device = values[first]->type.device;
      Tensor storage = Tensor::empty({total}, dtype, device);
      int64_t offset = storage.offset();
      for (size_t i = first; i < end; ++i) {
        const compiler::ir::Value& value = *values[i];
        Tensor slot(storage.storage(), value.type.shape,
                    runtime::contiguous_strides(value.type.shape), offset, dtype);
        slot.copy_from_host(
            compiler::backends::initial_tensor(value, device).to_host_bytes().data());
        state_.emplace(value.name, slot);
        offset += padded_numel(value.type);
      }
      first = end;
    }
  }
}

compiler::backends::CompiledModel Trainer::compile_stage(const compiler::ir::Program& program,
                                                         compiler::backends::Stage stage,
                                                         const StateGroups& contiguous_state) {
  lay_out_contiguously(program, contiguous_state);
  compiler::backends::CompileOptions options;
  options.backend = backend_;
  options.stage = stage;
  // Note [Training state addresses]: one tensor per persistent name, for good.
  auto bind_state = [this](const compiler::ir::Value& value) {
    auto [found, inserted] = state_.try_emplace(value.name);
    if (inserted) found->second = compiler::backends::initial_tensor(value, value.type.device);
    return found->second;
  };
  return compiler::backends::compile(program, options, bind_state, execution_);
}

void Trainer::plan_backward_sources() {
  // Note [Argument sources]: position of each forward input among its call inputs.
  const compiler::ir::Program& forward = programs_.forward;
  std::vector<std::optional<size_t>> call_input_of(forward.inputs().size());
  size_t call_inputs = 0;
  for (size_t i = 0; i < forward.inputs().size(); ++i) {
    if (!forward.value(forward.inputs()[i]).is_persistent()) call_input_of[i] = call_inputs++;
  }
  const compiler::ir::Program& backward = backward_->program();
  GROVE_CHECK(backward.inputs().size() == programs_.backward_inputs.size() &&
                  backward.outputs().size() == programs_.backward.outputs().size(),
              "Trainer: the compiled backward '", backward.name(), "' has ",
              backward.inputs().size(), " inputs and ", backward.outputs().size(),
              " outputs; autodiff's has ", programs_.backward_inputs.size(), " and ",
              programs_.backward.outputs().size(),
              "; TrainerOptions::compile_backward must keep them");
  using compiler::autodiff::BackwardInput;
  for (size_t i = 0; i < backward.inputs().size(); ++i) {
    const compiler::ir::Value& value = backward.value(backward.inputs()[i]);
    if (value.is_persistent()) continue;  // bound to the state when compiled
    const BackwardInput& source = programs_.backward_inputs[i];
    switch (source.source) {
      case BackwardInput::Source::kLossGradient:
        backward_sources_.push_back({BackwardSource::Kind::kLossGradient, 0});
        break;
      case BackwardInput::Source::kForwardOutput:
        backward_sources_.push_back({BackwardSource::Kind::kForwardOutput, source.index});
        break;
      case BackwardInput::Source::kForwardInput:
        GROVE_CHECK(call_input_of.at(source.index).has_value(), "Trainer: backward input '",
                    value.name, "' is an input, but forward input ", source.index,
                    " is persistent");
        backward_sources_.push_back(
            {BackwardSource::Kind::kCallInput, *call_input_of[source.index]});
        break;
      case BackwardInput::Source::kGradientBuffer:
        GROVE_CHECK(false, "Trainer: backward input '", value.name,
                    "' is a gradient buffer but not persistent");
    }
  }
}

compiler::TensorList Trainer::run_forward(const compiler::TensorList& inputs,
                                          compiler::TensorList* backward_inputs) {
  compiler::TensorList outputs = (*forward_)(inputs);
  backward_inputs->clear();
  backward_inputs->reserve(backward_sources_.size());
  for (const BackwardSource& source : backward_sources_) {
    switch (source.kind) {
      case BackwardSource::Kind::kLossGradient:
        backward_inputs->push_back(loss_grad_);
        break;
      case BackwardSource::Kind::kForwardOutput:
        backward_inputs->push_back(outputs[source.index]);
        break;
      case BackwardSource::Kind::kCallInput:
        backward_inputs->push_back(inputs[source.index]);
        break;
    }
  }
  return outputs;
}

Tensor Trainer::forward_backward(const compiler::TensorList& inputs) {
  compiler::TensorList backward_inputs;
  compiler::TensorList outputs = run_forward(inputs, &backward_inputs);
  (*backward_)(backward_inputs);
  return outputs.at(programs_.loss_output);
}

Trainer::PendingBackward Trainer::forward(const compiler::TensorList& inputs) {
  PendingBackward pending;
  compiler::TensorList outputs = run_forward(inputs, &pending.backward_inputs);
  pending.loss = outputs.at(programs_.loss_output);
  return pending;
}

void Trainer::backward(const PendingBackward& pending) { (*backward_)(pending.backward_inputs); }

compiler::TensorList Trainer::backward_arguments(const compiler::TensorList& inputs, Tensor* loss) {
  compiler::TensorList backward_inputs;
  compiler::TensorList outputs = run_forward(inputs, &backward_inputs);
  if (loss != nullptr) *loss = outputs.at(programs_.loss_output);
  const compiler::ir::Program& backward = backward_->program();
  compiler::TensorList arguments;
  arguments.reserve(backward.inputs().size());
  size_t next = 0;
  for (compiler::ir::ValueId id : backward.inputs()) {
    const compiler::ir::Value& value = backward.value(id);
    arguments.push_back(value.is_persistent() ? state_.at(value.name) : backward_inputs[next++]);
  }
  return arguments;
}

Tensor Trainer::step(const compiler::TensorList& inputs, const Hyperparameters& hyperparameters) {
  Tensor loss = forward_backward(inputs);  // the saved activations die with the backward
  // Note [Hyperparameters on the device].
  (*optimizer_step_)(
      hyperparameters_->write(optimizer_.hyperparameter_values(hyperparameters, steps_ + 1)));
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

}  // namespace grove::training
