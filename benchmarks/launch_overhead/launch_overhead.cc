// launch_overhead: the physical floor of grove's replay path. For N = 1, 10,
// 100, 1000 it measures, in one process on one stream:
//   - the CPU cost of N separate kernel launches (host time to enqueue them),
//   - the CPU cost of one launch of a graph holding the same N kernel nodes,
//   - the GPU time per kernel / per node of both (timing events around them).
// Each figure is the median over --repeats runs after --warmup runs, with the
// 10th and 90th percentiles as its spread. Prints a table and writes JSON.
// Runs on cuda when a device is present, else on sim (a smoke test for CI).
//
//   launch_overhead [--device cuda|sim] [--repeats 200] [--warmup 20]
//                   [--sizes 1,10,100,1000] [--json launch_overhead.json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/common/flags.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/platform.h"

namespace grove::benchmarks {
namespace {

using runtime::Device;
using runtime::KernelArgs;
using runtime::LaunchDims;
using runtime::Platform;
using runtime::StreamHandle;

// counter[i] += 1 for i < n: the smallest kernel that still does visible work,
// so the benchmark can check that every launch ran.
constexpr const char* kIncrementPtx = R"PTX(
.version 7.5
.target sm_80
.address_size 64

.visible .entry grove_bench_increment(
	.param .u64 grove_bench_increment_param_0,
	.param .u64 grove_bench_increment_param_1
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<3>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<9>;

	ld.param.u64 	%rd2, [grove_bench_increment_param_0];
	ld.param.u64 	%rd3, [grove_bench_increment_param_1];
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mul.wide.u32 	%rd4, %r1, %r2;
	mov.u32 	%r3, %tid.x;
	cvt.u64.u32 	%rd5, %r3;
	add.s64 	%rd1, %rd4, %rd5;
	setp.ge.s64 	%p1, %rd1, %rd3;
	@%p1 bra 	$L__BB0_2;

	cvta.to.global.u64 	%rd6, %rd2;
	shl.b64 	%rd7, %rd1, 2;
	add.s64 	%rd8, %rd6, %rd7;
	ld.global.f32 	%f1, [%rd8];
	add.f32 	%f2, %f1, 0f3F800000;
	st.global.f32 	[%rd8], %f2;

$L__BB0_2:
	ret;
}
)PTX";

void host_increment(const LaunchDims*, const uint64_t* args) {
  auto* counter = reinterpret_cast<float*>(args[0]);
  auto n = static_cast<int64_t>(args[1]);
  for (int64_t i = 0; i < n; ++i) counter[i] += 1.0f;
}

constexpr int64_t kCounterElements = 32;  // one warp

struct Options {
  std::string device;
  int repeats = 200;
  int warmup = 20;
  std::vector<int> sizes = {1, 10, 100, 1000};
  std::string json_path = "launch_overhead.json";
};

const std::vector<FlagSpec> kFlags = {
    {"--device", "DEVICE", "cuda or sim (default: cuda when present, else sim)"},
    {"--repeats", "N", "timed runs per size (default 200)"},
    {"--warmup", "N", "untimed runs first (default 20)"},
    {"--sizes", "LIST", "kernel counts N (default 1,10,100,1000)"},
    {"--json", "PATH", "where to write the JSON (default launch_overhead.json)"},
};

Options parse_options(const FlagValues& flags) {
  Options options;
  options.device = flags.text("--device", options.device);
  options.repeats = static_cast<int>(flags.integer("--repeats", options.repeats, 1, 1 << 30));
  options.warmup = static_cast<int>(flags.integer("--warmup", options.warmup, 1, 1 << 30));
  options.json_path = flags.text("--json", options.json_path);
  if (flags.has("--sizes")) {
    options.sizes.clear();
    for (const std::string& item : flags.list("--sizes", {})) {
      options.sizes.push_back(static_cast<int>(cli::parse_integer("--sizes", item, 1, 1 << 30)));
    }
  }
  return options;
}

struct Spread {
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0;
};

Spread summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  auto at = [&](double q) {
    double position = q * static_cast<double>(samples.size() - 1);
    size_t low = static_cast<size_t>(position);
    size_t high = std::min(low + 1, samples.size() - 1);
    double fraction = position - static_cast<double>(low);
    return samples[low] * (1 - fraction) + samples[high] * fraction;
  };
  return Spread{at(0.5), at(0.1), at(0.9), samples.front(), samples.back()};
}

// JSON is written by hand: the figures are a fixed, flat set of numbers.
std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) quoted += c;
  }
  return quoted + "\"";
}

std::string json_number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4f", value);
  return text;
}

