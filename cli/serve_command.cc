// `grove serve MODEL.json --weights W.safetensors`: the batching server
// (serving::Server) behind HTTP, speaking the KServe v2 / Open Inference
// Protocol, with /metrics for Prometheus. SIGTERM or SIGINT drains: every
// request already received is answered, then the process exits 0.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/common/json_report.h"
#include "cli/common/table.h"
#include "cli/model_setup.h"
#include "cli/serve_support.h"
#include "cli/terminal_text.h"
#include "cli/tree_stats.h"
#include "cli/weights_io.h"
#include "runtime/device_context.h"
#include "serving/bucket_plan.h"
#include "serving/grpc_server.h"
#include "serving/http_server.h"
#include "serving/process_memory.h"
#include "serving/replanning_server.h"
#include "serving/server.h"
#include "weights/model_weights.h"

namespace grove::cli {
namespace {

struct ServeOptions {
  ModelSpec model;
  std::string weights_path;
  std::string stats_json_path;   // --stats-json: the server's stats at exit
  std::string buckets_text;      // --buckets as given
  std::string plan_note;         // what --buckets auto:FILE planned, for the start-up lines
  serving::ReplanConfig replan;  // period 0 unless --buckets auto...
  serving::ServerConfig server;
  serving::HttpConfig http;
  int grpc_port = -1;               // --grpc-port; -1: no gRPC front
  int64_t graph_memory_budget = 0;  // bytes; 0: none
};

// The text of a small regular file; UsageError naming `flag` otherwise.
std::string read_small_file(const std::string& flag, const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error) ||
      std::filesystem::file_size(path, error) > (uint64_t{16} << 20)) {
    throw UsageError(str_cat(flag, ": '", path, "' is not a regular file of at most 16 MiB"));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) throw UsageError(str_cat(flag, ": cannot read '", path, "'"));
  return text.str();
}

// The batch sizes a stats file (--stats-json of an earlier serve) saw:
// its "batches_by_rows" object, {"3": 500, "12": 400}.
std::map<int64_t, uint64_t> batches_seen(const std::string& path) {
  nlohmann::json stats;
  try {
    stats = nlohmann::json::parse(read_small_file("--buckets auto:", path));
  } catch (const nlohmann::json::exception& error) {
    throw UsageError(str_cat("--buckets auto:", path, ": not JSON: ", error.what()));
  }
  const nlohmann::json* by_rows = stats.is_object() ? &stats : nullptr;
  if (by_rows && by_rows->contains("stats")) by_rows = &(*by_rows)["stats"];
  if (!by_rows || !by_rows->contains("batches_by_rows") ||
      !(*by_rows)["batches_by_rows"].is_object()) {
    throw UsageError(str_cat("--buckets auto:", path,
                             ": no \"batches_by_rows\" object (write one with grove serve "
                             "--stats-json)"));
  }
  std::map<int64_t, uint64_t> seen;
  for (const auto& [rows, count] : (*by_rows)["batches_by_rows"].items()) {
    int64_t size = 0;
    try {
      size = std::stoll(rows);
    } catch (const std::exception&) {
      size = 0;
    }
    if (size < 1 || !count.is_number_unsigned()) {
      throw UsageError(str_cat("--buckets auto:", path, ": batches_by_rows entry \"", rows,
                               "\": ", count.dump(), " is not rows -> a count"));
    }
    seen[size] += count.get<uint64_t>();
  }
  return seen;
}

