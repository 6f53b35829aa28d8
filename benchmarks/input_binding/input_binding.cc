// input_binding: what it costs a replay to bind a copied input whose address
// changes every call, copied into its placeholder (by a device copy before
// the launch, or by a copy kernel at the head of the graph, Note [Input copies
// inside the graph]) versus zero-copy (the graph's kernel nodes patched to
// read the caller's memory, Note [Zero-copy inputs]). Issue 7's goal: for a
// 64 MiB input, zero-copy binding at least 10x cheaper than the copy.
//
// The function reads its input with one grove kernel (y = 2x, so the graph's
// own work is one pass over the input). Two input tensors of the same size
// alternate call by call, so every replay must bind a new address. Per call
// (host time from the call until the stream is synchronized):
//   copy           TreeManager::run, zero_copy_inputs and graph_input_copies off,
//   in-graph copy  TreeManager::run, zero_copy_inputs off, graph_input_copies on,
//   zero-copy      TreeManager::run with zero_copy_inputs on,
//   bare           the copy mode's graph launched directly (no binding: it has
//                  no head copy and reads its placeholder).
// The binding cost of a mode is its median minus the bare median. The four
// are interleaved call by call so that drift hits them alike.
//
//   input_binding [--device auto|cuda|sim] [--mib 1,64] [--iters 200] [--json FILE]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/common/flags.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/latency.h"
#include "benchmarks/common/table.h"
#include "cudagraph_trees/tree_introspection.h"
#include "runtime/device_context.h"
#include "runtime/testing/test_kernels.h"

namespace grove::benchmarks {
namespace {

using cudagraph_trees::FunctionId;
using cudagraph_trees::FunctionSpec;
using cudagraph_trees::TreeConfig;
using cudagraph_trees::TreeManager;
using runtime::Tensor;

constexpr const char* kName = "input_binding";

const std::vector<FlagSpec> kFlags = {
    kDeviceFlag,
    {"--mib", "LIST", "input sizes in MiB (default 1,64)"},
    {"--iters", "N", "timed calls per mode and size (default 200)"},
    {"--warmup", "N", "untimed calls per mode before timing (default 10)"},
    kJsonFlag,
};

Tensor random_tensor(std::mt19937& rng, int64_t elements, runtime::Device device) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(elements));
  for (float& value : values) value = uniform(rng);
  return Tensor::from_vector(values, {elements}, device);
}

// One manager with one recorded function, in one binding mode.
struct Mode {
  std::string name;
  std::unique_ptr<TreeManager> trees;
  FunctionId function;
  std::vector<double> samples_us;
};

Mode make_mode(const std::string& name, bool zero_copy, bool graph_copies, runtime::Device device) {
  TreeConfig config;
  config.zero_copy_inputs = zero_copy;
  config.graph_input_copies = graph_copies;
  Mode mode{name, std::make_unique<TreeManager>(device, config), {}, {}};
  FunctionSpec spec;
  spec.name = "scale";
  spec.body = [](const compiler::TensorList& in) {
    return compiler::TensorList{testing::scale(in[0], 2.0f)};
  };
  mode.function = mode.trees->register_function(std::move(spec));
  return mode;
}

double timed_us(runtime::Platform& platform, runtime::StreamHandle stream,
                const std::function<void()>& call) {
  Stopwatch watch;
  call();
  platform.synchronize_stream(stream);
  return watch.elapsed_us();
}

