// data_parallel: step time and scaling efficiency of data-parallel training
// (issue #10) for mlp16x512 and gpt4x256 on 1 and 2 devices, "eager" vs
// "cudagraphs", in one process. Each rank is a thread with its own device
// (cuda:r, or sim:r on the host emulation), its own shard of --batch rows and
// its own tree manager (Note [One thread per GPU] in
// runtime/cuda/nccl_communicator.h); gradients are averaged inside the
// backward by bucketed all_reduce (NCCL on cuda, host rendezvous on sim).
//
// Per (model, devices, backend): --warmup untimed steps, then --iters timed
// steps; a step's time is rank 0's host time from the call until its loss is
// on the host (which synchronizes its stream; the collectives make the ranks
// wait for each other). Weak scaling: every rank keeps --batch rows, so the
// scaling efficiency of N devices is (throughput N / throughput 1) / N =
// median step(1) / median step(N). The table and --json also say whether the
// collectives were captured (the tree replayed every stage without falling
// back to eager).
//
// --overlap on,off runs each configuration with the gradient all-reduces on
// the communication stream, overlapping the rest of the backward (on, the
// default of AllReduceOptions), and in line on the compute stream (off), in
// the same process; "overlap gain" is the in-line median step over the
// overlapped one for the same (case, backend, devices).
//
// --variants runs each configuration once per variant of the gradient
// all-reduce, one device included (a variant's scaling efficiency is against
// its own one-device step: the one-rank collectives cost time too, e.g. the
// grouped layout's ~20 us on mlp16x512); a variant is tokens joined by '+':
// flat (bucket buffers back to back, one collective per bucket: the default)
// or grouped (one buffer per gradient, grouped), kibN (bucket KiB), tailN
// (the gradients produced last, N KiB, form the last bucket, Note [Last
// gradient bucket]; tail0: none), firstN (the first bucket closes at N KiB,
// Note [First gradient bucket]), mergeN (a last bucket under N KiB joins the
// one before it, Note [Small last bucket]; merge0: never), deferN (the last N
// buckets are reduced by the optimizer step, overlapping the other params'
// updates, Note [Last buckets reduced in the optimizer step]; defer0: none),
// mergeN and deferN defaulting to data_parallel_all_reduce()'s; onlyB (reduce
// bucket B alone: what that bucket's collective costs the step; the
// gradients of the others stay unaveraged, for timing only), none (no
// collective at all: the plain single-device step, for timing only).
//
//   data_parallel [--device auto|cuda|sim] [--gpus 1,2] [--iters 50] [--warmup 5]
//                 [--mlp-batch 32] [--gpt-batch 8] [--seq 32] [--backends eager,cudagraphs]
//                 [--overlap on,off] [--cases mlp16x512,gpt4x256] [--models DIR] [--json FILE]
//                 [--bucket-kib 4096] [--tail-kib N] [--variants flat,grouped+tail1024,...]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "benchmarks/common/flags.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/latency.h"
#include "benchmarks/common/table.h"
#include "compiler/backends/backend_registry.h"
#include "compiler/model_format/model_json.h"
#include "distributed/data_parallel_trainer.h"
#include "runtime/collectives/setup.h"
#include "runtime/device_context.h"
#include "training/losses.h"

