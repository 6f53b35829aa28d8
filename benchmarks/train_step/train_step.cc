// train_step: per-step latency of a training step (forward, backward into the
// gradient buffers, optimizer update in place) through each execution backend
// ("eager", and "cudagraphs" when this binary registers it), in one process:
//   - mlp16x512, batch 32: mean squared error against a synthetic regression
//     target, SGD with momentum;
//   - gpt4x256, batch 8, T = 32: next-token cross entropy on a synthetic
//     repeating token stream, SGD with momentum.
// Both use momentum 0.9 as benchmarks/compare_torch.py does for PyTorch; the
// learning rates are chosen so that the loss visibly falls (the latency does
// not depend on them).
//
// For each case and backend: a Trainer is built (its build time is reported),
// --warmup untimed steps run (the graph backend warms up, records, then
// replays), then --iters timed steps. A step's latency is host time from the
// call until the calling thread's stream is synchronized: median, p90 and
// spread; the speedup is eager's median over the backend's. The loss is read
// (outside the timing) after the first step and after the last one; the graph
// backend's losses are compared with eager's bit for bit, and the tree
// manager's counters (recordings, replays, eager fallbacks by reason) are
// read from its stats() JSON. Under the graph backend each step begins with
// mark_step_begin() unless --mark-step off. After its timed steps, the graph
// backend's row also times the bare replay: the graphs of the last step
// (forward, backward, optimizer) launched directly, --iters times, and counts
// their nodes (RESULTS.md's node floor).
//
//   train_step [--device auto|cuda|sim] [--iters 100] [--warmup 10] [--json FILE]
//              [--cases mlp16x512,gpt4x256] [--mlp-batch 32] [--gpt-batch 8] [--seq 32]
//              [--backends eager,cudagraphs]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/backend_latency/backend_comparison.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/latency.h"
#include "benchmarks/common/table.h"
#include "benchmarks/common/timed_run_options.h"
#include "compiler/model_format/model_json.h"
#include "runtime/device_context.h"
#include "runtime/graph_recording.h"
#include "training/losses.h"
#include "training/trainer.h"

