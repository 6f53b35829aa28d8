// serve_http: `grove serve`'s path end to end over loopback — HTTP parsing,
// KServe v2 JSON, batching, the model, the JSON answer — for "eager" against
// "cudagraphs" in one process, on mlp16x512 by default.
//
// For each max batch and backend one batching Server is built (every bucket
// compiled and warmed up) behind an HttpServer on a free loopback port. For
// each offered rate, --clients client threads (each one keep-alive HTTP
// connection) send requests at Poisson arrival times, rate / clients each
// (open loop: a client that falls behind sends at once and the delay is
// charged to latency, which runs from a request's scheduled arrival to the
// moment its whole answer was read). A 503 (full queue) counts as rejected.
// Answered/s is 200 answers over max(window, last answer - window start).
//
//   serve_http [--device auto|cuda|sim] [--model mlp16x512] [--rates 2000,8000,32000]
//              [--max-batches 16,64] [--clients 64] [--duration-ms 1500] [--json FILE]
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "benchmarks/common/flags.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/latency.h"
#include "benchmarks/common/table.h"
#include "runtime/device_context.h"
#include "serving/bucket_plan.h"
#include "serving/http_server.h"
#include "serving/server.h"

namespace grove::benchmarks {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kName = "serve_http";

const std::vector<FlagSpec> kFlags = {
    {"--device", "auto|cuda|sim", "where to run (auto: cuda when present, else sim)"},
    {"--models", "DIR", "directory of the model JSON files (default benchmarks/models)"},
    {"--model", "NAME", "model served, batched along its 'batch' dim (default mlp16x512)"},
    {"--backends", "B1,B2", "execution backends (default eager,cudagraphs)"},
    {"--rates", "R1,R2", "offered requests per second (default 2000,8000,32000)"},
    {"--max-batches", "M1,M2", "max rows per batch; buckets are powers of 2 up to it (16,64)"},
    {"--clients", "N", "client threads, one keep-alive connection each (default 64)"},
    {"--duration-ms", "MS", "arrivals per (rate, backend) span this long (default 1500)"},
    {"--max-wait-us", "US", "ServerConfig::max_wait (default 200)"},
    {"--seed", "N", "seed of arrivals and request values (default 2026)"},
    {"--json", "FILE", "write the results as JSON"},
};

struct Options {
  runtime::Device device;
  std::string models_dir = "benchmarks/models";
  std::string model = "mlp16x512";
  std::vector<std::string> backends = {"eager", "cudagraphs"};
  std::vector<double> rates = {2000, 8000, 32000};
  std::vector<int64_t> max_batches = {16, 64};
  int64_t clients = 64;
  int64_t duration_ms = 1500;
  int64_t max_wait_us = 200;
  uint64_t seed = 2026;
  std::string json_path;
};

struct RunResult {
  int64_t max_batch = 0;
  std::string backend;
  double offered_rate = 0;
  uint64_t sent = 0, answered = 0, rejected = 0, errors = 0;
  double answered_rate = 0;
  std::optional<LatencySummary> latency;
  double mean_batch_rows = 0;
  bool saturated() const { return rejected > 0 || answered_rate < 0.9 * offered_rate; }
};

// One row of the model's input as a KServe v2 body (float inputs only).
std::vector<std::string> request_bodies(const serving::ModelSignature& signature,
                                        std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<std::string> bodies;
  for (int i = 0; i < 16; ++i) {
    nlohmann::json inputs = nlohmann::json::array();
    for (const serving::RowSpec& input : signature.inputs) {
      if (input.dtype != runtime::DType::kF32) {
        throw UsageError(str_cat(kName, ": input '", input.name, "' is ",
                                 runtime::dtype_name(input.dtype), "; this benchmark sends f32"));
      }
      std::vector<int64_t> shape{1};
      shape.insert(shape.end(), input.row_shape.begin(), input.row_shape.end());
      std::vector<float> data(static_cast<size_t>(runtime::shape_numel(input.row_shape)));
      for (float& value : data) value = uniform(rng);
      inputs.push_back(
          {{"name", input.name}, {"shape", shape}, {"datatype", "FP32"}, {"data", data}});
    }
    bodies.push_back(nlohmann::json{{"inputs", inputs}}.dump());
  }
  return bodies;
}

void wait_until(Clock::time_point target) {
  auto now = Clock::now();
  if (now < target) std::this_thread::sleep_for(target - now);
}

RunResult run_load(const serving::Server& server, int port, const std::string& path,
                   const std::vector<std::string>& bodies, double rate, const Options& options,
                   uint64_t seed) {
  RunResult result;
  result.max_batch = server.config().max_batch;
  result.backend = server.config().backend;
  result.offered_rate = rate;
  const serving::ServerStats before = server.stats();
  const double window_s = static_cast<double>(options.duration_ms) * 1e-3;
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(20);
  std::mutex mutex;
  std::vector<double> latencies_us;
  Clock::time_point last_answer = start;
  std::vector<std::thread> clients;
  for (int64_t c = 0; c < options.clients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(c));
      std::exponential_distribution<double> gap(rate / static_cast<double>(options.clients));
      httplib::Client client("127.0.0.1", port);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);  // as the server (serving/http_server.cc)
      client.set_read_timeout(60, 0);
      std::vector<double> mine;
      uint64_t sent = 0, answered = 0, rejected = 0, errors = 0;
      Clock::time_point last = start;
      for (double t = gap(rng); t < window_s; t += gap(rng)) {
        const Clock::time_point scheduled =
            start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t));
        wait_until(scheduled);
        ++sent;
        auto answer = client.Post(path, bodies[sent % bodies.size()], "application/json");
        const Clock::time_point done = Clock::now();
        if (answer && answer->status == 200) {
          ++answered;
          mine.push_back(std::chrono::duration<double, std::micro>(done - scheduled).count());
          last = std::max(last, done);
        } else if (answer && answer->status == 503) {
          ++rejected;
        } else {
          ++errors;
        }
      }
      std::lock_guard<std::mutex> lock(mutex);
      latencies_us.insert(latencies_us.end(), mine.begin(), mine.end());
      result.sent += sent;
      result.answered += answered;
      result.rejected += rejected;
      result.errors += errors;
      last_answer = std::max(last_answer, last);
    });
  }
  for (std::thread& client : clients) client.join();
  const double span_s =
      std::max(window_s, std::chrono::duration<double>(last_answer - start).count());
  result.answered_rate = static_cast<double>(result.answered) / span_s;
  if (!latencies_us.empty()) result.latency = summarize(latencies_us);
  const serving::ServerStats after = server.stats();
  const uint64_t batches = after.batches - before.batches;
  result.mean_batch_rows = batches ? double(after.rows - before.rows) / double(batches) : 0;
  return result;
}

