// `grove demo`: the README's main job. gpt4x256 inference with "eager" and
// "cudagraphs" on the default device, a bitwise comparison of their outputs,
// a comparison table and the tree's stats; then a few training steps with
// both backends, compared the same way.
#include <cstdio>

#include "cli/commands.h"
#include "cli/common/table.h"
#include "cli/measure.h"
#include "cli/model_setup.h"
#include "cli/progress.h"
#include "cli/report.h"
#include "cli/tree_stats.h"
#include "runtime/device_context.h"

namespace grove::cli {
namespace {

constexpr const char* kDemoModel = "gpt4x256";

struct DemoOptions {
  runtime::Device device;
  std::string models_dir = "benchmarks/models";
  int64_t iters = 0;  // 0: per device
  int64_t train_steps = 5;
};

// The sizes the demo runs at: small on sim (host emulation on a few cores),
// the benchmark's sizes on cuda.
struct DemoSizes {
  int64_t batch, seq, train_batch, iters;
};

DemoSizes sizes_for(runtime::Device device) {
  if (device.type == runtime::DeviceType::kCuda) return {1, 32, 8, 200};
  return {1, 8, 1, 5};
}

// The first place two runs differ, or empty when they agree bit for bit.
std::string first_difference(const Measurement& a, const Measurement& b) {
  if (a.losses.size() != b.losses.size()) return "different numbers of steps";
  for (size_t i = 0; i < a.losses.size(); ++i) {
    if (a.losses[i] != b.losses[i]) {
      return str_cat("loss of step ", i + 1, ": ", a.losses[i], " vs ", b.losses[i]);
    }
  }
  if (a.result_bytes.size() != b.result_bytes.size()) return "different numbers of tensors";
  for (size_t i = 0; i < a.result_bytes.size(); ++i) {
    if (a.result_bytes[i] != b.result_bytes[i]) return str_cat("tensor ", i, " differs");
  }
  return "";
}

// Measures every backend; returns false when a backend's results differ from
// the first backend's.
bool compare_backends(const std::vector<std::string>& backends, bool training,
                      const compiler::ir::Program& program, const DemoOptions& options,
                      int64_t iters) {
  std::vector<Measurement> measurements;
  std::optional<TrainingSetup> setup;
  if (training) setup = add_training_loss(program);
  for (const std::string& backend : backends) {
    MeasureOptions measure{.backend = backend, .warmup = 3, .iters = iters, .seed = 1};
    measurements.push_back(training ? measure_training(*setup, measure)
                                    : measure_inference(program, measure));
  }
  std::printf("\n%s", comparison_table(measurements, training).render().c_str());
  bool identical = true;
  for (size_t i = 1; i < measurements.size(); ++i) {
    std::string difference = first_difference(measurements[0], measurements[i]);
    if (difference.empty()) {
      std::printf("%s %s: bitwise identical to %s (%zu %s compared)\n",
                  measurements[i].backend.c_str(),
                  training ? "losses, params, gradients and optimizer state" : "outputs",
                  measurements[0].backend.c_str(), measurements[i].result_bytes.size(),
                  training ? "state tensors" : "output tensors");
    } else {
      std::printf("%s differs from %s: %s\n", measurements[i].backend.c_str(),
                  measurements[0].backend.c_str(), difference.c_str());
      identical = false;
    }
  }
  if (backends.size() > 1) {
    std::printf("\ntree of CUDA graphs after %s\n%s", training ? "training" : "inference",
                tree_table(measurements.back().tree).render().c_str());
  }
  return identical;
}

DemoOptions parse_demo_options(const ParsedFlags& args) {
  DemoOptions options;
  options.device = parse_device_choice(args.value("--device", "auto"));
  options.models_dir = args.value("--models", options.models_dir);
  if (args.has("--iters")) {
    options.iters = parse_positive_int("--iters", args.value("--iters"), 1000000);
  }
  options.train_steps =
      args.has("--train-steps")
          ? parse_positive_int("--train-steps", args.value("--train-steps"), 1000000)
          : options.train_steps;
  return options;
}

}  // namespace

const CommandSpec& demo_command_spec() {
  static const CommandSpec spec{
      "grove",
      "demo",
      "",
      "gpt4x256 with eager and cudagraphs: latency, identical outputs, tree stats, training",
      "Runs gpt4x256 inference with the eager and cudagraphs backends on the default device\n"
      "(cuda when present, else sim: batch 1, T=32 on cuda; batch 1, T=8 on sim), checks that\n"
      "their outputs are bitwise identical, prints a comparison table and the tree's stats,\n"
      "then trains a few steps (next-token cross entropy, SGD) with both backends and\n"
      "compares losses, params and optimizer state the same way.",
      {
          {"--device", "DEVICE", "auto (default), cuda or sim"},
          {"--iters", "N", "timed inference calls per backend (default 200 on cuda, 5 on sim)"},
          {"--train-steps", "N", "timed training steps per backend (default 5)"},
          {"--models", "DIR", "directory of the benchmark models (default benchmarks/models)"},
      }};
  return spec;
}

int demo_command(const std::vector<std::string>& args) {
  ParsedFlags parsed = parse_flags(demo_command_spec(), args);
  if (parsed.help_requested()) {
    std::fputs(help_text(demo_command_spec()).c_str(), stdout);
    return 0;
  }
  DemoOptions options = parse_demo_options(parsed);
  Stopwatch total;
  DemoSizes sizes = sizes_for(options.device);
  int64_t iters = options.iters > 0 ? options.iters : sizes.iters;

  // The grove binary links the cudagraphs backend (//cli:cli_lib).
  require_backend(kGraphBackend);
  const std::vector<std::string> backends = {"eager", kGraphBackend};
  std::printf("grove demo: %s on %s (%s)\n", kDemoModel, options.device.str().c_str(),
              runtime::device_context(options.device).platform().name().c_str());
  const std::string path = options.models_dir + "/" + kDemoModel + ".json";

  std::printf("\n== inference: batch %lld, T=%lld, f32, %lld timed calls per backend ==\n",
              static_cast<long long>(sizes.batch), static_cast<long long>(sizes.seq),
              static_cast<long long>(iters));
  compiler::ir::Program inference = load_program(
      {path, {{"batch", sizes.batch}, {"seq", sizes.seq}}, runtime::DType::kF32, options.device});
  bool identical = compare_backends(backends, /*training=*/false, inference, options, iters);

  std::printf(
      "\n== training: batch %lld, T=%lld, next-token cross entropy, SGD (momentum 0.9), "
      "%lld timed steps per backend ==\n",
      static_cast<long long>(sizes.train_batch), static_cast<long long>(sizes.seq),
      static_cast<long long>(options.train_steps));
  compiler::ir::Program training = load_program({path,
                                                 {{"batch", sizes.train_batch}, {"seq", sizes.seq}},
                                                 runtime::DType::kF32,
                                                 options.device});
  identical =
      compare_backends(backends, /*training=*/true, training, options, options.train_steps) &&
      identical;

  std::printf("\ndemo finished in %.1f s: %s\n", total.elapsed_s(),
              identical ? "cudagraphs matches eager bit for bit" : "MISMATCH between backends");
  if (!identical) {
    throw Error(
        str_cat("demo: the ", kGraphBackend,
                " backend's results differ from eager (see above); this is a bug in grove"));
  }
  return 0;
}

}  // namespace grove::cli
