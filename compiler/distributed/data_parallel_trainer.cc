#include "compiler/distributed/data_parallel_trainer.h"

#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"
#include "compiler/training/training_stage.h"
#include "runtime/collectives/communicator.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace grove::compiler::distributed {

using runtime::Tensor;

DataParallelTrainer::DataParallelTrainer(const ir::Program& model, ir::ValueId loss,
                                         const DataParallelOptions& options)
    : programs_(autodiff::build_training_programs(model, loss, options.trainer.training)),
      optimizer_(training::build_optimizer_program(programs_.forward, programs_.params,
                                                   options.trainer.optimizer)),
      backend_(options.trainer.backend) {
  GROVE_CHECK(programs_.gradient_storage == autodiff::GradientStorage::kPersistentBuffers,
              "DataParallelTrainer: the optimizer reads gradient buffers; keep "
              "TrainingOptions::gradient_storage = kPersistentBuffers");
  const runtime::Device device = model.device();
  GROVE_CHECK_AS(DeviceError, runtime::device_available(device), "DataParallelTrainer for '",
                 model.name(), "': device ", device.str(), " is not available here");
  runtime::collectives::Communicator& communicator = runtime::collectives::communicator_for(device);
  rank_ = communicator.rank();
  world_size_ = communicator.world_size();
  backward_ = add_gradient_all_reduce(programs_.backward, options.all_reduce, &buckets_);
  forward_ =
      training::prepare_training_stage(programs_.forward, backend_, backends::Stage::kForward);
  backward_stage_ =
      training::prepare_training_stage(backward_, backend_, backends::Stage::kBackward);
  if (options.all_reduce.overlap && backward_stage_->lowered.segments().size() > 1) {
    // Note [Communication stream]: a graph backend captures each segment on
    // its own, and a fork must be joined within the capture that made it; a
    // backward in several segments runs its all-reduces in line instead.
    log(LogLevel::kInfo,
        str_cat("DataParallelTrainer for '", model.name(), "': the backward has ",
                backward_stage_->lowered.segments().size(),
                " segments; gradient all-reduces run on the compute stream (no overlap)"));
    AllReduceOptions in_line = options.all_reduce;
    in_line.overlap = false;
    backward_ = add_gradient_all_reduce(programs_.backward, in_line, &buckets_);
    backward_stage_ =
        training::prepare_training_stage(backward_, backend_, backends::Stage::kBackward);
  }
  overlap_ = options.all_reduce.overlap && backward_stage_->lowered.segments().size() <= 1;
  optimizer_step_ =
      training::prepare_training_stage(optimizer_.program, backend_, backends::Stage::kOptimizer);
  // Note [Training state addresses] (trainer.h): one tensor per persistent name.
  for (const ir::Program* program : {&programs_.forward, &backward_, &optimizer_.program}) {
    for (ir::ValueId id : program->inputs()) {
      const ir::Value& value = program->value(id);
      if (value.is_persistent() && !state_.count(value.name)) {
        state_[value.name] = backends::initial_tensor(value, device);
      }
    }
  }
  const ir::Value& loss_grad = backward_.value(backward_.inputs().at(0));
  loss_grad_ = training::scalar_tensor(1.0, loss_grad.type.dtype, device);
}

DataParallelTrainer::~DataParallelTrainer() = default;
DataParallelTrainer::DataParallelTrainer(DataParallelTrainer&&) noexcept = default;
DataParallelTrainer& DataParallelTrainer::operator=(DataParallelTrainer&&) noexcept = default;

TensorList DataParallelTrainer::arguments(const ir::Program& program,
                                          const TensorList& inputs) const {
  TensorList args;
  size_t next = 0;
  size_t expected = program.inputs_of_kind(ir::ValueKind::kInput).size();
  GROVE_CHECK(inputs.size() == expected, "DataParallelTrainer (rank ", rank_, "): program '",
              program.name(), "' takes ", expected,
              " inputs (its `input` values in call order), "
              "found ",
              inputs.size());
  for (ir::ValueId id : program.inputs()) {
    const ir::Value& value = program.value(id);
    args.push_back(value.is_persistent() ? state_.at(value.name) : inputs[next++]);
  }
  return args;
}

TensorList DataParallelTrainer::backward_arguments(const TensorList& inputs, Tensor* loss) {
  TensorList forward_args = arguments(programs_.forward, inputs);
  TensorList outputs = forward_->call(forward_args);
  TensorList backward_args =
      training::backward_arguments(programs_, loss_grad_, forward_args, outputs, state_);
  if (loss != nullptr) *loss = outputs.at(programs_.loss_output);
  return backward_args;
}

Tensor DataParallelTrainer::step(const TensorList& inputs,
                                 const training::Hyperparameters& hyperparameters) {
  const runtime::Device device = programs_.forward.device();
  Tensor loss;
  {
    // The saved activations die with the backward.
    TensorList backward_args = backward_arguments(inputs, &loss);
    backward_stage_->call(backward_args);
  }
  TensorList hyper;
  for (double value : optimizer_.hyperparameter_values(hyperparameters, steps_ + 1)) {
    hyper.push_back(training::scalar_tensor(value, runtime::DType::kF32, device));
  }
  optimizer_step_->call(arguments(optimizer_.program, hyper));
  ++steps_;
  return loss;
}

const Tensor& DataParallelTrainer::state(const std::string& name) const {
  auto found = state_.find(name);
  GROVE_CHECK(found != state_.end(),
              "DataParallelTrainer: no param, buffer, gradient or "
              "optimizer state named '",
              name, "'");
  return found->second;
}

std::vector<std::string> DataParallelTrainer::state_names() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : state_) names.push_back(name);
  return names;
}

const lowering::LoweredProgram& DataParallelTrainer::lowered_backward() const {
  return backward_stage_->lowered;
}

}  // namespace grove::compiler::distributed
