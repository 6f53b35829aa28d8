// backend_latency: per-call inference latency of the "eager" and
// "cudagraphs" execution backends in one process, f32, on mlp16x512 (batch 1
// and 256) and gpt4x256 (batch 1, T = 32).
//
// For each case both backends compile the same program and get the same
// seeded inputs. After --warmup untimed calls of each (the graph backend warms
// up, records, then replays), one more call of each checks that the outputs
// are bitwise identical; then the timed calls alternate between the backends,
// call by call, so drift on the machine hits both alike, and each timed call
// follows an untimed call of its own (Note [Each timed call after one of its
// own]). Latency is host time from the call until the calling thread's stream
// is synchronized (results ready): median, p90 and spread; the ratio is
// eager's median over cudagraphs'. For "cudagraphs" the tree manager's
// counters (recordings, replays, warm-ups, eager fallbacks by reason) are read
// from its stats() JSON, for the whole case and for the timing loop (timed and
// priming calls). A third row, "bare replay", launches the graphs of the last
// cudagraphs call directly (same stream, same sync), interleaved with the
// others: cudagraphs' median minus it is what the tree manager and the backend
// add per call. Those graphs begin with grove's input copies (Note [Input
// copies inside the graph]); a fourth row, "bare replay, body only", launches
// a graph of the eager callable captured directly, without them, so that the
// GPU cost of the in-graph copies shows too. A last pass times each on the GPU
// between events (Note [GPU time of a call]), which splits that difference
// into host and device parts. The rows that launch graphs also report the
// graphs' node count (RESULTS.md's node floor multiplies it by
// launch_overhead's GPU time per graph node).
//
// When this binary has no "cudagraphs" backend registered, its rows say
// "cudagraphs backend not registered" and eager is still measured.
//
//   backend_latency [--device auto|cuda|sim] [--iters 200] [--warmup 20]
//                   [--json backend_latency.json] [--models benchmarks/models]
//                   [--mlp-batches 1,256] [--gpt-batch 1] [--seq 32]
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/backend_latency/backend_comparison.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/latency.h"
#include "benchmarks/common/table.h"
#include "benchmarks/common/timed_run_options.h"
#include "compiler/backends/backend_stats_json.h"
#include "compiler/backends/compile.h"
#include "compiler/model_format/model_json.h"
#include "runtime/device_context.h"
#include "runtime/graph_recording.h"

