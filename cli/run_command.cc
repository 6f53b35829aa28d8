// `grove run MODEL.json`: compile a model with one backend, run it on random
// seeded inputs, and print what one call costs.
#include <cstdio>
#include <fstream>

#include "benchmarks/common/json_report.h"
#include "benchmarks/common/table.h"
#include "cli/commands.h"
#include "cli/measure.h"
#include "cli/model_setup.h"
#include "cli/report.h"
#include "cli/tree_stats.h"
#include "runtime/device_context.h"

namespace grove::cli {
namespace {

struct RunOptions {
  ModelSpec model;
  MeasureOptions measure;
  bool train = false;
  std::string stats_json_path;
  std::string dot_path;
};

RunOptions parse_run_options(const ParsedArgs& args) {
  if (args.positional().empty()) {
    throw UsageError("run: missing the model file (grove run MODEL.json [options])");
  }
  RunOptions options;
  options.model.path = args.positional().front();
  options.model.device = parse_device_choice(args.value("--device", "auto"));
  if (args.has("--batch")) {
    options.model.dims["batch"] = parse_positive_int("--batch", args.value("--batch"), 1 << 20);
  }
  if (args.has("--seq")) {
    options.model.dims["seq"] = parse_positive_int("--seq", args.value("--seq"), 1 << 20);
  }
  std::string dtype = args.value("--dtype", "f32");
  if (dtype != "f32" && dtype != "bf16") {
    throw UsageError(str_cat("--dtype expects f32 or bf16, found '", dtype, "'"));
  }
  options.model.dtype = runtime::parse_dtype(dtype);
  options.measure.backend = args.value("--backend", "eager");
  options.measure.iters = parse_positive_int("--iters", args.value("--iters", "20"), 1000000);
  options.measure.warmup =
      args.has("--warmup") ? parse_positive_int("--warmup", args.value("--warmup"), 1000000) : 3;
  options.measure.seed =
      static_cast<uint64_t>(parse_positive_int("--seed", args.value("--seed", "1")));
  options.train = args.has("--train");
  options.stats_json_path = args.value("--stats-json");
  options.dot_path = args.value("--dot");
  require_backend(options.measure.backend);
  if (!options.dot_path.empty() && options.measure.backend != kGraphBackend) {
    throw UsageError(str_cat("--dot writes the tree of CUDA graphs, which only the ", kGraphBackend,
                             " backend builds; add --backend ", kGraphBackend));
  }
  if (options.measure.backend == kGraphBackend && options.measure.warmup < 2) {
    throw UsageError(str_cat("--warmup ", options.measure.warmup, ": the ", kGraphBackend,
                             " backend needs at least 2 untimed calls (warm-up, then recording) "
                             "before it replays"));
  }
  return options;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream file(path);
  GROVE_CHECK(file.good(), "cannot open '", path,
              "' for writing; check that its directory exists and is writable");
  file << text;
}

}  // namespace

const CommandSpec& run_command_spec() {
  static const CommandSpec spec{
      "run",
      "MODEL.json",
      "compile a model, run it on random inputs, print per-call latency and launches",
      "Compiles MODEL.json (grove's JSON model format) with one backend, runs it on random\n"
      "seeded inputs of the model's shapes and dtypes (integer inputs hold valid token ids),\n"
      "and prints per-call latency (median, p90), kernels and GEMMs per call and, with\n"
      "--backend cudagraphs, what the tree of CUDA graphs did: graph launches per call,\n"
      "recordings, replays, eager fallbacks with their reasons, and pool memory.",
      {
          {"--backend", "NAME", "execution backend: eager (default) or cudagraphs"},
          {"--device", "DEVICE", "auto (default: cuda when present, else sim), cuda or sim"},
          {"--batch", "N", "bind the model's 'batch' dimension"},
          {"--seq", "T", "bind the model's 'seq' dimension"},
          {"--dtype", "TYPE", "f32 (default) or bf16 for the model's floating values"},
          {"--iters", "N", "timed calls (default 20)"},
          {"--warmup", "N", "untimed calls before timing (default 3)"},
          {"--seed", "N", "seed of the random inputs (default 1)"},
          {"--train", "", "time training steps (forward, backward, SGD) instead of inference"},
          {"--stats-json", "FILE", "write the measurement and the tree's stats as JSON"},
          {"--dot", "FILE", "write the tree of CUDA graphs as Graphviz DOT (cudagraphs)"},
      }};
  return spec;
}

int run_command(const std::vector<std::string>& args) {
  ParsedArgs parsed = parse_flags(run_command_spec(), args);
  if (parsed.help_requested()) {
    std::fputs(help_text(run_command_spec()).c_str(), stdout);
    return 0;
  }
  RunOptions options = parse_run_options(parsed);
  compiler::ir::Program program = load_program(options.model);
  std::printf("grove run %s on %s (%s), backend %s, %s%s\n", program.name().c_str(),
              options.model.device.str().c_str(),
              runtime::device_context(options.model.device).backend().name().c_str(),
              options.measure.backend.c_str(), runtime::dtype_name(options.model.dtype),
              dims_text(program).c_str());
  Measurement measurement = options.train
                                ? measure_training(add_training_loss(program), options.measure)
                                : measure_inference(program, options.measure);
  std::printf("\n%s", measurement_table(measurement, options.train).render().c_str());
  nlohmann::json stats;
  if (options.measure.backend == kGraphBackend) {
    stats = tree_stats(options.model.device);
    std::printf("\ntree of CUDA graphs (totals)\n%s", tree_table(stats).render().c_str());
  }
  if (!options.stats_json_path.empty()) {
    nlohmann::json report = benchmarks::report_header("grove run", options.model.device);
    report["model"] = program.name();
    report["model_file"] = options.model.path;
    report["dims"] = program.dims();
    report["dtype"] = runtime::dtype_name(options.model.dtype);
    report["measurement"] = measurement_json(measurement, options.train);
    report["tree"] = stats;
    benchmarks::write_json_file(options.stats_json_path, report);
    std::printf("\nwrote stats to %s\n", options.stats_json_path.c_str());
  }
  if (!options.dot_path.empty()) {
    write_text_file(options.dot_path, tree_dot(options.model.device));
    std::printf("wrote the tree's DOT to %s\n", options.dot_path.c_str());
  }
  return 0;
}

}  // namespace grove::cli
