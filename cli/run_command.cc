// `grove run MODEL.json`: compile a model with one backend, run it on random
// seeded inputs, and print what one call costs.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "cli/commands.h"
#include "cli/common/json_report.h"
#include "cli/common/latency.h"
#include "cli/common/table.h"
#include "cli/measure.h"
#include "cli/model_setup.h"
#include "cli/report.h"
#include "cli/terminal_text.h"
#include "cli/tree_stats.h"
#include "cli/weights_io.h"
#include "cli/work_estimate.h"
#include "distributed/data_parallel_trainer.h"
#include "runtime/collectives/setup.h"
#include "runtime/device_context.h"
#include "weights/model_weights.h"

namespace grove::cli {
namespace {

struct RunOptions {
  ModelSpec model;
  MeasureOptions measure;
  bool train = false;
  bool force = false;  // --force: run even when the work estimate says it is far too long
  int gpus = 1;        // data-parallel ranks (--gpus), one thread per device
  // Set when this process is one rank of a group (RANK/WORLD_SIZE or GROVE_RANK in the
  // environment) and trains: the rank joins the group instead of running --gpus threads.
  std::optional<runtime::collectives::RankConfig> rank_config;
  // --no-overlap: gradient all-reduces on the compute stream (AllReduceOptions::overlap).
  bool overlap = true;
  std::string stats_json_path;
  std::string dot_path;
  std::string weights_path;       // --weights
  std::string inputs_path;        // --inputs
  std::string save_outputs_path;  // --save-outputs
};

// True when `a` and `b` name the same file (or would, once created).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  if (std::filesystem::equivalent(a, b, error)) return true;
  return std::filesystem::weakly_canonical(a, error) == std::filesystem::weakly_canonical(b, error);
}

// The outputs are checked before the run, so that a run of minutes never ends
// in an unwritable path, and never overwrite the model or each other.
void check_output_paths(const RunOptions& options) {
  const std::pair<const char*, const std::string*> outputs[] = {
      {"--stats-json", &options.stats_json_path},
      {"--dot", &options.dot_path},
      {"--save-outputs", &options.save_outputs_path}};
  const std::pair<const char*, const std::string*> inputs[] = {
      {"the model file", &options.model.path},
      {"--weights", &options.weights_path},
      {"--inputs", &options.inputs_path}};
  for (const auto& [flag, path] : outputs) {
    if (path->empty()) continue;
    for (const auto& [input_flag, input_path] : inputs) {
      if (!input_path->empty() && same_file(*path, *input_path)) {
        throw UsageError(str_cat(flag, " ", *path, ": is ", input_flag,
                                 " itself; writing there would destroy it; choose another path"));
      }
    }
    check_output_path(flag, *path);
  }
  for (size_t a = 0; a < std::size(outputs); ++a) {
    for (size_t b = a + 1; b < std::size(outputs); ++b) {
      if (!outputs[a].second->empty() && !outputs[b].second->empty() &&
          same_file(*outputs[a].second, *outputs[b].second)) {
        throw UsageError(str_cat(outputs[a].first, " and ", outputs[b].first, " both name ",
                                 *outputs[b].second,
                                 "; the second would overwrite the first; give each its own file"));
      }
    }
  }
}

// `grove run --train` started as one rank of a group (torchrun-style: RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK; or GROVE_RANK...): the
// rank's configuration, checked against the flags.
runtime::collectives::RankConfig rank_config_of_process(const RunOptions& options,
                                                        const ParsedFlags& args) {
  runtime::collectives::RankConfig config = runtime::collectives::RankConfig::from_environment();
  const runtime::Device device = options.model.device;
  if (options.gpus > 1) {
    throw UsageError(str_cat("--gpus ", options.gpus,
                             " runs ranks as threads of this process, but the environment makes it "
                             "rank ",
                             config.rank, " of ", config.world_size,
                             " (RANK/WORLD_SIZE); drop --gpus and start one process per device"));
  }
  if (device.is_cpu()) {
    throw UsageError("data-parallel training needs --device cuda or sim (cpu has no collectives)");
  }
  if (device.is_cuda() && config.device_index() >= runtime::cuda_device_count()) {
    throw UsageError(str_cat("rank ", config.rank, " would train on cuda:", config.device_index(),
                             " (LOCAL_RANK, else RANK) but this machine has ",
                             runtime::cuda_device_count(), " CUDA devices"));
  }
  if (!args.value("--dot").empty()) {
    throw UsageError("--dot is for one device; drop it when training as one rank of a group");
  }
  if (!device.is_cuda() && config.master_addr.empty()) {
    // On sim the id file only names a group inside one process.
    throw UsageError(
        "on sim, ranks that are processes meet over TCP: start them with RANK, WORLD_SIZE, "
        "MASTER_ADDR and MASTER_PORT instead of GROVE_RANK, GROVE_WORLD_SIZE and "
        "GROVE_NCCL_ID_FILE");
  }
  return config;
}

RunOptions parse_run_options(const ParsedFlags& args) {
  RunOptions options;
  options.model = parse_model_spec("run", args, BoundDims::kBatchAndSeq);
  options.measure.backend = args.value("--backend", "eager");
  options.measure.iters = parse_positive_int("--iters", args.value("--iters", "20"), 1000000);
  options.measure.warmup =
      args.has("--warmup") ? parse_positive_int("--warmup", args.value("--warmup"), 1000000) : 3;
  options.measure.seed =
      static_cast<uint64_t>(parse_positive_int("--seed", args.value("--seed", "1")));
  options.train = args.has("--train");
  options.force = args.has("--force");
  options.gpus = static_cast<int>(parse_positive_int("--gpus", args.value("--gpus", "1"), 64));
  if (options.gpus > 1) {
    if (!options.train) {
      throw UsageError(str_cat("--gpus ", options.gpus,
                               " runs data-parallel training; add --train (inference runs on one "
                               "device)"));
    }
    if (options.model.device.is_cpu()) {
      throw UsageError("--gpus needs --device cuda or sim (cpu has no collectives)");
    }
    if (options.model.device.is_cuda() && runtime::cuda_device_count() < options.gpus) {
      throw UsageError(str_cat("--gpus ", options.gpus, ": this machine has ",
                               runtime::cuda_device_count(), " CUDA devices"));
    }
    if (!args.value("--dot").empty()) {
      throw UsageError("--dot is for one device; drop it with --gpus");
    }
  }
  if (options.train && runtime::collectives::launched_as_rank()) {
    options.rank_config = rank_config_of_process(options, args);
  }
  options.overlap = !args.has("--no-overlap");
  if (!options.overlap && options.gpus == 1 && !options.rank_config) {
    throw UsageError("--no-overlap is about data-parallel gradient all-reduces; add --gpus N");
  }
  options.stats_json_path = args.value("--stats-json");
  options.dot_path = args.value("--dot");
  options.weights_path = args.value("--weights");
  options.inputs_path = args.value("--inputs");
  options.save_outputs_path = args.value("--save-outputs");
  for (const char* flag : {"--weights", "--inputs", "--save-outputs"}) {
    if (options.train && args.has(flag)) {
      throw UsageError(str_cat(flag,
                               " is for inference; drop --train (training starts from the "
                               "model's initializers and random inputs)"));
    }
  }
  check_output_paths(options);
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

// On sim, a run whose estimated time is far past a minute is refused without
// --force, and one past a minute is announced, before anything is compiled:
// `--batch 1048576` of mlp16x512 used to sit in "warm up" for hours. Devices
// run in parallel with --gpus, so the estimate is per device. Test:
// GroveLimits.RunFarLongerThanAMinuteOnSimIsRefusedWithoutForce.
void check_work_estimate(const compiler::ir::Program& program, const RunOptions& options) {
  if (!options.model.device.is_sim()) return;
  WorkEstimate estimate =
      estimate_work(program, options.measure.warmup + options.measure.iters, options.train);
  if (estimate.seconds > kRefuseSeconds && !options.force) {
    throw UsageError(str_cat("this run would take far longer than a minute (", estimate.str(),
                             "); lower --batch, --seq or --iters, or pass --force to run it"));
  }
  if (estimate.seconds > kWarnSeconds) {
    std::fprintf(stderr, "grove: warning: this run may take a while (%s)\n",
                 estimate.str().c_str());
  }
}

// The view of a data-parallel run from the lowest rank of this process (rank 0
// unless this process is another rank of a group).
struct DataParallelRun {
  int rank = 0;
  std::vector<double> step_us;  // timed steps
  std::vector<double> losses;   // every step, warm-up included
  size_t buckets = 0;
  double compile_s = 0;
  nlohmann::json tree;  // rank 0's tree stats (cudagraphs)
};

int world_size(const RunOptions& options) {
  return options.rank_config ? options.rank_config->world_size : options.gpus;
}

// The device `rank` trains on: device r of the chosen type for --gpus threads,
// LOCAL_RANK (else RANK) for a rank that is a process.
runtime::Device device_of_rank(const RunOptions& options, int rank) {
  const int index = options.rank_config ? options.rank_config->device_index() : rank;
  return runtime::Device{options.model.device.type, index};
}

// `grove run --train --gpus N`: N ranks as threads, rank r on device r of the
// chosen type; or, started as one rank of a group, this process's rank alone
// (the others are processes too). Each rank trains on its own random shard
// (seed + r) of --batch rows, gradients averaged in the backward
// (distributed): the same steps either way, so the same losses
// (Note [Host reduction order] in runtime/collectives/host_reduction.h).
DataParallelRun run_data_parallel(const RunOptions& options) {
  DataParallelRun run;
  std::vector<int> ranks;
  if (options.rank_config) {
    ranks.push_back(options.rank_config->rank);
  } else {
    for (int rank = 0; rank < options.gpus; ++rank) {
      ranks.push_back(rank);
    }
  }
  run.rank = ranks.front();
  std::vector<std::exception_ptr> errors(ranks.size());
  std::vector<std::thread> threads;
  for (size_t slot = 0; slot < ranks.size(); ++slot) {
    threads.emplace_back([&, slot] {
      const int rank = ranks[slot];
      const bool reports = rank == run.rank;
      const runtime::Device device = device_of_rank(options, rank);
      std::optional<distributed::DataParallelTrainer> trainer;
      try {
        if (options.rank_config) {
          runtime::collectives::join_group(device, *options.rank_config);
        } else {
          runtime::collectives::join_local_group(
              device, rank, options.gpus, "grove-run",
              runtime::collectives::default_collective_timeout());
        }
        ModelSpec spec = options.model;
        spec.device = device;
        TrainingSetup setup = add_training_loss(load_program(spec));
        Stopwatch compile;
        distributed::DataParallelOptions dp;
        dp.trainer.backend = options.measure.backend;
        dp.trainer.optimizer = training::OptimizerKind::kSgdMomentum;
        dp.all_reduce.overlap = options.overlap;
        trainer.emplace(setup.program, setup.loss, dp);
        compiler::TensorList inputs = random_inputs(
            setup.program, device, options.measure.seed + static_cast<uint64_t>(rank));
        training::Hyperparameters hyper;
        hyper.lr = options.measure.learning_rate;
        hyper.momentum = 0.9;
        if (reports) {
          run.compile_s = compile.elapsed_s();
          run.buckets = trainer->buckets().outputs.size();
        }
        for (int64_t i = 0; i < options.measure.warmup + options.measure.iters; ++i) {
          Stopwatch watch;
          double loss = trainer->step(inputs, hyper).to_doubles().at(0);  // synchronizes
          if (!reports) {
            continue;
          }
          if (i >= options.measure.warmup) run.step_us.push_back(watch.elapsed_us());
          run.losses.push_back(loss);
        }
        if (reports && options.measure.backend == kGraphBackend) {
          run.tree = tree_in(trainer->backend_stats());
        }
      } catch (...) {
        errors[slot] = std::current_exception();
      }
      // Graphs recorded on this thread go before its communicator does.
      if (trainer) trainer->reset_backend();
      runtime::collectives::leave_group(device);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  return run;
}

int report_data_parallel(const RunOptions& options) {
  ModelSpec spec = options.model;
  compiler::ir::Program program = load_program(spec);
  check_work_estimate(program, options);
  const int world = world_size(options);
  // The device of this process's first rank (device 0 with --gpus).
  const runtime::Device first_device = device_of_rank(options, 0);
  const std::string placement =
      options.rank_config ? str_cat(world, " processes, this one rank ", options.rank_config->rank,
                                    " on ", first_device.str())
                          : str_cat(world, " x ", runtime::device_type_name(first_device.type));
  const bool quiet = options.rank_config && options.rank_config->rank != 0;
  if (!quiet) {
    std::printf(
        "grove run %s data-parallel on %s (%s), backend %s, %s%s per device, all-reduces %s\n",
        program.name().c_str(), placement.c_str(),
        runtime::device_context(first_device).platform().name().c_str(),
        options.measure.backend.c_str(), runtime::dtype_name(options.model.dtype),
        dims_text(program).c_str(),
        options.overlap ? "overlapping the backward" : "in line (--no-overlap)");
    std::fflush(stdout);
  }
  DataParallelRun run = run_data_parallel(options);
  if (quiet) {
    // Rank 0 reports the run; the other ranks say that they took part.
    std::printf("grove run %s data-parallel: rank %d of %d on %s done, %zu steps, last loss %s\n",
                program.name().c_str(), run.rank, world,
                device_of_rank(options, run.rank).str().c_str(), run.losses.size(),
                format_fixed(run.losses.back(), 4).c_str());
    return 0;
  }
  LatencySummary step = summarize(run.step_us);
  int64_t batch = program.dims().count("batch") ? program.dims().at("batch") : 1;
  double samples_per_s = 1e6 * static_cast<double>(batch * world) / step.median_us;
  Table table({{"devices", Align::kRight},
               {"backend"},
               {"step median", Align::kRight},
               {"p90", Align::kRight},
               {"samples/s", Align::kRight},
               {"buckets", Align::kRight},
               {"first loss", Align::kRight},
               {"last loss", Align::kRight}});
  table.add_row({std::to_string(world), options.measure.backend,
                 format_fixed(step.median_us, 1) + " us", format_fixed(step.p90_us, 1) + " us",
                 format_fixed(samples_per_s, 0), std::to_string(run.buckets),
                 format_fixed(run.losses.front(), 4), format_fixed(run.losses.back(), 4)});
  std::printf("\n%s", table.render().c_str());
  if (options.measure.backend == kGraphBackend) {
    std::printf("\ntree of CUDA graphs of rank 0 (totals)\n%s",
                tree_table(run.tree).render().c_str());
  }
  if (!options.stats_json_path.empty()) {
    nlohmann::json report = report_header("grove run", options.model.device);
    report["model"] = program.name();
    report["model_file"] = options.model.path;
    report["dims"] = program.dims();
    report["devices"] = world;
    if (options.rank_config) {
      report["processes"] = world;
    }
    report["backend"] = options.measure.backend;
    report["step"] = latency_json(step);
    report["samples_per_s"] = samples_per_s;
    report["losses"] = run.losses;
    report["buckets"] = run.buckets;
    report["overlap"] = options.overlap;
    report["tree"] = run.tree;
    write_json_file(options.stats_json_path, report);
    std::printf("\nwrote stats to %s\n", options.stats_json_path.c_str());
  }
  return 0;
}

}  // namespace

const CommandSpec& run_command_spec() {
  static const CommandSpec spec{
      "grove",
      "run",
      "MODEL.json",
      "compile a model, run it on random inputs, print per-call latency and launches",
      "Compiles MODEL.json (grove's JSON model format) with one backend, runs it on random\n"
      "seeded inputs of the model's shapes and dtypes (integer inputs hold valid token ids),\n"
      "and prints per-call latency (median, p90), kernels and GEMMs per call and, with\n"
      "--backend cudagraphs, what the tree of CUDA graphs did: graph launches per call,\n"
      "recordings, replays, eager fallbacks with their reasons, and pool memory.",
      with_model_flags(
          BoundDims::kBatchAndSeq,
          {
              {"--backend", "NAME", "execution backend: eager (default) or cudagraphs"},
              {"--iters", "N", "timed calls (default 20)"},
              {"--warmup", "N", "untimed calls before timing (default 3)"},
              {"--seed", "N", "seed of the random inputs (default 1)"},
              {"--weights", "FILE",
               "load params and buffers from a safetensors file (names, shapes, dtypes must "
               "match)"},
              {"--inputs", "FILE",
               "take the inputs from a safetensors file instead of random ones"},
              {"--save-outputs", "FILE", "write the last call's outputs to a safetensors file"},
              {"--train", "", "time training steps (forward, backward, SGD) instead of inference"},
              {"--force", "",
               "run even when the estimate says it would take far longer than a minute on sim"},
              {"--gpus", "N",
               "with --train: data-parallel training on N devices (one thread each; NCCL on cuda), "
               "--batch rows per device. Started with RANK, WORLD_SIZE, MASTER_ADDR and "
               "MASTER_PORT "
               "(torchrun-style, one process per device: LOCAL_RANK, else RANK, picks it), --train "
               "joins that group instead; rank 0 prints the report"},
              {"--no-overlap", "",
               "with --gpus (or as a rank): run the gradient all-reduces on the compute stream "
               "instead "
               "of "
               "overlapping them with the rest of the backward"},
              {"--stats-json", "FILE", "write the measurement and the tree's stats as JSON"},
              {"--dot", "FILE", "write the tree of CUDA graphs as Graphviz DOT (cudagraphs)"},
          })};
  return spec;
}

int run_command(const std::vector<std::string>& args) {
  ParsedFlags parsed = parse_flags(run_command_spec(), args);
  if (parsed.help_requested()) {
    std::fputs(help_text(run_command_spec()).c_str(), stdout);
    return 0;
  }
  RunOptions options = parse_run_options(parsed);
  if (options.gpus > 1 || options.rank_config) {
    return report_data_parallel(options);
  }
  compiler::ir::Program program = load_program(options.model);
  check_work_estimate(program, options);
  if (program.outputs().empty()) {
    // Issue 24, item 10: such a model was run and timed without a word.
    std::fprintf(stderr,
                 "grove: warning: model '%s' has no outputs (\"outputs\": []): its calls return "
                 "nothing, and whatever they compute may be dropped; name the values to return "
                 "in \"outputs\"\n",
                 printable(program.name()).c_str());
  }
  std::printf("grove run %s on %s (%s), backend %s, %s%s\n", printable(program.name()).c_str(),
              options.model.device.str().c_str(),
              runtime::device_context(options.model.device).platform().name().c_str(),
              options.measure.backend.c_str(), runtime::dtype_name(options.model.dtype),
              dims_text(program).c_str());
  std::optional<weights::SafetensorsFile> weights;
  if (!options.weights_path.empty()) {
    // Checked before compiling, so a wrong file fails in milliseconds.
    weights = weights::SafetensorsFile::open(options.weights_path);
    weights::check_weights(program, *weights);
    options.measure.weights = &*weights;
    std::printf("weights %s: %s\n", printable(options.weights_path).c_str(),
                weights_summary(*weights).c_str());
  }
  options.measure.inputs_path = options.inputs_path;
  Measurement measurement = options.train
                                ? measure_training(add_training_loss(program), options.measure)
                                : measure_inference(program, options.measure);
  std::printf("\n%s", measurement_table(measurement, options.train).render().c_str());
  nlohmann::json stats;
  if (options.measure.backend == kGraphBackend) {
    stats = measurement.tree;
    std::printf("\ntree of CUDA graphs (totals)\n%s", tree_table(stats).render().c_str());
  }
  if (!options.stats_json_path.empty()) {
    nlohmann::json report = report_header("grove run", options.model.device);
    report["model"] = program.name();
    report["model_file"] = options.model.path;
    report["dims"] = program.dims();
    report["dtype"] = runtime::dtype_name(options.model.dtype);
    report["measurement"] = measurement_json(measurement, options.train);
    report["tree"] = stats;
    write_json_file(options.stats_json_path, report);
    std::printf("\nwrote stats to %s\n", options.stats_json_path.c_str());
  }
  if (!options.dot_path.empty()) {
    write_text_file(options.dot_path, measurement.tree_dot);
    std::printf("wrote the tree's DOT to %s\n", options.dot_path.c_str());
  }
  if (!options.save_outputs_path.empty()) {
    write_outputs_file(program, measurement.result_bytes, options.save_outputs_path);
    std::printf("wrote the last call's outputs to %s\n", options.save_outputs_path.c_str());
  }
  return 0;
}

}  // namespace grove::cli