std::string to_json(const Spread& s) {
  return str_cat("{\"median\": ", json_number(s.median), ", \"p10\": ", json_number(s.p10),
                 ", \"p90\": ", json_number(s.p90), ", \"min\": ", json_number(s.min),
                 ", \"max\": ", json_number(s.max), "}");
}

struct SizeResult {
  int n = 0;
  Spread eager_cpu_us, graph_cpu_us, eager_gpu_us_per_kernel, graph_gpu_us_per_node;
  double instantiate_ms = 0;
  double capture_ms = 0;
};

double micros_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

class Bench {
 public:
  Bench(Device device, const Options& options)
      : device_(device),
        options_(options),
        platform_(runtime::device_context(device).platform()),
        stream_(runtime::device_context(device).create_stream()) {
    runtime::KernelSource source;
    source.name = "grove_bench_increment";
    if (device.is_cuda()) {
      source.ptx = kIncrementPtx;
    } else {
      source.host_function = host_increment;
    }
    kernel_ = platform_.load_kernel(source);
    counter_ = platform_.allocate_raw(kCounterElements * sizeof(float));
    args_.add_pointer(counter_).add_i64(kCounterElements);
    dims_.block.x = kCounterElements;
    start_ = platform_.create_event(true);
    end_ = platform_.create_event(true);
  }

  ~Bench() {
    platform_.destroy_event(start_);
    platform_.destroy_event(end_);
    platform_.free_raw(counter_);
  }

  SizeResult run(int n) {
    SizeResult result;
    result.n = n;
    platform_.memset_async(counter_, 0, kCounterElements * sizeof(float), stream_);
    launches_ = 0;
    int total = options_.warmup + options_.repeats;

    std::vector<double> eager_cpu, eager_gpu;
    for (int r = 0; r < total; ++r) {
      platform_.synchronize_stream(stream_);
      auto start = std::chrono::steady_clock::now();
      launch_n(n);
      double cpu = micros_since(start);
      platform_.synchronize_stream(stream_);
      if (r >= options_.warmup) eager_cpu.push_back(cpu);
    }
    for (int r = 0; r < total; ++r) {
      platform_.record_event(start_, stream_);
      launch_n(n);
      platform_.record_event(end_, stream_);
      platform_.synchronize_event(end_);
      if (r >= options_.warmup) {
        eager_gpu.push_back(1000.0 * platform_.elapsed_ms(start_, end_) / n);
      }
    }

    auto capture_start = std::chrono::steady_clock::now();
    platform_.begin_capture(stream_, runtime::CaptureMode::kThreadLocal);
    for (int i = 0; i < n; ++i) platform_.launch_kernel(kernel_, dims_, args_, stream_);
    runtime::GraphHandle graph = platform_.end_capture(stream_);
    result.capture_ms = micros_since(capture_start) / 1000.0;
    auto instantiate_start = std::chrono::steady_clock::now();
    runtime::InstantiateOptions instantiate_options;
    instantiate_options.upload_stream = stream_;
    runtime::GraphExecHandle exec = platform_.instantiate(graph, instantiate_options);
    platform_.synchronize_stream(stream_);
    result.instantiate_ms = micros_since(instantiate_start) / 1000.0;

    std::vector<double> graph_cpu, graph_gpu;
    for (int r = 0; r < total; ++r) {
      platform_.synchronize_stream(stream_);
      auto start = std::chrono::steady_clock::now();
      platform_.launch_graph(exec, stream_);
      double cpu = micros_since(start);
      launches_ += n;
      platform_.synchronize_stream(stream_);
      if (r >= options_.warmup) graph_cpu.push_back(cpu);
    }
    for (int r = 0; r < total; ++r) {
      platform_.record_event(start_, stream_);
      platform_.launch_graph(exec, stream_);
      launches_ += n;
      platform_.record_event(end_, stream_);
      platform_.synchronize_event(end_);
      if (r >= options_.warmup) {
        graph_gpu.push_back(1000.0 * platform_.elapsed_ms(start_, end_) / n);
      }
    }
    platform_.destroy_graph_exec(exec);
    platform_.destroy_graph(graph);
    check_counter();

    result.eager_cpu_us = summarize(eager_cpu);
    result.graph_cpu_us = summarize(graph_cpu);
    result.eager_gpu_us_per_kernel = summarize(eager_gpu);
    result.graph_gpu_us_per_node = summarize(graph_gpu);
    return result;
  }

 private:
  void launch_n(int n) {
    for (int i = 0; i < n; ++i) platform_.launch_kernel(kernel_, dims_, args_, stream_);
    launches_ += n;
  }

