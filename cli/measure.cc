#include "cli/measure.h"

#include "cli/progress.h"
#include "cli/weights_io.h"
#include "compiler/backends/compile.h"
#include "runtime/device_context.h"
#include "training/trainer.h"
#include "weights/model_weights.h"

namespace grove::cli {
namespace {

using compiler::TensorList;

// Owns a fresh stream for the measurement, current while it lives.
class MeasurementStream {
 public:
  explicit MeasurementStream(runtime::Device device)
      : context_(runtime::device_context(device)),
        stream_(context_.create_stream()),
        guard_(device, stream_) {}
  void synchronize() { context_.platform().synchronize_stream(stream_); }

 private:
  runtime::DeviceContext& context_;
  runtime::StreamHandle stream_;
  runtime::StreamGuard guard_;
};

bool uses_tree(const std::string& backend) { return backend == kGraphBackend; }

std::string phase_label(const std::string& what, const std::string& model,
                        const std::string& backend) {
  return what + " " + model + " (" + backend + ")";
}

// Times `call` options.iters times after options.warmup untimed calls.
// `door` is the CompiledModel or Trainer whose backend ran the calls.
template <typename Door, typename Call, typename AfterCall>
void time_calls(const MeasureOptions& options, const Door& door, const std::string& model,
                const char* unit, MeasurementStream& stream, Measurement& result, Call call,
                AfterCall after_call) {
  const bool tree = uses_tree(options.backend);
  {
    Phase phase(
        phase_label(str_cat("warm up (", options.warmup, " ", unit, ")"), model, options.backend));
    Stopwatch watch;
    for (int64_t i = 0; i < options.warmup; ++i) {
      auto outputs = call();
      stream.synchronize();
      after_call(outputs);
      phase.progress(i + 1, options.warmup, unit);
    }
    result.warmup_s = watch.elapsed_s();
  }
  Phase phase(
      phase_label(str_cat("measure (", options.iters, " ", unit, ")"), model, options.backend));
  nlohmann::json before = tree ? tree_in(door.backend_stats()) : nlohmann::json();
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(options.iters));
  for (int64_t i = 0; i < options.iters; ++i) {
    Stopwatch watch;
    auto outputs = call();
    stream.synchronize();
    samples.push_back(watch.elapsed_us());
    after_call(outputs);
    phase.progress(i + 1, options.iters, unit);
  }
  result.latency = summarize(samples);
  if (tree) {
    result.tree = tree_in(door.backend_stats());
    result.tree_dot = door.backend_dot();
    result.timed_activity = tree_activity(before, result.tree);
  }
}

}  // namespace

Measurement measure_inference(const compiler::ir::Program& program, const MeasureOptions& options) {
  require_backend(options.backend);
  Measurement result;
  result.backend = options.backend;
  const runtime::Device device = program.device();
  std::optional<compiler::backends::CompiledModel> model;
  {
    Phase phase(phase_label("compile", program.name(), options.backend));
    Stopwatch watch;
    model = compiler::backends::compile(program, {.backend = options.backend});
    if (options.weights != nullptr) {
      result.weight_bytes = weights::load_weights(*model, *options.weights);
    }
    result.compile_s = watch.elapsed_s();
  }
  compiler::lowering::KernelReport report = model->kernel_report();
  result.kernels_per_call = report.kernels.size();
  result.gemms_per_call = report.library_gemms;

  MeasurementStream stream(device);
  TensorList inputs = options.inputs_path.empty()
                          ? random_inputs(model->program(), device, options.seed)
                          : inputs_from_file(model->program(), device, options.inputs_path);
  time_calls(
      options, *model, program.name(), "calls", stream, result, [&] { return (*model)(inputs); },
      [&](const TensorList& outputs) {
        result.result_bytes.clear();
        for (const runtime::Tensor& output : outputs) {
          result.result_bytes.push_back(output.to_host_bytes());
        }
        result.outputs_text = describe_outputs(outputs);
      });
  return result;
}

Measurement measure_training(const TrainingSetup& setup, const MeasureOptions& options) {
  require_backend(options.backend);
  Measurement result;
  result.backend = options.backend;
  result.loss_name = setup.loss_name;
  const runtime::Device device = setup.program.device();
  std::optional<training::Trainer> trainer;
  {
    Phase phase(phase_label("compile training step of", setup.program.name(), options.backend));
    Stopwatch watch;
    trainer.emplace(setup.program, setup.loss,
                    training::TrainerOptions{.backend = options.backend,
                                             .optimizer = training::OptimizerKind::kSgdMomentum});
    result.compile_s = watch.elapsed_s();
  }
  for (const compiler::lowering::LoweredProgram* lowered :
       {&trainer->lowered_forward(), &trainer->lowered_backward(), &trainer->lowered_optimizer()}) {
    compiler::lowering::KernelReport report = lowered->kernel_report();
    result.kernels_per_call += report.kernels.size();
    result.gemms_per_call += report.library_gemms;
  }
  MeasurementStream stream(device);
  TensorList inputs = random_inputs(setup.program, device, options.seed);
  training::Hyperparameters hyperparameters;
  hyperparameters.lr = options.learning_rate;
  hyperparameters.momentum = 0.9;
  time_calls(
      options, *trainer, setup.program.name(), "steps", stream, result,
      [&] {
        // As PyTorch's cudagraph_mark_step_begin(): one training step is one
        // generation of the tree, so the forward's saved activations stay
        // alive for the backward and the optimizer step.
        trainer->mark_step_begin();
        return trainer->step(inputs, hyperparameters);
      },
      [&](const runtime::Tensor& loss) { result.losses.push_back(loss.to_doubles().at(0)); });
  for (const std::string& name : trainer->state_names()) {
    result.result_bytes.push_back(trainer->state(name).to_host_bytes());
  }
  return result;
}

}  // namespace grove::cli