namespace grove::benchmarks {
namespace {

using distributed::DataParallelOptions;
using distributed::DataParallelTrainer;
using runtime::Device;

struct Options {
  std::string device = "auto";
  std::vector<int> gpus = {1, 2};
  int iters = 50;
  int warmup = 5;
  int64_t mlp_batch = 32;
  int64_t gpt_batch = 8;
  int64_t seq = 32;
  std::vector<std::string> backends = {"eager", "cudagraphs"};
  std::vector<bool> overlap = {true, false};
  std::vector<std::string> cases = {"mlp16x512", "gpt4x256"};
  std::string models_dir = "benchmarks/models";
  std::string json;
  int64_t bucket_kib = 4096;  // gradient bytes per all-reduce bucket
  int64_t tail_kib = 0;       // AllReduceOptions::last_bucket_bytes
  std::vector<std::string> variants = {""};
};

// One variant of the gradient all-reduce (see --variants).
struct Variant {
  std::string name;
  bool contiguous = true;
  int64_t bucket_kib = 0;
  int64_t tail_kib = 0;
  int64_t first_kib = 0;
  int64_t merge_kib = -1;  // -1: data_parallel_all_reduce()'s
  int deferred = -1;       // -1: data_parallel_all_reduce()'s
  bool reduce_nothing = false;
  int only_bucket = -1;
};

Variant parse_variant(const std::string& spec, const Options& options) {
  Variant variant;
  variant.name = spec;
  variant.bucket_kib = options.bucket_kib;
  variant.tail_kib = options.tail_kib;
  size_t start = 0;
  while (start < spec.size()) {
    size_t end = spec.find('+', start);
    if (end == std::string::npos) end = spec.size();
    const std::string token = spec.substr(start, end - start);
    auto number = [&](const char* prefix) {
      return cli::parse_integer("--variants", token.substr(std::string(prefix).size()), 0,
                                int64_t{1} << 22);
    };
    if (token == "flat") {
      variant.contiguous = true;
    } else if (token == "grouped") {
      variant.contiguous = false;
    } else if (token.rfind("kib", 0) == 0) {
      variant.bucket_kib = number("kib");
    } else if (token.rfind("tail", 0) == 0) {
      variant.tail_kib = number("tail");
    } else if (token.rfind("first", 0) == 0) {
      variant.first_kib = number("first");
    } else if (token.rfind("merge", 0) == 0) {
      variant.merge_kib = number("merge");
    } else if (token.rfind("defer", 0) == 0) {
      variant.deferred = static_cast<int>(number("defer"));
    } else if (token == "none") {
      variant.reduce_nothing = true;
    } else if (token.rfind("only", 0) == 0) {
      variant.only_bucket = static_cast<int>(number("only"));
    } else {
      throw UsageError(str_cat("data_parallel: --variants: '", token, "' in '", spec,
                               "' is none of flat, grouped, kibN, tailN, firstN, mergeN, deferN, "
                               "onlyB, none"));
    }
    start = end + 1;
  }
  GROVE_CHECK_AS(ConfigError, variant.bucket_kib > 0, "data_parallel: variant '", spec,
                 "': the bucket size must be positive");
  return variant;
}

const std::vector<FlagSpec> kFlags = {
    {"--device", "DEVICE", "auto (default), cuda or sim"},
    {"--gpus", "LIST", "device counts to compare (default 1,2)"},
    {"--iters", "N", "timed steps (default 50)"},
    {"--warmup", "N", "untimed steps first (default 5)"},
    {"--mlp-batch", "N", "rows per device for mlp16x512 (default 32)"},
    {"--gpt-batch", "N", "rows per device for gpt4x256 (default 8)"},
    {"--seq", "T", "gpt4x256 sequence length (default 32)"},
    {"--backends", "LIST", "execution backends (default eager,cudagraphs)"},
    {"--overlap", "LIST", "on and/or off: all-reduces overlapped or in line (default on,off)"},
    {"--cases", "LIST", "mlp16x512 and/or gpt4x256 (default both)"},
    {"--bucket-kib", "N", "gradient KiB per all-reduce bucket (default 4096)"},
    {"--tail-kib", "N",
     "KiB of gradients produced last that form the last bucket (default 0: off)"},
    {"--variants", "LIST", "all-reduce variants of multi-device runs (see the header)"},
    {"--models", "DIR", "directory of the benchmark models (default benchmarks/models)"},
    kJsonFlag,
};

Options parse(const FlagValues& flags) {
  Options options;
  options.device = flags.text("--device", options.device);
  if (flags.has("--gpus")) {
    options.gpus.clear();
    for (const std::string& n : flags.list("--gpus", {})) {
      options.gpus.push_back(static_cast<int>(cli::parse_integer("--gpus", n, 1, 1 << 16)));
    }
  }
  options.iters = static_cast<int>(flags.integer("--iters", options.iters, 1, 1 << 30));
  options.warmup = static_cast<int>(flags.integer("--warmup", options.warmup, 1, 1 << 30));
  options.mlp_batch = flags.integer("--mlp-batch", options.mlp_batch, 1);
  options.gpt_batch = flags.integer("--gpt-batch", options.gpt_batch, 1);
  options.seq = flags.integer("--seq", options.seq, 1);
  options.backends = flags.list("--backends", options.backends);
  if (flags.has("--overlap")) {
    options.overlap.clear();
    for (const std::string& mode : flags.list("--overlap", {})) {
      if (mode != "on" && mode != "off") {
        throw UsageError(
            str_cat("data_parallel: --overlap takes a list of on and off, found '", mode, "'"));
      }
      options.overlap.push_back(mode == "on");
    }
  }
  options.cases = flags.list("--cases", options.cases);
  for (const std::string& name : options.cases) {
    if (name != "mlp16x512" && name != "gpt4x256") {
      throw UsageError(
          str_cat("data_parallel: --cases takes mlp16x512 and/or gpt4x256, found '", name, "'"));
    }
  }
  options.models_dir = flags.text("--models", options.models_dir);
  options.bucket_kib = flags.integer("--bucket-kib", options.bucket_kib, 1, int64_t{1} << 22);
  options.tail_kib = flags.integer("--tail-kib", options.tail_kib, 0, int64_t{1} << 22);
  options.variants = flags.list("--variants", options.variants);
  for (const std::string& spec : options.variants) parse_variant(spec, options);
  options.json = flags.text("--json", options.json);
  std::vector<std::string> known = compiler::backends::backend_names();
  for (const std::string& backend : options.backends) {
    GROVE_CHECK_AS(ConfigError, std::find(known.begin(), known.end(), backend) != known.end(),
                   "data_parallel: backend '", backend, "' is not registered in this binary");
  }
  return options;
}

struct Case {
  std::string model;  // file stem in benchmarks/models
  std::string label;
  compiler::model_format::DimBindings dims;
  bool next_token = false;
};

struct Row {
  std::string label, backend, variant;
  int gpus = 1;
  bool overlap = true;      // asked for (AllReduceOptions::overlap)
  bool overlapped = false;  // what the trainer did
  LatencySummary step;
  double first_loss = 0, last_loss = 0;
  bool captured = false;
  size_t buckets = 0;
  std::vector<int64_t> bucket_bytes;  // per bucket, in production order
  std::vector<int64_t> nodes_after;   // per bucket: backward nodes left to overlap
  size_t deferred = 0;                // last buckets reduced by the optimizer step
};

// Rank `rank` of `gpus`: builds the model on its device, trains, and (rank 0)
// fills `row`.
void run_rank(const Case& config, const Options& options, const std::string& backend, int gpus,
              bool overlap, const Variant& variant, int rank, Device device,
              const std::string& group, Row& row) {
  runtime::collectives::join_local_group(device, rank, gpus, group,
                                         runtime::collectives::default_collective_timeout());
  compiler::ir::Program model = compiler::model_format::load_model_file(
      options.models_dir + "/" + config.model + ".json", config.dims, device);
  compiler::ir::ValueId logits = model.outputs()[0];
  compiler::ir::ValueId loss;
  compiler::TensorList inputs;
  std::mt19937_64 rng(2026 + static_cast<uint64_t>(rank));
  std::vector<compiler::ir::ValueId> model_inputs =
      model.inputs_of_kind(compiler::ir::ValueKind::kInput);
  const runtime::Shape shape = model.value(model_inputs[0]).type.shape;
  if (!config.next_token) {
    loss = training::add_mse_loss(model, logits);
    std::normal_distribution<float> unit(0, 1);
    std::vector<float> x(static_cast<size_t>(runtime::shape_numel(shape)));
    for (float& v : x) v = unit(rng);
    std::vector<float> target(x.size());
    for (size_t i = 0; i < target.size(); ++i) target[i] = 0.3f + 0.05f * unit(rng);
    inputs = {runtime::Tensor::from_vector(x, shape, device),
              runtime::Tensor::from_vector(target, shape, device)};
  } else {
    loss = training::add_next_token_loss(model, logits, model_inputs[0]);
    int64_t vocabulary = model.value(logits).type.shape.back();
    std::vector<int64_t> tokens;
    for (int64_t r = 0; r < shape[0]; ++r) {
      for (int64_t t = 0; t < shape[1]; ++t) tokens.push_back((3 * r + 7 * t) % vocabulary);
    }
    inputs = {runtime::Tensor::from_vector(tokens, shape, device)};
  }
  DataParallelOptions dp;
  dp.trainer.backend = backend;
  dp.trainer.optimizer = training::OptimizerKind::kSgdMomentum;
  dp.all_reduce.bucket_bytes = variant.bucket_kib << 10;
  dp.all_reduce.last_bucket_bytes = variant.tail_kib << 10;
  dp.all_reduce.first_bucket_bytes = variant.first_kib << 10;
  if (variant.merge_kib >= 0) dp.all_reduce.min_last_bucket_bytes = variant.merge_kib << 10;
  if (variant.deferred >= 0) dp.all_reduce.deferred_last_buckets = variant.deferred;
  if (variant.reduce_nothing) dp.all_reduce.outputs = std::set<size_t>();
  dp.all_reduce.overlap = overlap;
  dp.contiguous_buckets = variant.contiguous;
  if (variant.only_bucket >= 0) {
    // The plan of the full run, from a trainer that never steps.
    const distributed::GradientBuckets buckets = DataParallelTrainer(model, loss, dp).buckets();
    GROVE_CHECK_AS(ConfigError, static_cast<size_t>(variant.only_bucket) < buckets.outputs.size(),
                   "data_parallel: variant '", variant.name, "': there are only ",
                   buckets.outputs.size(), " buckets");
    const std::vector<size_t>& only = buckets.outputs[static_cast<size_t>(variant.only_bucket)];
    dp.all_reduce.outputs = std::set<size_t>(only.begin(), only.end());
    dp.all_reduce.last_bucket_bytes = 0;
    dp.all_reduce.first_bucket_bytes = 0;
    dp.all_reduce.deferred_last_buckets = 0;
  }
  DataParallelTrainer trainer(model, loss, dp);
  training::Hyperparameters hyper;
  hyper.lr = config.next_token ? 0.05 : 0.01;
  std::vector<double> samples;
  double first = 0, last = 0;
  for (int i = 0; i < options.warmup + options.iters; ++i) {
    Stopwatch watch;
    double value = trainer.step(inputs, hyper).to_doubles().at(0);  // synchronizes
    if (i >= options.warmup) samples.push_back(watch.elapsed_us());
    if (i == 0) first = value;
    last = value;
  }
  if (rank == 0) {
    row.step = summarize(samples);
    row.first_loss = first;
    row.last_loss = last;
    row.buckets = trainer.buckets().outputs.size();
    row.bucket_bytes = trainer.buckets().bytes;
    row.nodes_after = trainer.buckets().nodes_after;
    row.deferred = trainer.buckets().deferred;
    row.overlapped = trainer.overlaps_communication();
    if (backend != "eager") {
      const compiler::backends::BackendStats stats = trainer.backend_stats();
      row.captured = stats.tree && stats.tree->counters.eager_calls == 0 &&
                     stats.tree->counters.capture_failures == 0 && stats.tree->counters.replays > 0;
    }
  }
  trainer.reset_backend();  // this thread's graphs go before its communicator
  runtime::collectives::leave_group(device);
}

Row run_case(const Case& config, const Options& options, const std::string& backend, int gpus,
             bool overlap, const Variant& variant, runtime::DeviceType type) {
  Row row;
  row.label = config.label;
  row.backend = backend;
  row.variant = variant.name;
  row.gpus = gpus;
  row.overlap = overlap;
  static int groups = 0;
  std::string group = str_cat("data_parallel.", ++groups);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(gpus));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < gpus; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        run_rank(config, options, backend, gpus, overlap, variant, rank, Device{type, rank}, group,
                 row);
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  // Progress, so that a run cut short still says what it measured.
  std::cerr << "data_parallel: " << row.label << " " << backend << " x" << gpus
            << (overlap ? " overlap" : " in line") << " [" << variant.name
            << "]: " << format_fixed(row.step.median_us, 1) << " us median, " << row.buckets
            << " buckets (KiB/nodes after:";
  for (size_t b = 0; b < row.bucket_bytes.size(); ++b) {
    std::cerr << " " << format_fixed(static_cast<double>(row.bucket_bytes[b]) / 1024, 0) << "/"
              << row.nodes_after[b];
  }
  std::cerr << ")"
            << (row.deferred > 0 ? str_cat(", last ", row.deferred, " in the optimizer step") : "")
            << "\n";
  return row;
}

int run(int argc, char** argv) {
  std::optional<FlagValues> parsed =
      parse_flags_or_help("data_parallel",
                          "Data-parallel training: step time and scaling efficiency on 1 and 2 "
                          "devices, eager vs cudagraphs.",
                          argc, argv, kFlags);
  if (!parsed) return 0;
  const FlagValues& flags = *parsed;
  Options options = parse(flags);
  Device first =
      options.device == "auto" ? runtime::default_device() : runtime::Device::parse(options.device);
  const runtime::DeviceType type = first.type;
  int available = type == runtime::DeviceType::kCuda ? runtime::cuda_device_count() : 64;
  std::vector<Case> all_cases = {{"mlp16x512",
                                  str_cat("mlp16x512 b=", options.mlp_batch),
                                  {{"batch", options.mlp_batch}},
                                  false},
                                 {"gpt4x256",
                                  str_cat("gpt4x256 b=", options.gpt_batch, " T=", options.seq),
                                  {{"batch", options.gpt_batch}, {"seq", options.seq}},
                                  true}};
  std::vector<Case> cases;
  for (const Case& config : all_cases) {
    if (std::find(options.cases.begin(), options.cases.end(), config.model) !=
        options.cases.end()) {
      cases.push_back(config);
    }
  }
  std::vector<Row> rows;
  for (const Case& config : cases) {
    for (const std::string& backend : options.backends) {
      for (bool overlap : options.overlap) {
        // Each variant on 1 and 2 devices back to back, so that its
        // efficiency compares steps measured close together.
        for (const std::string& spec : options.variants) {
          for (int gpus : options.gpus) {
            if (gpus > available) {
              if (spec == options.variants.front() && overlap == options.overlap.front()) {
                std::cerr << "skipping " << gpus << " devices: only " << available << " "
                          << runtime::device_type_name(type) << " devices here\n";
              }
              continue;
            }
            rows.push_back(run_case(config, options, backend, gpus, overlap,
                                    parse_variant(spec, options), type));
          }
        }
      }
    }
  }
  // Efficiency against the same (case, backend, overlap, variant) on one device; the
  // overlap gain against the same (case, backend, devices) in line.
  using Key = std::tuple<std::string, std::string, int, bool, std::string>;
  std::map<Key, double> median;
  for (const Row& row : rows)
    median[{row.label, row.backend, row.gpus, row.overlap, row.variant}] = row.step.median_us;
  // The variant column only when --variants names some (scripts read the plain table).
  const bool show_variants = options.variants != std::vector<std::string>{""};
  std::vector<Column> columns = {{"case (per-rank batch)"},
                                 {"backend"},
                                 {"devices", Align::kRight},
                                 {"step median us", Align::kRight},
                                 {"p90 us", Align::kRight},
                                 {"samples/s", Align::kRight},
                                 {"scaling eff", Align::kRight},
                                 {"buckets", Align::kRight},
                                 {"overlap"},
                                 {"overlap gain", Align::kRight},
                                 {"first loss", Align::kRight},
                                 {"last loss", Align::kRight},
                                 {"collectives captured"}};
  if (show_variants) columns.insert(columns.begin() + 2, Column{"variant"});
  Table table(columns);
  nlohmann::json report = report_header("data_parallel", Device{type, 0});
  report["bucket_kib"] = options.bucket_kib;
  report["tail_kib"] = options.tail_kib;
  for (const Row& row : rows) {
    const Case& config = row.label.rfind("mlp", 0) == 0 ? all_cases[0] : all_cases[1];
    const int64_t batch = config.dims.at("batch");
    double throughput = row.step.median_us > 0 ? 1e6 * batch * row.gpus / row.step.median_us : 0;
    auto base = median.find({row.label, row.backend, 1, row.overlap, row.variant});
    std::string efficiency = "-";
    double efficiency_value = 0;
    if (base != median.end() && row.step.median_us > 0) {
      efficiency_value = base->second / row.step.median_us;
      efficiency = format_fixed(100 * efficiency_value, 1) + "%";
    }
    auto in_line = median.find({row.label, row.backend, row.gpus, false, row.variant});
    std::string gain = "-";
    double gain_value = 0;
    if (row.overlap && in_line != median.end() && row.step.median_us > 0) {
      gain_value = in_line->second / row.step.median_us;
      gain = format_fixed(gain_value, 3) + "x";
    }
    // "on*": asked for, but the trainer ran in line (a backward in several segments).
    std::string overlap = row.overlap ? (row.overlapped ? "on" : "on*") : "off";
    std::string captured = row.backend == "eager" ? "-" : (row.captured ? "yes" : "NO");
    std::vector<std::string> cells = {row.label,
                                      row.backend,
                                      std::to_string(row.gpus),
                                      format_fixed(row.step.median_us, 1),
                                      format_fixed(row.step.p90_us, 1),
                                      format_fixed(throughput, 0),
                                      efficiency,
                                      std::to_string(row.buckets),
                                      overlap,
                                      gain,
                                      format_fixed(row.first_loss, 4),
                                      format_fixed(row.last_loss, 4),
                                      captured};
    if (show_variants) cells.insert(cells.begin() + 2, row.variant);
    table.add_row(cells);
    nlohmann::json entry = {{"case", row.label},         {"model", config.model},
                            {"dims", config.dims},       {"backend", row.backend},
                            {"devices", row.gpus},       {"step", latency_json(row.step)},
                            {"variant", row.variant},    {"samples_per_s", throughput},
                            {"buckets", row.buckets},    {"first_loss", row.first_loss},
                            {"last_loss", row.last_loss}};
    if (efficiency_value > 0) entry["scaling_efficiency"] = efficiency_value;
    entry["overlap"] = row.overlap;
    entry["bucket_bytes"] = row.bucket_bytes;
    entry["bucket_nodes_after"] = row.nodes_after;
    entry["buckets_deferred"] = row.deferred;
    entry["overlapped"] = row.overlapped;
    if (gain_value > 0) entry["overlap_gain"] = gain_value;
    if (row.backend != "eager") entry["collectives_captured"] = row.captured;
    report["results"].push_back(entry);
  }
  std::fputs(table.render().c_str(), stdout);
  if (!options.json.empty()) write_json_file(options.json, report);
  return 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  return grove::benchmarks::benchmark_main("data_parallel", grove::benchmarks::run, argc, argv);
}