namespace grove::benchmarks {
namespace {

constexpr const char* kName = "backend_latency";
// The row of the bare replay: the very graphs "cudagraphs" recorded, launched
// without the tree manager (the floor its replay path is judged against).
constexpr const char* kBareReplay = "bare replay";
// The body alone: the eager callable captured into a graph of its own, with
// no input copy in front of it (the floor of any input binding).
constexpr const char* kBareBody = "bare replay, body only";

const TimedRunDefaults kTimed{.unit = "calls", .iters = 200, .warmup = 20};

std::vector<FlagSpec> flag_table() {
  std::vector<FlagSpec> flags = timed_run_flags(kTimed);
  flags.push_back({"--mlp-batches", "B1,B2", "mlp16x512 batch sizes (default 1,256)"});
  flags.push_back({"--gpt-batch", "B", "gpt4x256 batch size (default 1)"});
  flags.push_back({"--seq", "T", "gpt4x256 sequence length (default 32)"});
  return flags;
}

const std::vector<FlagSpec> kFlags = flag_table();

struct Options : TimedRunOptions {
  std::vector<int64_t> mlp_batches = {1, 256};
  int64_t gpt_batch = 1;
  int64_t seq = 32;
};

struct Case {
  std::string label;
  std::string model;
  compiler::model_format::DimBindings dims;
};

// One backend's measurement of one case.
struct Row {
  std::string backend;
  bool measured = false;  // false: not registered, or failed with `error`
  std::string error;
  LatencySummary latency;
  LatencySummary enqueue;  // host time until the call returned
  LatencySummary gpu;      // GPU time between events around the call (own pass)
  double compile_ms = 0;
  std::optional<bool> identical_to_eager;   // graph backend only
  std::optional<GraphActivity> whole_case;  // graph backend: compile to the last call
  // graph backend: the timing loop (timed and priming calls)
  std::optional<GraphActivity> timed_calls;
  nlohmann::json backend_programs;  // graph backend: from CompiledModel::backend_stats()
  size_t bare_graphs = 0;           // bare replay: graphs launched per call
  // cudagraphs and bare replay: the graphs of the last call; body only: its graph.
  std::optional<GraphNodeCount> graph_nodes;
};

struct CaseResult {
  Case config;
  size_t kernels = 0, gemms = 0;
  std::vector<Row> rows;
};

// A compiled model with its timing samples.
struct Contender {
  std::string backend;
  std::optional<compiler::backends::CompiledModel> model;
  std::vector<double> samples_us;
  std::vector<double> enqueue_us;  // host time until the call returned
  std::vector<double> gpu_us;      // GPU time between events around the call
  double compile_ms = 0;
};

// A bare replay variant: a call that launches the recorded graphs directly.
struct BareContender {
  std::string name;
  std::function<void()> call;
  std::optional<GraphNodeCount> graph_nodes;
  std::vector<double> samples_us, enqueue_us, gpu_us;
};

// Note [GPU time of a call]: the GPU time between timing events recorded
// just before and just after a call, in a pass of its own after the timed
// calls (recording events adds host time the latency columns should not
// carry). Latency minus GPU time is what the host adds; for the bare replay
// and cudagraphs the GPU time differs only by the work the backend enqueues
// besides the graph (input copies, copy-backs).
void time_on_gpu(const std::function<void()>& call, runtime::Platform& platform,
                 runtime::StreamHandle stream, runtime::EventHandle before,
                 runtime::EventHandle after, std::vector<double>& gpu_us) {
  platform.record_event(before, stream);
  call();
  platform.record_event(after, stream);
  platform.synchronize_stream(stream);
  gpu_us.push_back(1000.0 * platform.elapsed_ms(before, after));
}

// Note [Each timed call after one of its own]
// The contenders take turns, so a timed call would otherwise follow a call of
// another contender. That is not neutral: the bare replay launches the very
// graph the cudagraphs call before it had just run, over the same
// intermediates, and found the GPU's caches warm for it, while every other
// row followed work over other addresses. On an H200 that alone made the
// bare replay of gpt4x256 b=1 about 24 us faster than the same graph launched
// by "cudagraphs". A serving loop calls one model again and again, so each
// timed call now follows one untimed call of its own contender.
void prime(const std::function<void()>& call, runtime::Platform& platform,
           runtime::StreamHandle stream) {
  call();
  platform.synchronize_stream(stream);
}

// Times one call: until it returns (enqueue) and until its stream is done.
void call_and_wait(const std::function<void()>& call, runtime::Platform& platform,
                   runtime::StreamHandle stream, std::vector<double>& enqueue_us,
                   std::vector<double>& total_us) {
  Stopwatch watch;
  call();
  enqueue_us.push_back(watch.elapsed_us());
  platform.synchronize_stream(stream);
  total_us.push_back(watch.elapsed_us());
}

// The eager callable captured directly into a graph over a private pool (its
// outputs stay allocated there while the graph lives); for the body-only row.
struct BodyGraph {
  runtime::Device device;
  std::optional<runtime::PoolId> pool;
  std::unique_ptr<runtime::GraphRecording> graph;
  compiler::TensorList outputs;

