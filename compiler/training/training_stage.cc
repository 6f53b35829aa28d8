#include "compiler/training/training_stage.h"

#include "compiler/backends/backend_registry.h"
#include "compiler/backends/compile.h"
#include "compiler/ir/builder.h"

namespace grove::compiler::training {

std::unique_ptr<TrainerStage> prepare_training_stage(const ir::Program& program,
                                                     const std::string& backend,
                                                     const std::string& stage) {
  program.verify();
  lowering::LowerOptions lower_options;
  lower_options.mode = ops::ExecMode::kTraining;
  lowering::LoweredProgram lowered = lowering::lower(program, lower_options);
  std::unique_ptr<backends::ExecutionBackend> execution = backends::make_backend(backend);
  backends::CompileOptions options;
  options.backend = backend;
  options.mode = ops::ExecMode::kTraining;
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

}  // namespace grove::compiler::training
