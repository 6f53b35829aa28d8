// serve: the batching server (serving/) under open-loop load, "eager" against
// "cudagraphs" in one process, on mlp16x512 by default.
//
// For each max batch, one server per backend is built (every bucket compiled
// and warmed up), one request is answered by both to check the answers are
// bitwise identical, then for each offered rate the backends take turns: a
// generator thread (or --submitters of them) submits requests at Poisson arrival times for
// --duration-ms (open loop: it never waits for answers; a full queue rejects
// and the request is counted as rejected), and a collector thread takes the
// answers in order. Latency is from a request's scheduled arrival to the
// moment the worker finished copying out its rows, so a generator that falls
// behind schedule is charged to latency, not hidden. Achieved throughput is
// answered requests over the time from the start of the arrival window to the
// last answer (at least the window). A run is "saturated" when the server
// rejected requests or answered less than 90% of the rate they were sent at.
//
//   serve [--device auto|cuda|sim] [--model mlp16x512] [--rates 10000,40000,160000,320000]
//         [--max-batches 16,64] [--rows 1 | 1-64] [--duration-ms 750] [--json serve.json]
//         [--submitters 1] [--copy-rows-apart]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <optional>
#include <random>
#include <thread>

#include "benchmarks/backend_latency/backend_comparison.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/latency.h"
#include "benchmarks/common/load_options.h"
#include "benchmarks/common/table.h"
#include "benchmarks/common/thread_cpu.h"
#include "runtime/device_context.h"
#include "serving/bucket_plan.h"
#include "serving/server.h"