  // Every eager launch and every graph node incremented each counter element once.
  void check_counter() {
    std::vector<float> values(kCounterElements);
    platform_.copy_async(values.data(), counter_, values.size() * sizeof(float),
                         runtime::CopyKind::kDeviceToHost, stream_);
    platform_.synchronize_stream(stream_);
    for (float value : values) {
      GROVE_CHECK(static_cast<int64_t>(value) == launches_, "launch_overhead: a counter holds ",
                  value, " after ", launches_, " launches; some kernel launches did not run");
    }
  }

  Device device_;
  const Options& options_;
  Platform& platform_;
  StreamHandle stream_;
  runtime::KernelHandle kernel_;
  void* counter_ = nullptr;
  KernelArgs args_;
  LaunchDims dims_;
  runtime::EventHandle start_, end_;
  int64_t launches_ = 0;
};

std::string utc_date() {
  std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return text;
}

std::string cell(const Spread& s) {
  char text[64];
  std::snprintf(text, sizeof(text), "%9.2f [%.2f, %.2f]", s.median, s.p10, s.p90);
  return text;
}

int run_main(int argc, char** argv) {
  std::optional<FlagValues> parsed = parse_flags_or_help(
      "launch_overhead", "The floor of launch costs: N kernel launches vs one N-node graph.", argc,
      argv, kFlags);
  if (!parsed) return 0;
  const FlagValues& flags = *parsed;
  Options options = parse_options(flags);
  Device device;
  if (options.device.empty()) {
    device = runtime::default_device();
    if (device.is_sim()) std::cout << "no CUDA device; measuring the sim platform\n";
  } else {
    device = Device::parse(options.device);
  }
  GROVE_CHECK_AS(DeviceError, device.supports_graphs(),
                 "launch_overhead needs a device with "
                 "graphs (cuda or sim), got ",
                 device.str());
  Bench bench(device, options);
  std::string device_name = runtime::device_context(device).platform().name();
  std::string date = utc_date();

  std::vector<SizeResult> results;
  for (int n : options.sizes) results.push_back(bench.run(n));

  std::cout << "launch_overhead on " << device.str() << " (" << device_name << "), " << date << "\n"
            << options.repeats << " repeats after " << options.warmup
            << " warm-up runs; microseconds, median [p10, p90]\n\n";
  std::printf("%6s | %-28s | %-28s | %8s | %-28s | %-28s\n", "N", "CPU: N eager launches",
              "CPU: 1 graph launch", "ratio", "GPU per eager kernel", "GPU per graph node");
  for (const SizeResult& r : results) {
    std::printf("%6d | %-28s | %-28s | %7.1fx | %-28s | %-28s\n", r.n, cell(r.eager_cpu_us).c_str(),
                cell(r.graph_cpu_us).c_str(), r.eager_cpu_us.median / r.graph_cpu_us.median,
                cell(r.eager_gpu_us_per_kernel).c_str(), cell(r.graph_gpu_us_per_node).c_str());
  }

  std::ostringstream json;
  json << "{\n  \"benchmark\": \"launch_overhead\",\n"
       << "  \"device\": " << json_string(device.str()) << ",\n"
       << "  \"device_name\": " << json_string(device_name) << ",\n"
       << "  \"date\": " << json_string(date) << ",\n"
       << "  \"repeats\": " << options.repeats << ",\n"
       << "  \"warmup\": " << options.warmup << ",\n"
       << "  \"units\": \"microseconds; capture_ms and instantiate_ms in milliseconds\",\n"
       << "  \"results\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const SizeResult& r = results[i];
    json << (i == 0 ? "\n" : ",\n") << "    {\"n\": " << r.n
         << ",\n     \"eager_cpu_us\": " << to_json(r.eager_cpu_us)
         << ",\n     \"graph_cpu_us\": " << to_json(r.graph_cpu_us)
         << ",\n     \"cpu_ratio_eager_over_graph\": "
         << json_number(r.eager_cpu_us.median / r.graph_cpu_us.median)
         << ",\n     \"eager_gpu_us_per_kernel\": " << to_json(r.eager_gpu_us_per_kernel)
         << ",\n     \"graph_gpu_us_per_node\": " << to_json(r.graph_gpu_us_per_node)
         << ",\n     \"capture_ms\": " << json_number(r.capture_ms)
         << ",\n     \"instantiate_ms\": " << json_number(r.instantiate_ms) << "}";
  }
  json << "\n  ]\n}\n";
  std::ofstream file(options.json_path);
  GROVE_CHECK_AS(ConfigError, file.good(), "cannot write ", options.json_path);
  file << json.str();
  std::cout << "\nwrote " << options.json_path << "\n";
  return 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  return grove::benchmarks::benchmark_main("launch_overhead", grove::benchmarks::run_main, argc,
                                           argv);
}
