#include "compiler/training/training_stage.h"

#include "compiler/backends/backend_registry.h"
#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"

namespace grove::compiler::training {

std::unique_ptr<TrainerStage> prepare_training_stage(const ir::Program& program,
                                                     const std::string& backend,
                                                     backends::Stage stage) {
  program.verify();
  lowering::LowerOptions lower_options;
  lower_options.mode = ops::ExecMode::kTraining;
  lowering::LoweredProgram lowered = lowering::lower(program, lower_options);
  std::unique_ptr<backends::ExecutionBackend> execution = backends::make_backend(backend);
  backends::CompileOptions options;
  options.backend = backend;
  options.stage = stage;
  Callable call = execution->prepare(lowered, options);
  return std::unique_ptr<TrainerStage>(new TrainerStage{std::move(lowered), std::move(call)});
}

runtime::Tensor scalar_tensor(double value, runtime::DType dtype, runtime::Device device) {
  ir::Value spec;
  spec.name = "scalar";
  spec.type = ir::TensorType{{}, dtype, device};
  spec.initializer = ir::constant_init(value);
  return backends::initial_tensor(spec, device);
}

TensorList backward_arguments(const autodiff::TrainingPrograms& programs,
                              const runtime::Tensor& loss_gradient, const TensorList& forward_args,
                              const TensorList& forward_outputs,
                              const std::map<std::string, runtime::Tensor>& state) {
  using autodiff::BackwardInput;
  const ir::Program& backward = programs.backward;
  TensorList arguments;
  arguments.reserve(backward.inputs().size());
  for (size_t i = 0; i < backward.inputs().size(); ++i) {
    const BackwardInput& source = programs.backward_inputs[i];
    switch (source.source) {
      case BackwardInput::Source::kLossGradient:
        arguments.push_back(loss_gradient);
        break;
      case BackwardInput::Source::kForwardOutput:
        arguments.push_back(forward_outputs.at(source.index));
        break;
      case BackwardInput::Source::kForwardInput:
        arguments.push_back(forward_args.at(source.index));
        break;
      case BackwardInput::Source::kGradientBuffer:
        arguments.push_back(state.at(backward.value(backward.inputs()[i]).name));
        break;
    }
  }
  return arguments;
}

}  // namespace grove::compiler::training