// --buckets: "pow2" (the powers of two below max batch, then max batch), a
// list "1,3,12,16", or "auto:FILE" (Note [Bucket planning], from the batch
// sizes an earlier run saw, as many buckets as pow2 would use, at most).
std::vector<int64_t> parse_buckets(const std::string& text, int64_t max_batch,
                                   std::string& plan_note) {
  const std::vector<int64_t> pow2 = serving::power_of_two_buckets(max_batch);
  if (text == "pow2" || text == "auto") return pow2;
  if (text.rfind("auto:", 0) == 0) {
    std::map<int64_t, uint64_t> seen = batches_seen(text.substr(5));
    for (auto it = seen.begin(); it != seen.end();) {
      it = it->first > max_batch ? seen.erase(it) : std::next(it);
    }
    std::vector<int64_t> planned = serving::plan_buckets(seen, max_batch, pow2.size());
    uint64_t batches = 0;
    for (const auto& [rows, count] : seen) batches += count;
    plan_note = str_cat("planned from ", batches, " batches in ", text.substr(5), ": padded rows ",
                        serving::padded_rows(planned, seen),
                        " (powers of two: ", serving::padded_rows(pow2, seen), "), ",
                        planned.size(), " buckets (", pow2.size(), ")");
    return planned;
  }
  std::vector<int64_t> buckets;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    buckets.push_back(parse_positive_int("--buckets", item, 1 << 20));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (!std::is_sorted(buckets.begin(), buckets.end()) ||
      std::adjacent_find(buckets.begin(), buckets.end()) != buckets.end()) {
    throw UsageError(str_cat("--buckets ", text, ": sizes must be strictly increasing"));
  }
  if (buckets.back() != max_batch) {
    throw UsageError(
        str_cat("--buckets ", text, ": the largest bucket must be --max-batch (", max_batch, ")"));
  }
  return buckets;
}

ServeOptions parse_serve_options(const ParsedFlags& args) {
  ServeOptions options;
  options.model = parse_model_spec("serve", args, BoundDims::kSeq);
  if (options.model.device.is_cpu()) {
    throw UsageError("--device cpu cannot serve; use cuda or sim");
  }
  options.weights_path = args.value("--weights");
  serving::ServerConfig& server = options.server;
  server.backend = args.value("--backend", kGraphBackend);
  require_backend(server.backend);
  server.max_batch = args.integer("--max-batch", 64, 1, 4096);
  options.buckets_text = args.value("--buckets", "pow2");
  server.buckets = parse_buckets(options.buckets_text, server.max_batch, options.plan_note);
  options.replan.period = std::chrono::milliseconds(0);
  if (options.buckets_text == "auto" || options.buckets_text.rfind("auto:", 0) == 0) {
    options.replan.period =
        std::chrono::milliseconds(1000 * args.integer("--replan-every-s", 30, 1, 86400));
    options.replan.min_batches =
        static_cast<uint64_t>(args.integer("--replan-min-batches", 200, 1, 1 << 30));
  } else if (args.has("--replan-every-s") || args.has("--replan-min-batches")) {
    throw UsageError("--replan-every-s and --replan-min-batches are for --buckets auto");
  }
  server.max_wait = std::chrono::microseconds(args.integer("--max-wait-us", 500, 0, 10000000));
  server.queue_capacity = static_cast<size_t>(args.integer("--queue-capacity", 1024, 1, 1 << 20));
  server.warmup_calls = server.backend == kGraphBackend ? 3 : 1;
  server.devices = {options.model.device};
  options.http = parse_http_flags(args);
  if (args.has("--grpc-port")) {
    options.grpc_port = static_cast<int>(args.integer("--grpc-port", 0, 0, 65535));
  }
  options.stats_json_path = args.value("--stats-json");
  if (!options.stats_json_path.empty()) check_output_path("--stats-json", options.stats_json_path);
  options.graph_memory_budget =
      args.integer("--graph-memory-budget", 0, 0, std::numeric_limits<int64_t>::max());
  options.replan.memory_budget_bytes = options.graph_memory_budget;
  return options;
}

std::string mib(double bytes) { return format_fixed(bytes / double(1 << 20), 1) + " MiB"; }

}  // namespace

