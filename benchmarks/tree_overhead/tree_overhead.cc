// tree_overhead: what the tree manager adds to a replay. A function of 16
// chained small kernels with 1, 33 and 257 inputs (one copied, the rest
// static) is replayed through TreeManager::run and, in the same run, as the
// bare replay of the very graph the manager recorded. The difference is the
// manager's cost (input checks, the one input copy, output re-emission).
//
//   tree_overhead [--device sim|cuda] [--iterations N] [--repeats R] [--json PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "tests/runtime/test_kernels.h"

namespace {

using grove::compiler::TensorList;
using grove::cudagraph_trees::FunctionId;
using grove::cudagraph_trees::FunctionSpec;
using grove::cudagraph_trees::TreeConfig;
using grove::cudagraph_trees::TreeManager;
using grove::runtime::Device;
using grove::runtime::Tensor;
using Clock = std::chrono::steady_clock;

constexpr int kKernels = 16;
constexpr int64_t kElements = 256;

struct Options {
  Device device = grove::runtime::default_device();
  int iterations = 2000;
  int repeats = 7;
  std::string json_path;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      GROVE_CHECK(i + 1 < argc, "flag ", flag, " needs a value");
      return argv[++i];
    };
    if (flag == "--device") {
      options.device = Device::parse(value());
    } else if (flag == "--iterations") {
      options.iterations = std::stoi(value());
    } else if (flag == "--repeats") {
      options.repeats = std::stoi(value());
    } else if (flag == "--json") {
      options.json_path = value();
    } else {
      throw grove::Error("unknown flag " + flag +
                         "; usage: tree_overhead [--device D] [--iterations N] [--repeats R] "
                         "[--json PATH]");
    }
  }
  GROVE_CHECK(options.iterations > 0 && options.repeats > 0,
              "--iterations and --repeats must be positive");
  return options;
}

struct Spread {
  double median = 0, min = 0, max = 0;
};

Spread spread(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples.front(), samples.back()};
}

Tensor random_tensor(std::mt19937& rng, Device device) {
  std::uniform_real_distribution<float> uniform(0.5f, 1.5f);
  std::vector<float> values(kElements);
  for (float& value : values) value = uniform(rng);
  return Tensor::from_vector(values, {kElements}, device);
}

nlohmann::json measure(const Options& options, int input_count, std::mt19937& rng) {
  TreeManager trees(options.device, TreeConfig{});
  FunctionSpec spec;
  spec.name = "chain16";
  for (int i = 1; i < input_count; ++i) spec.static_input_indices.push_back(i);
  spec.body = [input_count](const TensorList& in) {
    Tensor t = in[0];
    for (int k = 0; k < kKernels; ++k) {
      t = input_count > 1 ? grove::testing::add(t, in[1 + k % (input_count - 1)])
                          : grove::testing::scale(t, 1.0f);
    }
    return TensorList{t};
  };
  FunctionId f = trees.register_function(std::move(spec));
  TensorList inputs;
  for (int i = 0; i < input_count; ++i) inputs.push_back(random_tensor(rng, options.device));
  for (int i = 0; i < 3; ++i) trees.run(f, inputs);  // warm-up, recording, first replay
  GROVE_CHECK(trees.counters().replays == 1, "the benchmark function did not reach replay");
  grove::runtime::GraphRecording* graph = trees.all_roots()[0]->mutable_graph();
  grove::runtime::DeviceContext& context = grove::runtime::device_context(options.device);
  grove::runtime::StreamHandle stream = context.current_stream();

  std::vector<double> manager_us, bare_us;
  for (int r = 0; r < options.repeats; ++r) {
    auto start = Clock::now();
    for (int i = 0; i < options.iterations; ++i) trees.run(f, inputs);
    context.backend().synchronize_stream(stream);
    auto middle = Clock::now();
    for (int i = 0; i < options.iterations; ++i) graph->replay(stream);
    context.backend().synchronize_stream(stream);
    auto end = Clock::now();
    manager_us.push_back(std::chrono::duration<double, std::micro>(middle - start).count() /
                         options.iterations);
    bare_us.push_back(std::chrono::duration<double, std::micro>(end - middle).count() /
                      options.iterations);
  }
  GROVE_CHECK(trees.counters().recordings == 1 && trees.counters().eager_calls == 0,
              "the benchmark re-recorded or fell back; the numbers would be meaningless");
  Spread manager = spread(manager_us);
  Spread bare = spread(bare_us);
  std::vector<double> overhead(manager_us.size());
  for (size_t i = 0; i < overhead.size(); ++i) overhead[i] = manager_us[i] - bare_us[i];
  Spread cost = spread(overhead);
  return {{"inputs", input_count},
          {"manager_us_median", manager.median},
          {"manager_us_min", manager.min},
          {"manager_us_max", manager.max},
          {"bare_replay_us_median", bare.median},
          {"bare_replay_us_min", bare.min},
          {"bare_replay_us_max", bare.max},
          {"overhead_us_median", cost.median},
          {"overhead_us_min", cost.min},
          {"overhead_us_max", cost.max}};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options options = parse(argc, argv);
    std::mt19937 rng(1234);
    std::string device_name = grove::runtime::device_context(options.device).backend().name();
    std::printf("tree_overhead on %s (%s): %d kernels, %d iterations x %d repeats\n",
                options.device.str().c_str(), device_name.c_str(), kKernels, options.iterations,
                options.repeats);
    std::printf("%8s %16s %16s %18s\n", "inputs", "manager us/call", "bare replay us",
                "overhead us [min,max]");
    nlohmann::json rows = nlohmann::json::array();
    for (int input_count : {1, 33, 257}) {
      nlohmann::json row = measure(options, input_count, rng);
      std::printf("%8d %16.3f %16.3f %8.3f [%.3f, %.3f]\n", input_count,
                  row["manager_us_median"].get<double>(), row["bare_replay_us_median"].get<double>(),
                  row["overhead_us_median"].get<double>(), row["overhead_us_min"].get<double>(),
                  row["overhead_us_max"].get<double>());
      rows.push_back(std::move(row));
    }
    double overhead_33 = rows[1]["overhead_us_median"].get<double>();
    double per_input_ns =
        (rows[2]["overhead_us_median"].get<double>() - overhead_33) * 1000.0 / (257 - 33);
    std::printf("manager cost at 33 inputs: %.3f us (target < 1.5 us); per extra input: %.2f ns "
                "(target < 10 ns)\n",
                overhead_33, per_input_ns);
    if (!options.json_path.empty()) {
      nlohmann::json json{{"benchmark", "tree_overhead"},
                          {"device", options.device.str()},
                          {"backend", device_name},
                          {"kernels", kKernels},
                          {"elements", kElements},
                          {"iterations", options.iterations},
                          {"repeats", options.repeats},
                          {"rows", rows},
                          {"overhead_33_inputs_us", overhead_33},
                          {"per_extra_input_ns", per_input_ns},
                          {"meets_33_input_target", overhead_33 < 1.5},
                          {"meets_per_input_target", per_input_ns < 10.0}};
      std::ofstream file(options.json_path);
      GROVE_CHECK(file.good(), "cannot write ", options.json_path);
      file << json.dump(2) << "\n";
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "tree_overhead: %s\n", error.what());
    return 1;
  }
}