Options parse_options(const FlagValues& flags) {
  Options options;
  options.device = resolve_device(flags.text("--device", "auto"));
  options.models_dir = flags.text("--models", options.models_dir);
  options.model = flags.text("--model", options.model);
  options.backends = flags.list("--backends", options.backends);
  options.rates.clear();
  for (const std::string& item : flags.list("--rates", {"2000", "8000", "32000"})) {
    options.rates.push_back(FlagValues(kName, {{"--rates", item}}).positive_number("--rates", 1));
  }
  options.max_batches.clear();
  for (const std::string& item : flags.list("--max-batches", {"16", "64"})) {
    options.max_batches.push_back(
        FlagValues(kName, {{"--max-batches", item}}).integer("--max-batches", 1, 1, 4096));
  }
  options.clients = flags.integer("--clients", options.clients, 1, 1024);
  options.duration_ms = flags.integer("--duration-ms", options.duration_ms, 1, 600000);
  options.max_wait_us = flags.integer("--max-wait-us", options.max_wait_us, 0, 10000000);
  options.seed = static_cast<uint64_t>(flags.integer("--seed", 2026, 0));
  options.json_path = flags.text("--json", "");
  return options;
}

const RunResult* find_run(const std::vector<RunResult>& runs, int64_t max_batch,
                          const std::string& backend, double rate) {
  for (const RunResult& run : runs) {
    if (run.max_batch == max_batch && run.backend == backend && run.offered_rate == rate) {
      return &run;
    }
  }
  return nullptr;
}

// The best answered/s of `backend` at `max_batch` over every rate.
double best_rate(const std::vector<RunResult>& runs, int64_t max_batch,
                 const std::string& backend) {
  double best = 0;
  for (const RunResult& run : runs) {
    if (run.max_batch == max_batch && run.backend == backend) {
      best = std::max(best, run.answered_rate);
    }
  }
  return best;
}

void print_tables(const std::vector<RunResult>& runs, const Options& options) {
  Table table({{"max batch", Align::kRight},
               {"backend"},
               {"offered/s", Align::kRight},
               {"answered/s", Align::kRight},
               {"rejected", Align::kRight},
               {"errors", Align::kRight},
               {"p50 us", Align::kRight},
               {"p99 us", Align::kRight},
               {"mean batch", Align::kRight},
               {"saturated"}});
  for (const RunResult& run : runs) {
    table.add_row({std::to_string(run.max_batch), run.backend, format_fixed(run.offered_rate, 0),
                   format_fixed(run.answered_rate, 0), std::to_string(run.rejected),
                   std::to_string(run.errors),
                   run.latency ? format_fixed(run.latency->median_us, 0) : "-",
                   run.latency ? format_fixed(run.latency->p99_us, 0) : "-",
                   format_fixed(run.mean_batch_rows, 1), run.saturated() ? "yes" : ""});
  }
  std::fputs(table.render().c_str(), stdout);
  std::printf("\nbest answered/s, cudagraphs over eager:\n");
  Table best({{"max batch", Align::kRight},
              {"eager", Align::kRight},
              {"cudagraphs", Align::kRight},
              {"ratio", Align::kRight}});
  for (int64_t max_batch : options.max_batches) {
    double eager = best_rate(runs, max_batch, "eager");
    double graphs = best_rate(runs, max_batch, "cudagraphs");
    if (eager <= 0 || graphs <= 0) continue;
    best.add_row({std::to_string(max_batch), format_fixed(eager, 0), format_fixed(graphs, 0),
                  format_ratio(graphs / eager)});
  }
  std::fputs(best.render().c_str(), stdout);
}