namespace grove::benchmarks {
namespace {

using training::Hyperparameters;
using training::OptimizerKind;
using training::Trainer;

constexpr const char* kName = "train_step";

const TimedRunDefaults kTimed{
    .unit = "steps", .iters = 100, .warmup = 10, .iters_note = "; use a few on sim"};

std::vector<FlagSpec> flag_table() {
  std::vector<FlagSpec> flags = timed_run_flags(kTimed);
  flags.insert(
      flags.end(),
      {
          {"--backends", "LIST", "execution backends to compare (default eager,cudagraphs)"},
          {"--cases", "LIST",
           "models to train (default mlp16x512,gpt4x256), e.g. one for a profile"},
          {"--mlp-batch", "B", "mlp16x512 batch size (default 32)"},
          {"--gpt-batch", "B", "gpt4x256 batch size (default 8)"},
          {"--seq", "T", "gpt4x256 sequence length (default 32, at least 2)"},
          {"--mlp-lr", "LR", "mlp16x512 learning rate (default 5)"},
          {"--gpt-lr", "LR", "gpt4x256 learning rate (default 0.01)"},
          {"--mark-step", "on|off",
           "mark_step_begin() before each graph-backend step (default on)"},
      });
  return flags;
}

const std::vector<FlagSpec> kFlags = flag_table();

enum class LossKind : uint8_t { kMse, kNextToken };

struct Options : TimedRunOptions {
  std::vector<std::string> backends = {kEagerBackend, kGraphBackend};
  std::vector<std::string> cases = {"mlp16x512", "gpt4x256"};
  int64_t mlp_batch = 32;
  int64_t gpt_batch = 8;
  int64_t seq = 32;
  double mlp_lr = 5.0;
  double gpt_lr = 0.01;
  bool mark_step = true;
};

struct TrainingCase {
  std::string label;
  std::string model;
  compiler::model_format::DimBindings dims;
  LossKind loss = LossKind::kMse;
  Hyperparameters hyperparameters;
};

// One backend's measurement of one case.
struct Row {
  std::string backend;
  bool measured = false;  // false: not registered, or failed with `error`
  std::string error;
  LatencySummary latency;
  double build_ms = 0;  // Trainer construction: autodiff, lowering, code generation, state
  size_t kernels = 0, gemms = 0;  // one step run eagerly (forward + backward + optimizer)
  double first_loss = 0, last_loss = 0;
  int64_t steps = 0;
  std::optional<bool> losses_match_eager;
  std::optional<GraphActivity> timed_steps;
  std::optional<GraphActivity> whole_run;
  // Graph backend: the graphs of the last step launched directly, step after
  // step (the floor of a captured step: no binding, no checks, no trainer).
  std::optional<LatencySummary> bare;
  size_t bare_graphs = 0;
  // Graph backend: the nodes of the graphs one step launches (those of the bare replay).
  std::optional<GraphNodeCount> graph_nodes;
};

struct ModelWithLoss {
  compiler::ir::Program program;
  compiler::ir::ValueId loss = compiler::ir::kNoValue;
};

ModelWithLoss build_model(const TrainingCase& config, const Options& options) {
  ModelWithLoss model;
  model.program = compiler::model_format::load_model_file(
      options.models_dir + "/" + config.model + ".json", config.dims, options.device);
  compiler::ir::ValueId logits = model.program.outputs()[0];
  if (config.loss == LossKind::kMse) {
    model.loss = training::add_mse_loss(model.program, logits);
  } else {
    compiler::ir::ValueId tokens = model.program.inputs_of_kind(compiler::ir::ValueKind::kInput)[0];
    model.loss = training::add_next_token_loss(model.program, logits, tokens);
  }
  return model;
}

// Seeded synthetic data. Regression: x ~ N(0, 1); every target row is one
// fixed vector (|N(0, 0.5)| per feature, within the range of the model's
// final GELU) plus N(0, 0.05) noise. Next token: each row repeats a seeded
// pattern of 5 tokens from its own phase, so the next token is predictable.
compiler::TensorList synthetic_inputs(const TrainingCase& config, const ModelWithLoss& model,
                                      runtime::Device device) {
  std::mt19937_64 rng(2026);
  const compiler::ir::Program& program = model.program;
  std::vector<compiler::ir::ValueId> inputs =
      program.inputs_of_kind(compiler::ir::ValueKind::kInput);
  if (config.loss == LossKind::kMse) {
    const runtime::Shape& shape = program.value(inputs[0]).type.shape;  // [batch, features]
    int64_t features = shape.back();
    std::normal_distribution<float> unit(0, 1), offset(0, 0.5f), noise(0, 0.05f);
    std::vector<float> x(static_cast<size_t>(runtime::shape_numel(shape)));
    for (float& value : x) value = unit(rng);
    std::vector<float> row(static_cast<size_t>(features));
    for (float& value : row) value = std::abs(offset(rng));
    std::vector<float> target(x.size());
    for (size_t i = 0; i < target.size(); ++i) target[i] = row[i % row.size()] + noise(rng);
    return {runtime::Tensor::from_vector(x, shape, device),
            runtime::Tensor::from_vector(target, shape, device)};
  }
  const runtime::Shape& shape = program.value(inputs[0]).type.shape;  // [batch, seq]
  int64_t vocabulary = program.value(program.outputs()[0]).type.shape.back();
  std::uniform_int_distribution<int64_t> token(0, vocabulary - 1);
  std::vector<int64_t> pattern(5);
  for (int64_t& value : pattern) value = token(rng);
  std::vector<int64_t> tokens;
  for (int64_t row = 0; row < shape[0]; ++row) {
    for (int64_t t = 0; t < shape[1]; ++t) {
      tokens.push_back(pattern[static_cast<size_t>((row + t) % int64_t(pattern.size()))]);
    }
  }
  return {runtime::Tensor::from_vector(tokens, shape, device)};
}

Row run_backend(const TrainingCase& config, const std::string& backend, const Options& options) {
  Row row;
  row.backend = backend;
  if (!backend_registered(backend)) return row;
  const bool graphs = backend == kGraphBackend;
  ModelWithLoss model = build_model(config, options);
  Stopwatch build_watch;
  Trainer trainer(model.program, model.loss,
                  {.backend = backend, .optimizer = OptimizerKind::kSgdMomentum});
  row.build_ms = build_watch.elapsed_us() / 1000;
  // Building records nothing: the tree's counters from here on are this row's.
  auto graph_counters = [&] {
    return graphs ? tree_counters(trainer.backend_stats()) : nlohmann::json();
  };
  nlohmann::json stats_at_start = graph_counters();
  for (const compiler::lowering::LoweredProgram* lowered :
       {&trainer.lowered_forward(), &trainer.lowered_backward(), &trainer.lowered_optimizer()}) {
    compiler::lowering::KernelReport report = lowered->kernel_report();
    row.kernels += report.kernels.size();
    row.gemms += report.library_gemms;
  }

  runtime::DeviceContext& context = runtime::device_context(options.device);
  runtime::StreamHandle stream = context.current_stream();
  compiler::TensorList inputs = synthetic_inputs(config, model, options.device);
  auto step = [&] {
    if (graphs && options.mark_step) trainer.mark_step_begin();
    return trainer.step(inputs, config.hyperparameters);
  };
  // A graph backend's loss may live in its pool until the next step: read it at once.
  row.first_loss = step().to_doubles().at(0);
  for (int64_t i = 1; i < options.warmup; ++i) step();
  context.platform().synchronize_stream(stream);

  nlohmann::json stats_before_timing = graph_counters();
  std::vector<double> samples_us;
  for (int64_t i = 0; i < options.iters; ++i) {
    Stopwatch watch;
    runtime::Tensor loss = step();
    context.platform().synchronize_stream(stream);
    samples_us.push_back(watch.elapsed_us());
    if (i + 1 == options.iters) row.last_loss = loss.to_doubles().at(0);
  }
  if (graphs) {
    nlohmann::json stats_after = graph_counters();
    row.whole_run = graph_activity(stats_at_start, stats_after);
    row.timed_steps = graph_activity(stats_before_timing, stats_after);
    // The bare replay runs the optimizer graph too, so it goes on training
    // the model; nothing reads the parameters after this.
    std::vector<runtime::GraphRecording*> path = trainer.backend_graphs();
    row.graph_nodes = count_graph_nodes(path);
    if (!path.empty()) {
      std::vector<double> bare_us;
      for (int64_t i = 0; i < options.iters; ++i) {
        Stopwatch watch;
        for (runtime::GraphRecording* graph : path) graph->replay(stream);
        context.platform().synchronize_stream(stream);
        bare_us.push_back(watch.elapsed_us());
      }
      row.bare = summarize(bare_us);
      row.bare_graphs = path.size();
    }
  }
  row.measured = true;
  row.steps = trainer.steps_taken();
  row.latency = summarize(samples_us);
  return row;
}

Options parse_options(const FlagValues& flags) {
  Options options;
  static_cast<TimedRunOptions&>(options) = parse_timed_run(flags, kTimed);
  options.backends = flags.list("--backends", options.backends);
  for (const std::string& backend : options.backends) {
    if (backend != kGraphBackend && !backend_registered(backend)) {
      throw UsageError(str_cat(kName, ": --backends: '", backend,
                               "' is not a registered execution backend; use eager or cudagraphs"));
    }
  }
  options.cases = flags.list("--cases", options.cases);
  for (const std::string& name : options.cases) {
    if (name != "mlp16x512" && name != "gpt4x256") {
      throw UsageError(str_cat(kName, ": --cases: '", name, "' is not a benchmark model; use ",
                               "mlp16x512 or gpt4x256"));
    }
  }
  options.mlp_batch = flags.integer("--mlp-batch", options.mlp_batch, 1, 1 << 16);
  options.gpt_batch = flags.integer("--gpt-batch", options.gpt_batch, 1, 1 << 12);
  options.seq = flags.integer("--seq", options.seq, 2, 128);
  options.mlp_lr = flags.positive_number("--mlp-lr", options.mlp_lr);
  options.gpt_lr = flags.positive_number("--gpt-lr", options.gpt_lr);
  std::string mark_step = flags.text("--mark-step", "on");
  if (mark_step != "on" && mark_step != "off") {
    throw UsageError(str_cat(kName, ": --mark-step expects on or off, found '", mark_step, "'"));
  }
  options.mark_step = mark_step == "on";
  return options;
}

std::vector<TrainingCase> cases(const Options& options) {
  TrainingCase mlp{str_cat("mlp16x512 b=", options.mlp_batch),
                   "mlp16x512",
                   {{"batch", options.mlp_batch}},
                   LossKind::kMse,
                   {}};
  mlp.hyperparameters.lr = options.mlp_lr;
  mlp.hyperparameters.momentum = 0.9;
  TrainingCase gpt{str_cat("gpt4x256 b=", options.gpt_batch, " T=", options.seq),
                   "gpt4x256",
                   {{"batch", options.gpt_batch}, {"seq", options.seq}},
                   LossKind::kNextToken,
                   {}};
  gpt.hyperparameters.lr = options.gpt_lr;
  gpt.hyperparameters.momentum = 0.9;
  std::vector<TrainingCase> chosen;
  for (const TrainingCase& config : {mlp, gpt}) {
    if (std::find(options.cases.begin(), options.cases.end(), config.model) !=
        options.cases.end()) {
      chosen.push_back(config);
    }
  }
  return chosen;
}

struct CaseResult {
  TrainingCase config;
  std::vector<Row> rows;  // rows[0] is the reference for speedups when it is eager
};

const Row* eager_row(const CaseResult& result) {
  for (const Row& row : result.rows) {
    if (row.backend == kEagerBackend && row.measured) return &row;
  }
  return nullptr;
}

// Why a row has no measurement, for its table cell.
void print_table(const std::vector<CaseResult>& results) {
  Table table({{"case"},
               {"backend"},
               {"median us", Align::kRight},
               {"p90 us", Align::kRight},
               {"spread", Align::kRight},
               {"speedup", Align::kRight},
               {"first loss", Align::kRight},
               {"last loss", Align::kRight},
               {"= eager"},
               {"build ms", Align::kRight},
               {"bare replay us", Align::kRight},
               {"graph nodes"},
               {"graphs (timed steps)"}});
  for (const CaseResult& result : results) {
    const Row* eager = eager_row(result);
    for (const Row& row : result.rows) {
      if (!row.measured) {
        table.add_row({result.config.label, row.backend, "-", "-", "", "", "", "", "", "", "", "",
                       unmeasured_cell(row.error)});
        continue;
      }
      std::string match = row.losses_match_eager ? (*row.losses_match_eager ? "yes" : "NO") : "";
      table.add_row(
          {result.config.label, row.backend, format_fixed(row.latency.median_us, 1),
           format_fixed(row.latency.p90_us, 1), format_fixed(100 * row.latency.spread(), 1) + "%",
           eager ? format_ratio(eager->latency.median_us / row.latency.median_us) : "",
           format_fixed(row.first_loss, 4), format_fixed(row.last_loss, 4), match,
           format_fixed(row.build_ms, 0), row.bare ? format_fixed(row.bare->median_us, 1) : "",
           node_count_cell(row.graph_nodes), activity_cell(row.timed_steps)});
    }
  }
  std::fputs(table.render().c_str(), stdout);
}

nlohmann::json report_json(const std::vector<CaseResult>& results, const Options& options) {
  nlohmann::json report = report_header(kName, options.device);
  report["iters"] = options.iters;
  report["warmup"] = options.warmup;
  report["optimizer"] = "sgd_momentum";
  report["mark_step_begin"] = options.mark_step;
  report["latency"] = "host time from the step call until the stream is synchronized";
  report["speedup"] = "eager median / this backend's median";
  report["graph_nodes_per_step"] =
      "nodes of the graphs one step launches (cudaGraphGetNodes: kernels, copies, memsets), "
      "counted after the timed steps; graph_kernel_nodes_per_step: kernel nodes alone";
  report["trainer_build_ms"] =
      "Trainer construction (autodiff, lowering, code generation, state); kernels an earlier "
      "backend generated come from the cache";
  report["results"] = nlohmann::json::array();
  for (const CaseResult& result : results) {
    const Row* eager = eager_row(result);
    for (const Row& row : result.rows) {
      nlohmann::json entry{{"case", result.config.label},
                           {"model", result.config.model},
                           {"dims", result.config.dims},
                           {"loss", result.config.loss == LossKind::kMse ? "mse" : "next_token"},
                           {"lr", result.config.hyperparameters.lr},
                           {"momentum", result.config.hyperparameters.momentum},
                           {"backend", row.backend}};
      if (!row.measured) {
        entry["status"] = row.error.empty() ? kNotRegistered : "failed";
        if (!row.error.empty()) entry["error"] = row.error;
        report["results"].push_back(entry);
        continue;
      }
      entry["status"] = "measured";
      entry["latency"] = latency_json(row.latency);
      if (eager) entry["speedup_vs_eager"] = eager->latency.median_us / row.latency.median_us;
      entry["first_loss"] = row.first_loss;
      entry["last_loss"] = row.last_loss;
      entry["steps"] = row.steps;
      entry["trainer_build_ms"] = row.build_ms;
      entry["eager_kernels_per_step"] = row.kernels;
      entry["eager_gemms_per_step"] = row.gemms;
      if (row.losses_match_eager) entry["losses_match_eager"] = *row.losses_match_eager;
      if (row.timed_steps) entry["graphs_timed_steps"] = row.timed_steps->to_json();
      if (row.whole_run) entry["graphs_whole_run"] = row.whole_run->to_json();
      if (row.bare) {
        entry["bare_replay"] = latency_json(*row.bare);
        entry["bare_graphs_per_step"] = row.bare_graphs;
      }
      if (row.graph_nodes) {
        entry["graph_nodes_per_step"] = row.graph_nodes->nodes;
        entry["graph_kernel_nodes_per_step"] = row.graph_nodes->kernel_nodes;
        entry["graph_count_per_step"] = row.graph_nodes->graphs;
      }
      report["results"].push_back(entry);
    }
  }
  return report;
}

int run(int argc, char** argv) {
  std::optional<FlagValues> parsed = parse_flags_or_help(
      kName, "Per-step latency of a training step, per execution backend.", argc, argv, kFlags);
  if (!parsed) return 0;
  const FlagValues& flags = *parsed;
  Options options = parse_options(flags);
  std::printf(
      "training step latency on %s (%s), f32, SGD momentum 0.9, %lld timed steps after "
      "%lld warm-up\n",
      options.device.str().c_str(),
      runtime::device_context(options.device).platform().name().c_str(),
      static_cast<long long>(options.iters), static_cast<long long>(options.warmup));
  std::fflush(stdout);
  std::vector<CaseResult> results;
  bool failures = false;
  for (const TrainingCase& config : cases(options)) {
    CaseResult result{config, {}};
    for (const std::string& backend : options.backends) {
      // A failing row is reported and the others still run (exit status 1).
      try {
        result.rows.push_back(run_backend(config, backend, options));
      } catch (const Error& error) {
        std::fprintf(stderr, "train_step: %s with %s failed: %s\n", config.label.c_str(),
                     backend.c_str(), error.what());
        result.rows.push_back(Row{.backend = backend, .error = error.what()});
        failures = true;
      }
    }
    if (const Row* eager = eager_row(result)) {
      for (Row& row : result.rows) {
        if (row.measured && row.backend != kEagerBackend) {
          row.losses_match_eager = row.first_loss == eager->first_loss &&
                                   row.last_loss == eager->last_loss && row.steps == eager->steps;
        }
      }
    }
    results.push_back(result);
  }
  print_table(results);
  if (!options.json_path.empty()) write_json_file(options.json_path, report_json(results, options));
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  return grove::benchmarks::benchmark_main("train_step", grove::benchmarks::run, argc, argv);
}