namespace grove::benchmarks {
namespace {

using serving::Clock;

constexpr const char* kName = "serve";

const LoadDefaults kLoad{.rates = {10000, 40000, 160000, 320000}, .duration_ms = 750};

std::vector<FlagSpec> flag_table() {
  std::vector<FlagSpec> flags = load_flags(kLoad);
  flags.push_back(
      {"--rows", "N|LO-HI", "rows per request, fixed or uniform in [LO, HI] (default 1)"});
  flags.push_back({"--queue-capacity", "N", "ServerConfig::queue_capacity (default 4096)"});
  flags.push_back({"--submitters", "N",
                   "generator threads sharing the arrivals (default 1; Note [Submitters])"});
  return flags;
}

const std::vector<FlagSpec> kFlags = flag_table();

struct Options : LoadOptions {
  int64_t rows_low = 1, rows_high = 1;
  int64_t queue_capacity = 4096;
  int64_t submitters = 1;
};

// Note [Submitters]
// One generator thread submits at most ~200,000 requests/s on the H100 host
// (session 15: 176,286 and 207,345 sent/s when 320,000 were offered), each
// submit() copying the request's rows into pinned memory and queueing it; a
// server that answers faster than that is then measured at the generator's
// pace (sent/s below offered/s, not saturated). --submitters N shares the
// arrivals among N threads (arrival i goes to thread i mod N, at its scheduled
// time); the collector still takes the answers in arrival order.

struct RunResult {
  int64_t max_batch = 0;
  std::string backend;
  double offered_rate = 0;
  uint64_t sent = 0, rejected = 0, completed = 0, failed = 0;
  double sent_rate = 0, achieved_rate = 0;
  std::optional<LatencySummary> latency;
  uint64_t batches = 0, rows = 0, padded_rows = 0;
  // The batching worker's CPU per answered request, µs (as serve_http's column).
  double worker_cpu_us = 0;
  // Where the worker's time went per batch, µs (ServerStats::worker_launch_ns...).
  double launch_us = 0, wait_us = 0, answer_us = 0;
  double mean_batch_rows() const { return batches ? double(rows) / double(batches) : 0; }
  double fill() const { return rows + padded_rows ? double(rows) / double(rows + padded_rows) : 0; }
  // The server could not keep up: it rejected, or answered clearly less than was sent.
  bool saturated() const { return rejected > 0 || achieved_rate < 0.9 * sent_rate; }
};

// One request slot shared by its generator (writes) and the collector (reads).
struct Slot {
  Clock::time_point scheduled;
  std::future<serving::Response> answer;
  bool accepted = false;
  std::atomic<bool> published{false};  // the generator is done with it
};

std::vector<serving::Request> request_pool(const serving::ModelSignature& signature,
                                           const Options& options, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> rows(options.rows_low, options.rows_high);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<serving::Request> pool(64);
  for (serving::Request& request : pool) {
    int64_t n = rows(rng);
    for (const serving::RowSpec& input : signature.inputs) {
      runtime::Shape shape = input.row_shape;
      shape.insert(shape.begin(), n);
      serving::HostRows host;
      host.shape = shape;
      host.dtype = input.dtype;
      host.bytes.resize(static_cast<size_t>(n) * input.row_bytes);
      if (input.dtype == runtime::DType::kF32) {
        for (size_t at = 0; at + 4 <= host.bytes.size(); at += 4) {
          float value = uniform(rng);
          std::memcpy(host.bytes.data() + at, &value, 4);
        }
      } else {
        // Integer inputs (token ids): small non-negative values, valid indices.
        for (uint8_t& byte : host.bytes) byte = 0;
        size_t element = runtime::dtype_size(input.dtype);
        for (size_t at = 0; at < host.bytes.size(); at += element) host.bytes[at] = rng() % 64;
      }
      request.inputs.push_back(std::move(host));
    }
  }
  return pool;
}

void wait_until(Clock::time_point target) {
  while (true) {
    auto now = Clock::now();
    if (now >= target) return;
    if (target - now > std::chrono::microseconds(200)) {
      std::this_thread::sleep_for(target - now - std::chrono::microseconds(100));
    } else {
      std::this_thread::yield();
    }
  }
}

RunResult run_load(serving::Server& server, const std::vector<serving::Request>& pool, double rate,
                   const Options& options, uint64_t seed) {
  RunResult result;
  result.max_batch = server.config().max_batch;
  result.backend = server.config().backend;
  result.offered_rate = rate;
  // Poisson arrivals: exponential gaps of mean 1 / rate.
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<double> offsets_s;
  for (double t = gap(rng); t < options.duration_ms * 1e-3; t += gap(rng)) offsets_s.push_back(t);
  std::vector<Slot> slots(offsets_s.size());
  serving::ServerStats before = server.stats();
  const ThreadCpu cpu_before = thread_cpu_ns();

  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(2);
  // Note [Submitters]: generator g submits arrivals g, g + n, g + 2n...
  const size_t submitters = static_cast<size_t>(options.submitters);
  std::vector<Clock::time_point> last_sent_by(submitters, start);
  std::vector<std::thread> generators;
  for (size_t g = 0; g < submitters; ++g)
    generators.emplace_back([&, g] {
      for (size_t i = g; i < slots.size(); i += submitters) {
        Slot& slot = slots[i];
        slot.scheduled = start + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(offsets_s[i]));
        wait_until(slot.scheduled);
        try {
          slot.answer = server.submit(pool[i % pool.size()]);
          slot.accepted = true;
        } catch (const serving::QueueFullError&) {
          slot.accepted = false;
        }
        slot.published.store(true, std::memory_order_release);
      }
      last_sent_by[g] = Clock::now();
    });
  std::vector<double> latencies_us;
  latencies_us.reserve(slots.size());
  Clock::time_point last_answer = start;
  for (size_t i = 0; i < slots.size(); ++i) {
    while (!slots[i].published.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    Slot& slot = slots[i];
    if (!slot.accepted) {
      ++result.rejected;
      continue;
    }
    try {
      serving::Response response = slot.answer.get();
      latencies_us.push_back(
          std::chrono::duration<double, std::micro>(response.timing.completed - slot.scheduled)
              .count());
      last_answer = std::max(last_answer, response.timing.completed);
      ++result.completed;
    } catch (const Error&) {
      ++result.failed;
    }
  }
  for (std::thread& generator : generators) generator.join();
  const Clock::time_point last_sent = *std::max_element(last_sent_by.begin(), last_sent_by.end());
  serving::ServerStats after = server.stats();
  result.sent = slots.size();
  // Over the whole arrival window at least: the last arrival of a short run
  // may come well before the window ends.
  const double window_s = options.duration_ms * 1e-3;
  double send_span_s = std::max(window_s, std::chrono::duration<double>(last_sent - start).count());
  double answer_span_s =
      std::max(window_s, std::chrono::duration<double>(last_answer - start).count());
  result.sent_rate = send_span_s > 0 ? double(result.sent) / send_span_s : 0;
  result.achieved_rate = answer_span_s > 0 ? double(result.completed) / answer_span_s : 0;
  if (!latencies_us.empty()) result.latency = summarize(latencies_us);
  result.batches = after.batches - before.batches;
  result.rows = after.rows - before.rows;
  result.padded_rows = after.padded_rows - before.padded_rows;
  if (result.batches > 0) {
    const double per_batch_us = 1e-3 / static_cast<double>(result.batches);
    result.launch_us = double(after.worker_launch_ns - before.worker_launch_ns) * per_batch_us;
    result.wait_us = double(after.worker_wait_ns - before.worker_wait_ns) * per_batch_us;
    result.answer_us = double(after.worker_answer_ns - before.worker_answer_ns) * per_batch_us;
  }
  if (result.completed > 0) {
    result.worker_cpu_us = cpu_ns_between(cpu_before, thread_cpu_ns(), "grove-worker") * 1e-3 /
                           static_cast<double>(result.completed);
  }
  return result;
}

Options parse_options(const FlagValues& flags) {
  Options options;
  static_cast<LoadOptions&>(options) = parse_load(kName, flags, kLoad);
  std::string rows = flags.text("--rows", "1");
  size_t dash = rows.find('-');
  int64_t largest = *std::max_element(options.max_batches.begin(), options.max_batches.end());
  if (dash == std::string::npos) {
    options.rows_low = options.rows_high =
        FlagValues(kName, {{"--rows", rows}}).integer("--rows", 1, 1, largest);
  } else {
    options.rows_low =
        FlagValues(kName, {{"--rows", rows.substr(0, dash)}}).integer("--rows", 1, 1, largest);
    options.rows_high = FlagValues(kName, {{"--rows", rows.substr(dash + 1)}})
                            .integer("--rows", 1, options.rows_low, largest);
  }
  for (int64_t max_batch : options.max_batches) {
    if (options.rows_high > max_batch) {
      throw UsageError(str_cat(kName, ": --rows ", rows, " exceeds --max-batches ", max_batch,
                               "; a request must fit in one batch"));
    }
  }
  options.queue_capacity = flags.integer("--queue-capacity", options.queue_capacity, 1, 1 << 24);
  options.submitters = flags.integer("--submitters", options.submitters, 1, 64);
  return options;
}

std::string rows_label(const Options& options) {
  return options.rows_low == options.rows_high ? std::to_string(options.rows_low)
                                               : str_cat(options.rows_low, "-", options.rows_high);
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

void print_tables(const std::vector<RunResult>& runs, const Options& options) {
  Table table({{"max batch", Align::kRight},
               {"backend"},
               {"offered/s", Align::kRight},
               {"sent/s", Align::kRight},
               {"answered/s", Align::kRight},
               {"rejected", Align::kRight},
               {"p50 us", Align::kRight},
               {"p99 us", Align::kRight},
               {"mean batch", Align::kRight},
               {"fill", Align::kRight},
               {"saturated"},
               {"worker us/req", Align::kRight},
               {"launch/wait/answer us/batch", Align::kRight}});
  for (const RunResult& run : runs) {
    table.add_row({std::to_string(run.max_batch), run.backend, format_fixed(run.offered_rate, 0),
                   format_fixed(run.sent_rate, 0), format_fixed(run.achieved_rate, 0),
                   std::to_string(run.rejected),
                   run.latency ? format_fixed(run.latency->median_us, 0) : "-",
                   run.latency ? format_fixed(run.latency->p99_us, 0) : "-",
                   format_fixed(run.mean_batch_rows(), 1), format_fixed(100 * run.fill(), 0) + "%",
                   run.saturated() ? "yes" : "", format_fixed(run.worker_cpu_us, 1),
                   str_cat(format_fixed(run.launch_us, 1), " / ", format_fixed(run.wait_us, 1),
                           " / ", format_fixed(run.answer_us, 1))});
  }
  std::fputs(table.render().c_str(), stdout);
  if (std::find(options.backends.begin(), options.backends.end(), "eager") ==
          options.backends.end() ||
      std::find(options.backends.begin(), options.backends.end(), "cudagraphs") ==
          options.backends.end()) {
    return;
  }
  std::printf("\ncudagraphs vs eager at the same offered rate:\n");
  Table ratios({{"max batch", Align::kRight},
                {"offered/s", Align::kRight},
                {"throughput", Align::kRight},
                {"p99 eager/cudagraphs", Align::kRight},
                {"eager saturated"}});
  for (int64_t max_batch : options.max_batches) {
    for (double rate : options.rates) {
      const RunResult* eager = find_run(runs, max_batch, "eager", rate);
      const RunResult* graphs = find_run(runs, max_batch, "cudagraphs", rate);
      if (!eager || !graphs || !eager->latency || !graphs->latency) continue;
      ratios.add_row({std::to_string(max_batch), format_fixed(rate, 0),
                      format_ratio(graphs->achieved_rate / eager->achieved_rate),
                      format_ratio(eager->latency->p99_us / graphs->latency->p99_us),
                      eager->saturated() ? "yes" : "no"});
    }
  }
  std::fputs(ratios.render().c_str(), stdout);
}

nlohmann::json report_json(const std::vector<RunResult>& runs, const Options& options,
                           const nlohmann::json& servers) {
  nlohmann::json report = report_header(kName, options.device);
  report["model"] = options.model;
  report["rows_per_request"] = rows_label(options);
  report["duration_ms"] = options.duration_ms;
  report["max_wait_us"] = options.max_wait_us;
  report["gather_inputs"] = options.gather_inputs;
  report["queue_capacity"] = options.queue_capacity;
  report["submitters"] = options.submitters;
  report["arrivals"] = "open loop, Poisson";
  report["latency"] = "scheduled arrival to the worker's copy-out of the request's rows";
  report["achieved"] = "answered requests / max(window, last answer - window start)";
  report["servers"] = servers;
  report["results"] = nlohmann::json::array();
  for (const RunResult& run : runs) {
    nlohmann::json entry{{"max_batch", run.max_batch},
                         {"backend", run.backend},
                         {"offered_per_s", run.offered_rate},
                         {"sent", run.sent},
                         {"sent_per_s", run.sent_rate},
                         {"answered", run.completed},
                         {"answered_per_s", run.achieved_rate},
                         {"rejected", run.rejected},
                         {"failed", run.failed},
                         {"batches", run.batches},
                         {"mean_batch_rows", run.mean_batch_rows()},
                         {"batch_fill", run.fill()},
                         {"padded_rows", run.padded_rows},
                         {"saturated", run.saturated()},
                         {"worker_cpu_us_per_answer", run.worker_cpu_us},
                         {"worker_launch_us_per_batch", run.launch_us},
                         {"worker_wait_us_per_batch", run.wait_us},
                         {"worker_answer_us_per_batch", run.answer_us}};
    if (run.latency) entry["latency"] = latency_json(*run.latency);
    if (run.backend == "cudagraphs") {
      const RunResult* eager = find_run(runs, run.max_batch, "eager", run.offered_rate);
      if (eager && eager->achieved_rate > 0) {
        entry["throughput_vs_eager"] = run.achieved_rate / eager->achieved_rate;
      }
      if (eager && eager->latency && run.latency) {
        entry["p99_eager_over_this"] = eager->latency->p99_us / run.latency->p99_us;
      }
    }
    report["results"].push_back(entry);
  }
  return report;
}

int run(int argc, char** argv) {
  std::optional<FlagValues> parsed =
      parse_flags_or_help(kName,
                          "Open-loop load on the batching server: throughput and p50/p99 "
                          "latency of eager vs cudagraphs.",
                          argc, argv, kFlags);
  if (!parsed) return 0;
  const FlagValues& flags = *parsed;
  Options options = parse_options(flags);
  std::printf(
      "serve on %s (%s): %s, %s rows per request, Poisson arrivals for %lld ms per run, "
      "%lld submitter(s)\n",
      options.device.str().c_str(),
      runtime::device_context(options.device).platform().name().c_str(), options.model.c_str(),
      rows_label(options).c_str(), static_cast<long long>(options.duration_ms),
      static_cast<long long>(options.submitters));
  std::fflush(stdout);
  serving::ProgramFactory model =
      serving::model_file_factory(options.models_dir + "/" + options.model + ".json");
  std::vector<RunResult> runs;
  nlohmann::json servers = nlohmann::json::array();
  bool mismatch = false;
  for (int64_t max_batch : options.max_batches) {
    std::vector<std::unique_ptr<serving::Server>> contenders;
    for (const std::string& backend : options.backends) {
      serving::ServerConfig config;
      config.devices = {options.device};
      config.backend = backend;
      config.buckets = serving::power_of_two_buckets(max_batch);
      config.max_batch = max_batch;
      config.max_wait = std::chrono::microseconds(options.max_wait_us);
      config.gather_inputs = options.gather_inputs;
      config.queue_capacity = static_cast<size_t>(options.queue_capacity);
      Stopwatch watch;
      contenders.push_back(std::make_unique<serving::Server>(model, config));
      std::printf("  max batch %lld, %s: compiled and warmed up %zu buckets in %.0f ms\n",
                  static_cast<long long>(max_batch), backend.c_str(), config.buckets.size(),
                  watch.elapsed_us() / 1000);
      std::fflush(stdout);
    }
    std::mt19937_64 rng(options.seed + static_cast<uint64_t>(max_batch));
    std::vector<serving::Request> pool =
        request_pool(contenders.front()->signature(), options, rng);
    // The same request through every backend: the answers must be the same bits.
    std::vector<serving::HostRows> first_answer;
    for (auto& server : contenders) {
      std::vector<serving::HostRows> answer = server->submit(pool.front()).get().outputs;
      if (first_answer.empty()) {
        first_answer = answer;
      } else {
        for (size_t o = 0; o < answer.size(); ++o) {
          if (answer[o].bytes != first_answer[o].bytes) mismatch = true;
        }
      }
    }
    for (size_t r = 0; r < options.rates.size(); ++r) {
      for (auto& server : contenders) {
        runs.push_back(run_load(*server, pool, options.rates[r], options,
                                options.seed * 7919 + r * 31 + static_cast<uint64_t>(max_batch)));
      }
    }
    for (auto& server : contenders) {
      server->shutdown();
      servers.push_back({{"max_batch", max_batch},
                         {"backend", server->config().backend},
                         {"stats", server->stats().to_json()},
                         {"workers", serving::reports_json(server->worker_reports())}});
    }
  }
  print_tables(runs, options);
  std::printf("\nanswers identical across backends: %s\n", mismatch ? "NO" : "yes");
  if (!options.json_path.empty()) {
    nlohmann::json report = report_json(runs, options, servers);
    report["answers_identical_across_backends"] = !mismatch;
    write_json_file(options.json_path, report);
  }
  return mismatch ? 1 : 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  return grove::benchmarks::benchmark_main("serve", grove::benchmarks::run, argc, argv);
}