const CommandSpec& serve_command_spec() {
  static const CommandSpec spec{
      "grove",
      "serve",
      "MODEL.json",
      "serve a model over HTTP (KServe v2 / Open Inference Protocol) with batching",
      "Compiles MODEL.json once per batch-size bucket (powers of two up to --max-batch), loads\n"
      "--weights into every bucket, records the buckets' CUDA graphs largest first into one\n"
      "pool (--backend cudagraphs), prints what it holds, and answers HTTP on --host:--port:\n"
      "GET /v2/health/live, /v2/health/ready, /v2/models/NAME, /metrics (Prometheus) and\n"
      "POST /v2/models/NAME/infer with JSON tensors. Requests are batched (up to --max-batch\n"
      "rows, waiting at most --max-wait-us for company). A full queue answers 503 with\n"
      "Retry-After; SIGTERM or SIGINT stops accepting, answers every request already read\n"
      "(Connection: close), reports the counts and exits 0 (during start-up: exits 0 at once).\n"
      "--grpc-port N also serves the protocol's gRPC form (inference.GRPCInferenceService:\n"
      "ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer).\n"
      "Given a checkpoint directory instead of MODEL.json, serves a language model: see\n"
      "`grove serve MODEL_DIR --help`.",
      with_model_flags(
          BoundDims::kSeq,
          {
              {"--weights", "FILE",
               "params and buffers from a safetensors file (default: initializers)"},
              {"--port", "N", "TCP port (default 8000; 0 picks a free one and prints it)"},
              {"--host", "ADDR", "address to listen on (default 127.0.0.1)"},
              {"--backend", "NAME", "cudagraphs (default) or eager"},
              {"--max-batch", "N", "most rows in one batch (default 64)"},
              {"--max-wait-us", "US",
               "longest a request waits for its batch to fill (default 500)"},
              {"--queue-capacity", "N", "requests that may wait before 503 (default 1024)"},
              {"--max-body-bytes", "N",
               "larger request bodies (Content-Length or chunked) get 413 (default 16777216)"},
              {"--max-header-bytes", "N",
               "request line and header fields larger than this get 431 (default 16384)"},
              {"--max-header-fields", "N", "more header fields than this get 431 (default 64)"},
              {"--idle-timeout-ms", "MS",
               "a keep-alive connection idle this long is closed (default 5000)"},
              {"--header-timeout-ms", "MS",
               "a request header not complete this long after its first byte gets 408 (default "
               "10000)"},
              {"--body-timeout-ms", "MS",
               "a request body not complete this long after its header gets 408 (default 30000)"},
              {"--max-connections", "N",
               "more open connections get 503 and are closed (default 32768)"},
              {"--grpc-port", "N",
               "also serve KServe v2 over gRPC (inference.GRPCInferenceService) on --host:N, "
               "with the same limits (default: off; 0 picks a free port and prints it)"},
              {"--http-threads", "N",
               "threads that read and answer HTTP, for any number of connections (default: the "
               "cores, at least 2)"},
              {"--no-answer-relay", "",
               "hand answers to the HTTP threads from the thread that delivers them (the request "
               "reaper's), not from a thread of their own (Note [Answers handed on by a relay])"},
              {"--buckets", "pow2|LIST|auto|auto:FILE",
               "batch sizes compiled: powers of two (default), a list ending at --max-batch, or "
               "auto: "
               "re-planned from the traffic while serving (from the batch sizes in a --stats-json "
               "FILE of an earlier run at start with auto:FILE)"},
              {"--replan-every-s", "S", "with --buckets auto: how often to re-plan (default 30)"},
              {"--replan-min-batches", "N",
               "with --buckets auto: fewest batches a plan is made from (default 200)"},
              {"--stats-json", "FILE", "write the server's stats (batches by rows, ...) at exit"},
              {"--graph-memory-budget", "BYTES",
               "refuse to start when the recorded graphs' pool holds more (default: no limit)"},
          })};
  return spec;
}