nlohmann::json report_json(const std::vector<RunResult>& runs, const Options& options,
                           const nlohmann::json& servers) {
  nlohmann::json report = report_header(kName, options.device);
  report["model"] = options.model;
  report["clients"] = options.clients;
  report["duration_ms"] = options.duration_ms;
  report["max_wait_us"] = options.max_wait_us;
  report["arrivals"] = "open loop, Poisson per client, one keep-alive connection each";
  report["latency"] = "scheduled arrival to the whole HTTP answer read by the client";
  report["servers"] = servers;
  report["results"] = nlohmann::json::array();
  for (const RunResult& run : runs) {
    nlohmann::json entry{{"max_batch", run.max_batch},
                         {"backend", run.backend},
                         {"offered_per_s", run.offered_rate},
                         {"sent", run.sent},
                         {"answered", run.answered},
                         {"answered_per_s", run.answered_rate},
                         {"rejected", run.rejected},
                         {"errors", run.errors},
                         {"mean_batch_rows", run.mean_batch_rows},
                         {"saturated", run.saturated()}};
    if (run.latency) entry["latency"] = latency_json(*run.latency);
    if (run.backend == "cudagraphs") {
      const RunResult* eager = find_run(runs, run.max_batch, "eager", run.offered_rate);
      if (eager && eager->latency && run.latency) {
        entry["p99_eager_over_this"] = eager->latency->p99_us / run.latency->p99_us;
      }
    }
    report["results"].push_back(entry);
  }
  return report;
}

int run(int argc, char** argv) {
  FlagValues flags = parse_flags(kName, argc, argv, kFlags);
  if (flags.help_requested()) {
    std::fputs(usage_text(kName,
                          "Open-loop load over HTTP (KServe v2 JSON, loopback) on grove's "
                          "server: answered/s and p50/p99 of eager vs cudagraphs.",
                          kFlags)
                   .c_str(),
               stdout);
    return 0;
  }
  Options options = parse_options(flags);
  std::printf("serve_http on %s (%s): %s, 1 row per request, %lld clients, %lld ms per run\n",
              options.device.str().c_str(),
              runtime::device_context(options.device).backend().name().c_str(),
              options.model.c_str(), static_cast<long long>(options.clients),
              static_cast<long long>(options.duration_ms));
  std::fflush(stdout);
  serving::ProgramFactory model =
      serving::model_file_factory(options.models_dir + "/" + options.model + ".json");
  std::vector<RunResult> runs;
  nlohmann::json servers = nlohmann::json::array();
  for (int64_t max_batch : options.max_batches) {
    for (const std::string& backend : options.backends) {
      serving::ServerConfig config;
      config.devices = {options.device};
      config.backend = backend;
      config.buckets = serving::power_of_two_buckets(max_batch);
      config.max_batch = max_batch;
      config.max_wait = std::chrono::microseconds(options.max_wait_us);
      config.queue_capacity = 1 << 16;
      config.warmup_calls = backend == "cudagraphs" ? 3 : 1;
      Stopwatch watch;
      serving::Server server(model, config);
      serving::HttpServer http(server, {.model_name = options.model,
                                        .port = 0,
                                        .threads = static_cast<int>(options.clients) + 8});
      std::thread listener([&] { http.serve(); });
      std::printf("  max batch %lld, %s: compiled and warmed up %zu buckets in %.0f ms\n",
                  static_cast<long long>(max_batch), backend.c_str(), config.buckets.size(),
                  watch.elapsed_us() / 1000);
      std::fflush(stdout);
      std::mt19937_64 rng(options.seed + static_cast<uint64_t>(max_batch));
      std::vector<std::string> bodies = request_bodies(server.signature(), rng);
      const std::string path = "/v2/models/" + options.model + "/infer";
      for (size_t r = 0; r < options.rates.size(); ++r) {
        runs.push_back(run_load(server, http.port(), path, bodies, options.rates[r], options,
                                options.seed * 7919 + r * 31 + static_cast<uint64_t>(max_batch)));
      }
      http.stop();
      listener.join();
      server.shutdown();
      servers.push_back({{"max_batch", max_batch},
                         {"backend", backend},
                         {"stats", server.stats().to_json()},
                         {"backend_snapshots", server.backend_snapshots()}});
    }
  }
  print_tables(runs, options);
  if (!options.json_path.empty())
    write_json_file(options.json_path, report_json(runs, options, servers));
  return 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  return grove::benchmarks::benchmark_main("serve_http", grove::benchmarks::run, argc, argv);
}
