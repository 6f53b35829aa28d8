// bucket_plan: planned batch buckets (serving/bucket_plan.h, grove serve
// --buckets auto:FILE) against the fixed powers of two on a skewed trace of
// batch sizes: padded rows, the graph pool the server holds, and time per
// batch, each set served by a real Server ("cudagraphs") on the same trace.
//
// The plan is made from one seeded trace (what an earlier run saw) and both
// sets are measured on another drawn from the same mix, so the plan is not
// judged on the data it was fitted to. Each batch of the trace is one request
// of that many rows, submitted after the previous answer, so every batch has
// exactly the trace's size.
//
//   bucket_plan [--device auto|cuda|sim] [--model mlp16x512] [--max-batch 16]
//               [--mix 3:50,12:40,1:7,16:3] [--batches 200] [--json FILE]
#include "serving/bucket_plan.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "benchmarks/common/flags.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/latency.h"
#include "benchmarks/common/table.h"
#include "runtime/device_context.h"
#include "serving/server.h"

namespace grove::benchmarks {
namespace {

constexpr const char* kName = "bucket_plan";

const std::vector<FlagSpec> kFlags = {
    kDeviceFlag,
    {"--models", "DIR", "directory of the model JSON files (default benchmarks/models)"},
    {"--model", "NAME", "model served, batched along its 'batch' dim (default mlp16x512)"},
    {"--max-batch", "N", "largest batch and bucket (default 16)"},
    {"--mix", "ROWS:WEIGHT,...",
     "batch sizes of the trace and their weights "
     "(default 3:50,12:40,1:7,16:3)"},
    {"--batches", "N", "batches in each trace (default 200)"},
    {"--seed", "N", "seed of the traces (default 2026)"},
    kJsonFlag,
};

struct SetResult {
  std::string name;
  std::vector<int64_t> buckets;
  uint64_t padded_rows = 0, rows = 0, batches = 0;
  int64_t pool_reserved_bytes = 0;
  LatencySummary batch_us;
};

std::vector<int64_t> draw_trace(const std::vector<std::pair<int64_t, double>>& mix, size_t count,
                                uint64_t seed) {
  std::vector<double> weights;
  for (const auto& [rows, weight] : mix) weights.push_back(weight);
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
  std::mt19937_64 rng(seed);
  std::vector<int64_t> trace;
  for (size_t i = 0; i < count; ++i) trace.push_back(mix[pick(rng)].first);
  return trace;
}

std::string list_text(const std::vector<int64_t>& sizes) {
  std::string text;
  for (int64_t size : sizes) text += (text.empty() ? "" : ",") + std::to_string(size);
  return text;
}

SetResult measure(const std::string& name, const std::vector<int64_t>& buckets,
                  const std::vector<int64_t>& trace, const serving::ProgramFactory& model,
                  runtime::Device device, int64_t max_batch) {
  serving::ServerConfig config;
  config.devices = {device};
  config.backend = "cudagraphs";
  config.buckets = buckets;
  config.max_batch = max_batch;
  config.max_wait = std::chrono::microseconds(0);
  serving::Server server(model, config);
  const serving::ModelSignature& signature = server.signature();
  std::vector<double> batch_us;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (int64_t rows : trace) {
    serving::Request request;
    for (const serving::RowSpec& input : signature.inputs) {
      serving::HostRows host;
      host.shape = input.row_shape;
      host.shape.insert(host.shape.begin(), rows);
      host.dtype = input.dtype;
      host.bytes.assign(static_cast<size_t>(rows) * input.row_bytes, 0);
      if (input.dtype == runtime::DType::kF32) {
        for (size_t at = 0; at + 4 <= host.bytes.size(); at += 4) {
          float value = uniform(rng);
          std::memcpy(host.bytes.data() + at, &value, 4);
        }
      }
      request.inputs.push_back(std::move(host));
    }
    Stopwatch watch;
    server.submit(std::move(request)).get();
    batch_us.push_back(watch.elapsed_us());
  }
  SetResult result;
  result.name = name;
  result.buckets = buckets;
  for (const serving::WorkerSnapshot& snapshot : server.backend_snapshots()) {
    result.pool_reserved_bytes += static_cast<int64_t>(snapshot.memory.pool.reserved_bytes);
  }
  server.shutdown();
  serving::ServerStats stats = server.stats();
  result.padded_rows = stats.padded_rows;
  result.rows = stats.rows;
  result.batches = stats.batches;
  result.batch_us = summarize(batch_us);
  return result;
}

int run(int argc, char** argv) {
  std::optional<FlagValues> parsed =
      parse_flags_or_help(kName,
                          "Planned batch buckets against powers of two on a skewed trace: "
                          "padding, pool memory, time per batch.",
                          argc, argv, kFlags);
  if (!parsed) return 0;
  const FlagValues& flags = *parsed;
  const runtime::Device device = resolve_device(flags.text("--device", "auto"));
  const std::string models_dir = flags.text("--models", "benchmarks/models");
  const std::string model_name = flags.text("--model", "mlp16x512");
  const int64_t max_batch = flags.integer("--max-batch", 16, 1, 4096);
  const size_t batches = static_cast<size_t>(flags.integer("--batches", 200, 1, 1000000));
  const uint64_t seed = static_cast<uint64_t>(flags.integer("--seed", 2026, 0));
  std::vector<std::pair<int64_t, double>> mix;
  for (const std::string& item : flags.list("--mix", {"3:50", "12:40", "1:7", "16:3"})) {
    size_t colon = item.find(':');
    if (colon == std::string::npos) {
      throw UsageError(str_cat(kName, ": --mix item '", item, "' is not ROWS:WEIGHT"));
    }
    int64_t rows =
        FlagValues(kName, {{"--mix", item.substr(0, colon)}}).integer("--mix", 1, 1, max_batch);
    double weight =
        FlagValues(kName, {{"--mix", item.substr(colon + 1)}}).positive_number("--mix", 1);
    mix.emplace_back(rows, weight);
  }
  const std::vector<int64_t> observed = draw_trace(mix, batches, seed);
  const std::vector<int64_t> trace = draw_trace(mix, batches, seed + 1);
  std::map<int64_t, uint64_t> seen;
  for (int64_t rows : observed) ++seen[rows];
  const std::vector<int64_t> pow2 = serving::power_of_two_buckets(max_batch);
  const std::vector<int64_t> planned = serving::plan_buckets(seen, max_batch, pow2.size());
  std::printf("bucket_plan on %s (%s): %s, max batch %lld, %zu batches per trace\n",
              device.str().c_str(), runtime::device_context(device).platform().name().c_str(),
              model_name.c_str(), static_cast<long long>(max_batch), batches);
  std::fflush(stdout);
  serving::ProgramFactory model =
      serving::model_file_factory(models_dir + "/" + model_name + ".json");
  std::vector<SetResult> results = {measure("powers of two", pow2, trace, model, device, max_batch),
                                    measure("planned", planned, trace, model, device, max_batch)};
  Table table({{"buckets"},
               {"sizes"},
               {"padded rows", Align::kRight},
               {"padding", Align::kRight},
               {"pool reserved", Align::kRight},
               {"batch p50 us", Align::kRight},
               {"batch p99 us", Align::kRight}});
  for (const SetResult& result : results) {
    const double padding =
        result.rows + result.padded_rows
            ? 100.0 * double(result.padded_rows) / double(result.rows + result.padded_rows)
            : 0;
    table.add_row({result.name, list_text(result.buckets), std::to_string(result.padded_rows),
                   format_fixed(padding, 1) + "%",
                   format_fixed(double(result.pool_reserved_bytes) / double(1 << 20), 1) + " MiB",
                   format_fixed(result.batch_us.median_us, 0),
                   format_fixed(result.batch_us.p99_us, 0)});
  }
  std::fputs(table.render().c_str(), stdout);
  const std::string json_path = flags.text("--json", "");
  if (!json_path.empty()) {
    nlohmann::json report = report_header(kName, device);
    report["model"] = model_name;
    report["max_batch"] = max_batch;
    report["batches"] = batches;
    report["planned_from"] = "a trace drawn with seed --seed; measured on one drawn with seed + 1";
    report["results"] = nlohmann::json::array();
    for (const SetResult& result : results) {
      report["results"].push_back({{"set", result.name},
                                   {"buckets", result.buckets},
                                   {"padded_rows", result.padded_rows},
                                   {"rows", result.rows},
                                   {"batches", result.batches},
                                   {"pool_reserved_bytes", result.pool_reserved_bytes},
                                   {"batch_latency", latency_json(result.batch_us)}});
    }
    write_json_file(json_path, report);
  }
  return 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  return grove::benchmarks::benchmark_main("bucket_plan", grove::benchmarks::run, argc, argv);
}