nlohmann::json measure(int64_t mib, int64_t iters, int64_t warmup, runtime::Device device,
                       Table& table) {
  std::mt19937 rng(static_cast<uint32_t>(mib));
  const int64_t elements = mib * (1 << 20) / 4;
  std::vector<Tensor> inputs = {random_tensor(rng, elements, device),
                                random_tensor(rng, elements, device)};
  runtime::DeviceContext& context = runtime::device_context(device);
  runtime::Platform& platform = context.platform();
  runtime::StreamHandle stream = context.current_stream();

  std::vector<Mode> modes;
  modes.push_back(make_mode("copy", false, false, device));
  modes.push_back(make_mode("in-graph copy", false, true, device));
  modes.push_back(make_mode("zero-copy", true, false, device));
  for (Mode& mode : modes) {
    for (int64_t i = 0; i < warmup + 3; ++i) mode.trees->run(mode.function, {inputs[i % 2]});
  }
  // Every result must equal 2x of the last input: the modes compute the same.
  for (Mode& mode : modes) {
    compiler::TensorList out = mode.trees->run(mode.function, {inputs[1]});
    std::vector<float> got = out[0].to_vector<float>();
    std::vector<float> x = inputs[1].to_vector<float>();
    for (size_t i = 0; i < x.size(); i += 4099) {
      GROVE_CHECK(got[i] == 2.0f * x[i], kName, ": ", mode.name, " binding gave a wrong result");
    }
  }
  runtime::GraphRecording* bare_graph = modes[0].trees->current_path_graphs().at(0);
  std::vector<double> bare_us;
  const uint64_t copies_before = modes[0].trees->counters().input_copies;
  const uint64_t graph_copies_before = modes[1].trees->counters().input_copies_in_graph;
  const uint64_t patches_before = modes[2].trees->counters().input_patches;
  for (int64_t i = 0; i < iters; ++i) {
    const Tensor& x = inputs[i % 2];
    for (Mode& mode : modes) {
      mode.samples_us.push_back(
          timed_us(platform, stream, [&] { mode.trees->run(mode.function, {x}); }));
    }
    bare_us.push_back(timed_us(platform, stream, [&] { bare_graph->replay(stream); }));
  }
  const uint64_t copies = modes[0].trees->counters().input_copies - copies_before;
  const uint64_t graph_copies =
      modes[1].trees->counters().input_copies_in_graph - graph_copies_before;
  const uint64_t patches = modes[2].trees->counters().input_patches - patches_before;
  GROVE_CHECK(copies == static_cast<uint64_t>(iters), kName, ": the copy mode copied ", copies,
              " times in ", iters, " calls");
  GROVE_CHECK(graph_copies == static_cast<uint64_t>(iters), kName,
              ": the in-graph copy mode copied in its graph ", graph_copies, " times in ", iters,
              " calls");
  GROVE_CHECK(patches == static_cast<uint64_t>(iters), kName, ": the zero-copy mode patched ",
              patches, " times in ", iters, " calls (it fell back to copying)");

  LatencySummary bare = summarize(bare_us);
  LatencySummary copy = summarize(modes[0].samples_us);
  LatencySummary graph_copy = summarize(modes[1].samples_us);
  LatencySummary zero = summarize(modes[2].samples_us);
  const double copy_cost = copy.median_us - bare.median_us;
  const double graph_copy_cost = graph_copy.median_us - bare.median_us;
  const double zero_cost = zero.median_us - bare.median_us;
  const std::string label = std::to_string(mib) + " MiB";
  auto cell = [](const LatencySummary& s) {
    return format_fixed(s.median_us, 2) + " (" + format_fixed(s.p90_us, 2) + ")";
  };
  // The ratio (against the cheaper copy) is only meaningful when zero-copy
  // costs measurably more than the bare replay.
  const double cheaper_copy = std::min(copy_cost, graph_copy_cost);
  const double ratio = zero_cost > 0.05 ? cheaper_copy / zero_cost : 0;
  table.add_row({label, cell(bare), cell(copy), cell(graph_copy), cell(zero),
                 format_fixed(copy_cost, 2), format_fixed(graph_copy_cost, 2),
                 format_fixed(zero_cost, 2), ratio > 0 ? format_ratio(ratio) : "zero-copy = bare"});
  for (Mode& mode : modes) mode.trees->shutdown();
  return {{"input_mib", mib},
          {"bare_replay", latency_json(bare)},
          {"copy", latency_json(copy)},
          {"graph_copy", latency_json(graph_copy)},
          {"zero_copy", latency_json(zero)},
          {"copy_binding_us", copy_cost},
          {"graph_copy_binding_us", graph_copy_cost},
          {"zero_copy_binding_us", zero_cost},
          {"copies", copies},
          {"graph_copies", graph_copies},
          {"patches", patches}};
}

int run(int argc, char** argv) {
  std::optional<FlagValues> parsed = parse_flags_or_help(
      kName, "Binding a moving input: copy, in-graph copy or zero-copy.", argc, argv, kFlags);
  if (!parsed) return 0;
  const FlagValues& flags = *parsed;
  runtime::Device device = resolve_device(flags.text("--device", "auto"));
  const int64_t iters = flags.integer("--iters", 200, 1);
  const int64_t warmup = flags.integer("--warmup", 10, 0);
  std::vector<int64_t> sizes;
  for (const std::string& item : flags.list("--mib", {"1", "64"})) {
    sizes.push_back(FlagValues(kName, {{"--mib", item}}).integer("--mib", 1, 1, 4096));
  }
  nlohmann::json report = report_header(kName, device);
  std::printf(
      "%s on %s (%s): y = 2x over the input, two inputs alternating; %lld calls per mode; "
      "us per call until synchronized, median (p90)\n",
      kName, device.str().c_str(), report["device_name"].get<std::string>().c_str(),
      static_cast<long long>(iters));
  Table table({{"input"},
               {"bare replay", Align::kRight},
               {"copy", Align::kRight},
               {"in-graph copy", Align::kRight},
               {"zero-copy", Align::kRight},
               {"copy cost", Align::kRight},
               {"in-graph copy cost", Align::kRight},
               {"zero-copy cost", Align::kRight},
               {"cheaper copy / zero-copy", Align::kRight}});
  report["iters"] = iters;
  report["results"] = nlohmann::json::array();
  for (int64_t mib : sizes) report["results"].push_back(measure(mib, iters, warmup, device, table));
  std::fputs(table.render().c_str(), stdout);
  const std::string json_path = flags.text("--json", "");
  if (!json_path.empty()) write_json_file(json_path, report);
  return 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  return grove::benchmarks::benchmark_main(grove::benchmarks::kName, grove::benchmarks::run, argc,
                                           argv);
}