  bool capture(const compiler::backends::CompiledModel& model, const compiler::TensorList& inputs,
               runtime::Device on, runtime::StreamHandle stream) {
    device = on;
    runtime::CachingAllocator& allocator = runtime::device_context(device).allocator();
    pool = allocator.create_pool();
    graph = std::make_unique<runtime::GraphRecording>(device);
    try {
      graph->capture_begin(stream, *pool);
      try {
        outputs = model(inputs);
      } catch (...) {
        graph->abort_capture();
        throw;
      }
      graph->capture_end();
      graph->instantiate();
      return true;
    } catch (const Error& error) {
      std::cerr << kName
                << ": no body-only row: capturing the eager callable failed: " << error.what()
                << "\n";
      outputs.clear();
      graph.reset();
      return false;
    }
  }
  ~BodyGraph() {
    outputs.clear();
    graph.reset();
    if (pool) runtime::device_context(device).allocator().release_pool(*pool);
  }
};

CaseResult run_case(const Case& config, const Options& options) {
  CaseResult result;
  result.config = config;
  compiler::ir::Program program = compiler::model_format::load_model_file(
      options.models_dir + "/" + config.model + ".json", config.dims, options.device);
  const bool graphs = backend_registered(kGraphBackend);

  std::vector<Contender> contenders;
  for (const char* backend : {kEagerBackend, kGraphBackend}) {
    if (backend == std::string(kGraphBackend) && !graphs) continue;
    Contender contender;
    contender.backend = backend;
    Stopwatch watch;
    contender.model.emplace(compiler::backends::compile(program, {.backend = backend}));
    contender.compile_ms = watch.elapsed_us() / 1000;
    contenders.push_back(std::move(contender));
  }
  // Compiling records nothing: the tree's counters from here on are this case's.
  auto graph_counters = [&] {
    return graphs ? tree_counters(contenders[1].model->backend_stats()) : nlohmann::json();
  };
  nlohmann::json stats_at_start = graph_counters();
  compiler::lowering::KernelReport report = contenders[0].model->kernel_report();
  result.kernels = report.kernels.size();
  result.gemms = report.library_gemms;

  runtime::DeviceContext& context = runtime::device_context(options.device);
  runtime::Platform& platform = context.platform();
  runtime::StreamHandle stream = context.current_stream();
  const int64_t vocabulary = program.value(program.outputs()[0]).type.shape.back();
  compiler::TensorList inputs = random_inputs(program, options.device, 2026, vocabulary);

  for (Contender& contender : contenders) {
    for (int64_t i = 0; i < options.warmup; ++i) (*contender.model)(inputs);
  }
  platform.synchronize_stream(stream);
  // Graph outputs are overwritten by the next replay: compare before calling again.
  std::optional<bool> identical;
  if (contenders.size() > 1) {
    compiler::TensorList eager_outputs = (*contenders[0].model)(inputs);
    compiler::TensorList graph_outputs = (*contenders[1].model)(inputs);
    identical = bitwise_equal(eager_outputs, graph_outputs);
  }
  // The bare replay: the graphs the last cudagraphs call launched, launched
  // directly (no input binding, no invariant checks, no output re-emission).
  std::vector<runtime::GraphRecording*> bare_graphs;
  std::optional<GraphNodeCount> graph_nodes;  // of the graphs a cudagraphs call launches
  if (contenders.size() > 1) {
    (*contenders[1].model)(inputs);
    graph_nodes = count_graph_nodes(contenders[1].model->backend_graphs());
    if (identical.value_or(false)) bare_graphs = contenders[1].model->backend_graphs();
  }
  std::vector<BareContender> bares;
  BodyGraph body;
  if (!bare_graphs.empty()) {
    bares.push_back({kBareReplay,
                     [&] {
                       for (runtime::GraphRecording* graph : bare_graphs) graph->replay(stream);
                     },
                     graph_nodes});
    platform.synchronize_stream(stream);
    if (body.capture(*contenders[0].model, inputs, options.device, stream)) {
      bares.push_back(
          {kBareBody, [&] { body.graph->replay(stream); }, count_graph_nodes({body.graph.get()})});
    }
  }
  platform.synchronize_stream(stream);

  nlohmann::json stats_before_timing = graph_counters();
  // Note [Each timed call after one of its own].
  for (int64_t i = 0; i < options.iters; ++i) {
    for (Contender& contender : contenders) {
      std::function<void()> call = [&] { (*contender.model)(inputs); };
      prime(call, platform, stream);
      call_and_wait(call, platform, stream, contender.enqueue_us, contender.samples_us);
    }
    for (BareContender& bare : bares) {
      prime(bare.call, platform, stream);
      call_and_wait(bare.call, platform, stream, bare.enqueue_us, bare.samples_us);
    }
  }
  nlohmann::json stats_after = graph_counters();

  // Note [GPU time of a call].
  {
    runtime::EventHandle before = platform.create_event(true);
    runtime::EventHandle after = platform.create_event(true);
    for (int64_t i = 0; i < options.iters; ++i) {
      for (Contender& contender : contenders) {
        std::function<void()> call = [&] { (*contender.model)(inputs); };
        prime(call, platform, stream);
        time_on_gpu(call, platform, stream, before, after, contender.gpu_us);
      }
      for (BareContender& bare : bares) {
        prime(bare.call, platform, stream);
        time_on_gpu(bare.call, platform, stream, before, after, bare.gpu_us);
      }
    }
    platform.destroy_event(before);
    platform.destroy_event(after);
  }

  for (const Contender& contender : contenders) {
    Row row;
    row.backend = contender.backend;
    row.measured = true;
    row.latency = summarize(contender.samples_us);
    row.enqueue = summarize(contender.enqueue_us);
    row.gpu = summarize(contender.gpu_us);
    row.compile_ms = contender.compile_ms;
    if (contender.backend == kGraphBackend) {
      row.identical_to_eager = identical;
      row.whole_case = graph_activity(stats_at_start, stats_after);
      row.timed_calls = graph_activity(stats_before_timing, stats_after);
      row.graph_nodes = graph_nodes;
      // Its "programs" say which segments were captured and why others were not.
      row.backend_programs =
          compiler::backends::stats_json(contender.model->backend_stats())["programs"];
    }
    result.rows.push_back(row);
  }
  if (!graphs) result.rows.push_back(Row{.backend = kGraphBackend});
  for (const BareContender& bare : bares) {
    Row row;
    row.backend = bare.name;
    row.measured = true;
    row.latency = summarize(bare.samples_us);
    row.enqueue = summarize(bare.enqueue_us);
    row.gpu = summarize(bare.gpu_us);
    row.bare_graphs = bare.name == kBareBody ? 1 : bare_graphs.size();
    row.graph_nodes = bare.graph_nodes;
    result.rows.push_back(row);
  }
  return result;
}

Options parse_options(const FlagValues& flags) {
  Options options;
  static_cast<TimedRunOptions&>(options) = parse_timed_run(flags, kTimed);
  options.mlp_batches.clear();
  for (const std::string& item : flags.list("--mlp-batches", {"1", "256"})) {
    FlagValues one(kName, {{"--mlp-batches", item}});
    options.mlp_batches.push_back(one.integer("--mlp-batches", 1, 1, 1 << 16));
  }
  options.gpt_batch = flags.integer("--gpt-batch", options.gpt_batch, 1, 1 << 12);
  options.seq = flags.integer("--seq", options.seq, 1, 128);
  return options;
}

// Why a row has no measurement, for its table cell.
// Eager's median of a case, the reference of its speedups (0 when eager failed).
double eager_median_us(const CaseResult& result) {
  for (const Row& row : result.rows) {
    if (row.backend == kEagerBackend && row.measured) return row.latency.median_us;
  }
  return 0;
}

void print_table(const std::vector<CaseResult>& results) {
  Table table({{"case"},
               {"backend"},
               {"median us", Align::kRight},
               {"p90 us", Align::kRight},
               {"spread", Align::kRight},
               {"enqueue us", Align::kRight},
               {"GPU us", Align::kRight},
               {"speedup", Align::kRight},
               {"identical"},
               {"graph nodes"},
               {"graphs (timing loop)"},
               {"graphs (whole case)"}});
  for (const CaseResult& result : results) {
    double eager_median = eager_median_us(result);
    for (const Row& row : result.rows) {
      if (!row.measured) {
        table.add_row({result.config.label, row.backend, "-", "-", "", "", "", "", "", "",
                       unmeasured_cell(row.error), ""});
        continue;
      }
      std::string identical =
          row.identical_to_eager ? (*row.identical_to_eager ? "yes" : "NO") : "";
      table.add_row({result.config.label, row.backend, format_fixed(row.latency.median_us, 1),
                     format_fixed(row.latency.p90_us, 1),
                     format_fixed(100 * row.latency.spread(), 1) + "%",
                     format_fixed(row.enqueue.median_us, 1), format_fixed(row.gpu.median_us, 1),
                     eager_median > 0 ? format_ratio(eager_median / row.latency.median_us) : "",
                     identical, node_count_cell(row.graph_nodes), activity_cell(row.timed_calls),
                     activity_cell(row.whole_case)});
    }
  }
  std::fputs(table.render().c_str(), stdout);
}

nlohmann::json report_json(const std::vector<CaseResult>& results, const Options& options) {
  nlohmann::json report = report_header(kName, options.device);
  report["iters"] = options.iters;
  report["warmup"] = options.warmup;
  report["dtype"] = "f32";
  report["latency"] = "host time from the call until the stream is synchronized";
  report["enqueue"] = "host time from the call until it returned (work queued, not done)";
  report["gpu"] = "GPU time between timing events around the call, in a pass of its own";
  report["speedup"] = "eager median / this backend's median";
  report["graph_nodes_per_call"] =
      "nodes of the graphs one call launches (cudaGraphGetNodes: kernels, copies, memsets), "
      "counted on the untimed call before the timing loop (the graphs the timed calls replay); "
      "graph_kernel_nodes_per_call: kernel nodes alone";
  report["compile_ms"] =
      "compile() wall time; the second backend of a case reuses the kernels the first generated";
  report["results"] = nlohmann::json::array();
  for (const CaseResult& result : results) {
    double eager_median = eager_median_us(result);
    for (const Row& row : result.rows) {
      nlohmann::json entry{{"case", result.config.label},
                           {"model", result.config.model},
                           {"dims", result.config.dims},
                           {"backend", row.backend}};
      if (!row.measured) {
        entry["status"] = row.error.empty() ? kNotRegistered : "failed";
        if (!row.error.empty()) entry["error"] = row.error;
        report["results"].push_back(entry);
        continue;
      }
      entry["status"] = "measured";
      entry["latency"] = latency_json(row.latency);
      entry["enqueue"] = latency_json(row.enqueue);
      entry["gpu"] = latency_json(row.gpu);
      if (eager_median > 0) entry["speedup_vs_eager"] = eager_median / row.latency.median_us;
      entry["compile_ms"] = row.compile_ms;
      entry["eager_kernels_per_call"] = result.kernels;
      entry["eager_gemms_per_call"] = result.gemms;
      if (row.identical_to_eager) entry["identical_to_eager"] = *row.identical_to_eager;
      if (row.timed_calls) entry["graphs_timed_calls"] = row.timed_calls->to_json();
      if (row.whole_case) entry["graphs_whole_case"] = row.whole_case->to_json();
      if (!row.backend_programs.is_null()) entry["backend_programs"] = row.backend_programs;
      if (row.bare_graphs > 0) entry["graphs_per_call"] = row.bare_graphs;
      if (row.graph_nodes) {
        entry["graph_nodes_per_call"] = row.graph_nodes->nodes;
        entry["graph_kernel_nodes_per_call"] = row.graph_nodes->kernel_nodes;
        entry["graph_count_per_call"] = row.graph_nodes->graphs;
      }
      report["results"].push_back(entry);
    }
  }
  return report;
}

int run(int argc, char** argv) {
  std::optional<FlagValues> parsed = parse_flags_or_help(
      kName, "Per-call inference latency of eager vs cudagraphs.", argc, argv, kFlags);
  if (!parsed) return 0;
  const FlagValues& flags = *parsed;
  Options options = parse_options(flags);
  std::vector<Case> cases;
  for (int64_t batch : options.mlp_batches) {
    cases.push_back({str_cat("mlp16x512 b=", batch), "mlp16x512", {{"batch", batch}}});
  }
  cases.push_back({str_cat("gpt4x256 b=", options.gpt_batch, " T=", options.seq),
                   "gpt4x256",
                   {{"batch", options.gpt_batch}, {"seq", options.seq}}});

  std::printf("backend latency on %s (%s), f32, %lld timed calls per backend after %lld warm-up\n",
              options.device.str().c_str(),
              runtime::device_context(options.device).platform().name().c_str(),
              static_cast<long long>(options.iters), static_cast<long long>(options.warmup));
  if (!backend_registered(kGraphBackend)) std::printf("note: %s\n", kNotRegistered);
  std::fflush(stdout);
  std::vector<CaseResult> results;
  bool failures = false;
  for (const Case& config : cases) {
    // A failing case is reported and the others still run (exit status 1).
    try {
      results.push_back(run_case(config, options));
    } catch (const Error& error) {
      std::fprintf(stderr, "backend_latency: %s failed: %s\n", config.label.c_str(), error.what());
      CaseResult failed{config, 0, 0, {}};
      for (const char* backend : {kEagerBackend, kGraphBackend}) {
        failed.rows.push_back(Row{.backend = backend, .error = error.what()});
      }
      results.push_back(failed);
      failures = true;
    }
  }
  print_table(results);
  if (!options.json_path.empty()) write_json_file(options.json_path, report_json(results, options));
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  return grove::benchmarks::benchmark_main("backend_latency", grove::benchmarks::run, argc, argv);
}
