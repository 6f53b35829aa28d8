#include "training/reference_training.h"

#include "runtime/error.h"

namespace grove::training {

namespace {

using compiler::autodiff::BackwardInput;

// Arguments for `program`: its persistent inputs from `persistent` by name,
// its `input`s from `inputs` in order.
HostTensorList arguments(const compiler::ir::Program& program, const HostTensorList& inputs,
                         const std::map<std::string, HostTensor>& persistent) {
  HostTensorList args;
  size_t next = 0;
  for (compiler::ir::ValueId id : program.inputs()) {
    const compiler::ir::Value& value = program.value(id);
    if (value.is_persistent()) {
      auto found = persistent.find(value.name);
      GROVE_CHECK(found != persistent.end(), "reference training: program '", program.name(),
                  "' reads ", compiler::ir::value_kind_name(value.kind), " '", value.name,
                  "' which the training state lacks");
      args.push_back(found->second);
    } else {
      GROVE_CHECK(next < inputs.size(), "reference training: program '", program.name(),
                  "' takes more inputs than the ", inputs.size(), " given (missing '", value.name,
                  "')");
      args.push_back(inputs[next++]);
    }
  }
  GROVE_CHECK(next == inputs.size(), "reference training: program '", program.name(), "' takes ",
              next, " inputs, ", inputs.size(), " given");
  return args;
}

void write_back(const compiler::ir::Program& program, const HostTensorList& args,
                std::map<std::string, HostTensor>& persistent) {
  for (size_t i = 0; i < program.inputs().size(); ++i) {
    const compiler::ir::Value& value = program.value(program.inputs()[i]);
    if (value.is_persistent()) persistent[value.name] = args[i];
  }
}

void add_missing(const compiler::ir::Program& program,
                 std::map<std::string, HostTensor>& persistent) {
  for (auto& [name, tensor] : initial_persistent_state(program)) {
    persistent.emplace(name, std::move(tensor));
  }
}

}  // namespace

std::map<std::string, HostTensor> initial_persistent_state(const compiler::ir::Program& program) {
  std::map<std::string, HostTensor> state;
  HostTensorList initial = compiler::reference::initial_state(program);
  for (size_t i = 0; i < program.inputs().size(); ++i) {
    const compiler::ir::Value& value = program.value(program.inputs()[i]);
    if (value.is_persistent()) state[value.name] = initial[i];
  }
  return state;
}

HostTensorList backward_arguments(const compiler::autodiff::TrainingPrograms& programs,
                                  const HostTensorList& forward_inputs,
                                  const HostTensorList& forward_outputs,
                                  const std::map<std::string, HostTensor>& persistent,
                                  double loss_grad) {
  const compiler::ir::Program& backward = programs.backward;
  HostTensorList args;
  for (size_t i = 0; i < backward.inputs().size(); ++i) {
    const compiler::ir::Value& value = backward.value(backward.inputs()[i]);
    const BackwardInput& source = programs.backward_inputs.at(i);
    switch (source.source) {
      case BackwardInput::Source::kLossGradient:
        args.push_back(HostTensor::scalar(loss_grad, value.type.dtype));
        break;
      case BackwardInput::Source::kForwardOutput:
        args.push_back(forward_outputs.at(source.index));
        break;
      case BackwardInput::Source::kForwardInput:
        args.push_back(forward_inputs.at(source.index));
        break;
      case BackwardInput::Source::kGradientBuffer: {
        auto found = persistent.find(value.name);
        GROVE_CHECK(found != persistent.end(), "backward_arguments: no gradient buffer '",
                    value.name, "' in the training state");
        args.push_back(found->second);
        break;
      }
    }
  }
  return args;
}

ForwardBackward reference_forward_backward(const compiler::autodiff::TrainingPrograms& programs,
                                           const HostTensorList& forward_inputs) {
  ForwardBackward result;
  result.outputs = compiler::reference::reference_run(programs.forward, forward_inputs);
  result.loss = result.outputs.at(programs.loss_output).data.at(0);
  std::map<std::string, HostTensor> grads = initial_persistent_state(programs.backward);
  HostTensorList args = backward_arguments(programs, forward_inputs, result.outputs, grads);
  result.gradients = compiler::reference::reference_run(programs.backward, args);
  return result;
}

ReferenceTrainer::ReferenceTrainer(const compiler::ir::Program& model, compiler::ir::ValueId loss,
                                   OptimizerKind kind,
                                   const compiler::autodiff::TrainingOptions& options)
    : programs_(compiler::autodiff::build_training_programs(model, loss, options)),
      optimizer_(build_optimizer_program(programs_.forward, programs_.params, kind)) {
  GROVE_CHECK(programs_.gradient_storage == compiler::autodiff::GradientStorage::kPersistentBuffers,
              "ReferenceTrainer: the optimizer reads gradient buffers; build the training "
              "programs with GradientStorage::kPersistentBuffers");
  add_missing(programs_.forward, state_);
  add_missing(programs_.backward, state_);
  add_missing(optimizer_.program, state_);
}

const HostTensor& ReferenceTrainer::state(const std::string& name) const {
  auto found = state_.find(name);
  GROVE_CHECK(found != state_.end(), "ReferenceTrainer: no param, buffer or state named '", name,
              "'");
  return found->second;
}

HostTensor& ReferenceTrainer::mutable_state(const std::string& name) {
  auto found = state_.find(name);
  GROVE_CHECK(found != state_.end(), "ReferenceTrainer: no param, buffer or state named '", name,
              "'");
  return found->second;
}

double ReferenceTrainer::step(const HostTensorList& inputs,
                              const Hyperparameters& hyperparameters) {
  HostTensorList forward_args = arguments(programs_.forward, inputs, state_);
  HostTensorList outputs =
      compiler::reference::reference_run_in_place(programs_.forward, forward_args);
  write_back(programs_.forward, forward_args, state_);
  double loss = outputs.at(programs_.loss_output).data.at(0);

  HostTensorList backward_args = backward_arguments(programs_, forward_args, outputs, state_);
  compiler::reference::reference_run_in_place(programs_.backward, backward_args);
  write_back(programs_.backward, backward_args, state_);

  ++steps_;
  HostTensorList hyper;
  for (double value : optimizer_.hyperparameter_values(hyperparameters, steps_)) {
    hyper.push_back(HostTensor::scalar(value));
  }
  HostTensorList optimizer_args = arguments(optimizer_.program, hyper, state_);
  compiler::reference::reference_run_in_place(optimizer_.program, optimizer_args);
  write_back(optimizer_.program, optimizer_args, state_);
  return loss;
}

}  // namespace grove::training