int serve_command(const std::vector<std::string>& args) {
  // Before any thread starts: Note [Freed memory kept by the serving process].
  serving::keep_freed_memory_for_serving();
  std::error_code not_a_directory;
  if (!args.empty() && std::filesystem::is_directory(args[0], not_a_directory)) {
    return serve_llm_command(args);  // a checkpoint directory: cli/serve_llm_command.cc
  }
  ParsedFlags parsed = parse_flags(serve_command_spec(), args);
  if (parsed.help_requested()) {
    std::fputs(help_text(serve_command_spec()).c_str(), stdout);
    return 0;
  }
  ServeOptions options = parse_serve_options(parsed);
  // Every thread started from here on (workers, HTTP pool) inherits the
  // mask, so only the watcher receives SIGTERM and SIGINT.
  block_stop_signals();
  std::optional<SignalWatcher> watcher;
  watcher.emplace();  // Note [Signals during start-up]

  ModelSpec one_row = options.model;
  one_row.dims["batch"] = 1;
  compiler::ir::Program probe = load_program(one_row);
  const std::string name = probe.name();
  options.http.model_name = name;
  std::printf(
      "grove serve %s on %s (%s), backend %s, %s, buckets %s, max wait %lld us\n",
      printable(name).c_str(), options.model.device.str().c_str(),
      runtime::device_context(options.model.device).platform().name().c_str(),
      options.server.backend.c_str(), runtime::dtype_name(options.model.dtype),
      [&] {
        std::string text;
        for (int64_t b : options.server.buckets) {
          text += (text.empty() ? "" : ",") + std::to_string(b);
        }
        return text;
      }()
          .c_str(),
      static_cast<long long>(options.server.max_wait.count()));
  if (!options.plan_note.empty()) std::printf("buckets %s\n", options.plan_note.c_str());
  std::optional<weights::SafetensorsFile> weights;
  if (!options.weights_path.empty()) {
    // Note [Weights kept for re-plans]: the server reads the file once into
    // memory it owns; a mapping would fault (SIGBUS) when a re-plan reads a
    // file truncated since. Guarded by
    // ServeFilesTest.test_weights_truncated_while_serving_are_not_read_again.
    weights = weights::SafetensorsFile::read(options.weights_path);
    weights::check_weights(probe, *weights);  // before compiling anything
    std::printf("weights %s: %s, read into memory once and copied into each bucket's model\n",
                printable(options.weights_path).c_str(), weights_summary(*weights).c_str());
    options.server.prepare_model = [&weights](const compiler::backends::CompiledModel& model) {
      weights::load_weights(model, *weights);
    };
  } else {
    std::printf("weights: the model's initializers (no --weights)\n");
  }
  std::fflush(stdout);

  const ModelSpec spec = options.model;
  serving::ProgramFactory factory = [spec](int64_t batch, runtime::Device device) {
    ModelSpec bound = spec;
    bound.dims["batch"] = batch;
    bound.device = device;
    return load_program(bound);
  };
  options.replan.on_switch = [](const std::string& message) {
    std::printf("%s\n", message.c_str());
    std::fflush(stdout);
  };
  // The device memory the server takes (params, pool, workspaces and the
  // instantiated graphs), as each device's free-memory delta.
  const std::vector<runtime::Device> devices = options.server.resolved_devices();
  std::vector<int64_t> free_before;
  for (runtime::Device device : devices) {
    free_before.push_back(runtime::device_context(device).platform().memory_info().free_bytes);
  }
  serving::ReplanningServer server(factory, options.server, options.replan);
  const std::vector<serving::WorkerReport> reports = server.worker_reports();
  const std::vector<serving::WorkerSnapshot> snapshots = server.backend_snapshots();
  int64_t pool_bytes = 0;
  for (size_t d = 0; d < snapshots.size() && d < reports.size(); ++d) {
    const serving::WorkerReport& report = reports[d];
    const serving::WorkerSnapshot& snapshot = snapshots[d];
    const std::string device = report.device.str();
    std::string line = str_cat("compiled ", options.server.buckets.size(), " buckets on ", device,
                               " and warmed them up in ", format_fixed(report.warmup_ms, 0), " ms");
    if (report.tree_after_warmup) {
      const runtime::TreeCounters& tree = report.tree_after_warmup->counters;
      line += str_cat(": ", tree.recordings, " graphs recorded, ", tree.replays, " replays, ",
                      tree.eager_calls, " eager fallback calls");
    }
    std::printf("%s\n", line.c_str());
    if (snapshot.memory.device) {
      const runtime::PoolStats& pool = snapshot.memory.pool;
      pool_bytes += static_cast<int64_t>(pool.reserved_bytes);
      std::printf("graph memory held on %s: pool %s reserved (%s allocated in %lld segments)\n",
                  device.c_str(), mib(static_cast<double>(pool.reserved_bytes)).c_str(),
                  mib(static_cast<double>(pool.allocated_bytes)).c_str(),
                  static_cast<long long>(pool.segments));
    } else {
      std::printf("graph memory held on %s: none (backend %s records no graphs)\n", device.c_str(),
                  options.server.backend.c_str());
    }
  }
  for (size_t d = 0; d < devices.size() && d < free_before.size(); ++d) {
    const int64_t free_after =
        runtime::device_context(devices[d]).platform().memory_info().free_bytes;
    if (free_before[d] < 0 || free_after < 0) continue;  // the device cannot say
    std::printf(
        "device memory the server took on %s (free-memory delta: params, pool, workspaces and "
        "the instantiated graphs): %s\n",
        devices[d].str().c_str(),
        mib(static_cast<double>(std::max<int64_t>(0, free_before[d] - free_after))).c_str());
  }
  if (options.graph_memory_budget > 0 && pool_bytes > options.graph_memory_budget) {
    server.shutdown(serving::ShutdownMode::kCancel);
    throw Error(str_cat("the recorded graphs hold ", pool_bytes,
                        " bytes of pool memory, over --graph-memory-budget ",
                        options.graph_memory_budget, "; lower --max-batch or raise the budget"));
  }
  // Note [Draining gRPC on stop]: the gRPC front, when asked for, shares the
  // batching server, the body limit and /metrics with the HTTP front.
  std::optional<serving::GrpcServer> grpc;
  if (options.grpc_port >= 0) {
    grpc.emplace(server, serving::GrpcConfig{.model_name = name,
                                             .host = options.http.host,
                                             .port = options.grpc_port,
                                             .max_message_bytes = options.http.max_body_bytes,
                                             .handshake_timeout_ms = options.http.header_timeout_ms,
                                             .idle_timeout_ms = options.http.idle_timeout_ms});
    options.http.more_metrics = [&grpc] { return grpc->metrics_text(); };
  }
  serving::HttpServer http(server, options.http);
  std::printf("listening on http://%s:%d (POST /v2/models/%s/infer, GET /metrics)\n",
              options.http.host.c_str(), http.port(), printable(name).c_str());
  if (grpc) {
    std::printf("listening on grpc://%s:%d (inference.GRPCInferenceService, model %s)\n",
                options.http.host.c_str(), grpc->port(), printable(name).c_str());
  }
  std::fflush(stdout);
  serving::GrpcServeReport grpc_served;
  std::thread grpc_thread;
  if (grpc) grpc_thread = std::thread([&] { grpc_served = grpc->serve(); });
  auto stop_fronts = [&] {
    http.stop();
    if (grpc) grpc->stop();
  };
  watcher->serving(stop_fronts);
  serving::HttpServeReport served;
  try {
    served = http.serve();
  } catch (...) {
    watcher.reset();  // before `http` is destroyed: the watcher points at it
    stop_fronts();
    if (grpc_thread.joinable()) grpc_thread.join();
    throw;
  }
  watcher.reset();
  // Both fronts have answered every request they received before the
  // batching server stops.
  stop_fronts();
  if (grpc_thread.joinable()) grpc_thread.join();
  server.shutdown(serving::ShutdownMode::kDrain);
  serving::ServerStats stats = server.stats();
  if (!options.stats_json_path.empty()) {
    nlohmann::json report = report_header("grove serve", options.model.device);
    report["model"] = name;
    report["backend"] = options.server.backend;
    report["buckets"] = server.buckets();
    report["bucket_switches"] = server.switches();
    report["max_batch"] = options.server.max_batch;
    report["stats"] = stats.to_json();
    report["workers"] = serving::reports_json(server.worker_reports());
    write_json_file(options.stats_json_path, report);
  }
  std::printf(
      "http: %llu responses written (%llu after the signal, with Connection: close), "
      "%llu connections closed by a deadline, %llu socket reads of requests\n",
      static_cast<unsigned long long>(served.responses),
      static_cast<unsigned long long>(served.responses_after_stop),
      static_cast<unsigned long long>(served.timed_out),
      static_cast<unsigned long long>(served.reads));
  if (grpc) {
    std::printf("grpc: %llu calls answered (%llu after the signal)\n",
                static_cast<unsigned long long>(grpc_served.answers),
                static_cast<unsigned long long>(grpc_served.answers_after_stop));
  }
  std::printf(
      "stopped: %llu requests answered, %llu failed, %llu refused (queue full), %llu "
      "batches, mean %.1f rows per batch\n",
      static_cast<unsigned long long>(stats.completed),
      static_cast<unsigned long long>(stats.failed),
      static_cast<unsigned long long>(stats.rejected),
      static_cast<unsigned long long>(stats.batches), stats.mean_batch_rows());
  return 0;
}

}  // namespace grove::cli
