// eager_latency: per-call latency of the "eager" backend on the benchmark
// models, f32: mlp16x512 at batch 1 and 256, gpt4x256 at batch 1 with T = 32.
// For each model it reports, in one process on one stream:
//   - latency per call: host time from the call until its results are ready
//     (call + stream synchronize), median and p90 over --iters calls;
//   - enqueue time per call (the call alone, without waiting), median;
//   - GPU time per call between timing events recorded around the call, median;
//   - kernels per call (generated kernels + library GEMMs);
//   - JIT compile time (lowering + code generation): cold (kernel cache
//     cleared) and cached (compiled again), with the code generation part of
//     the cold time; parameter initialization is reported apart;
//   - where the cold compile's time went (Note [Compile profile],
//     runtime/compile_profile.h): PTX generation, the driver's JIT of each
//     module (on the loader threads: their sum can exceed the wall time),
//     the compiler's waits for it, GEMM tuning, and the slowest modules.
// Note [A cold compile in a process of its own]: the driver keeps JITed
// modules in its disk cache (CUDA_CACHE_PATH), the GEMM tuning keeps its
// choices in GROVE_CACHE_DIR and in the process, and the platform keeps every
// module it loaded; run in one process, a later case reused what an earlier
// one (or an earlier run) left. On cuda each case therefore runs in a child
// process of its own (this binary again, --in-process --cases N) with both
// directories new and empty, and its cold compile is a compile on a machine
// that never ran grove: every JIT, every tuning, the libraries' first setup.
// A second child then compiles the case with the tuning table the first one
// left and the driver's cache empty again (compile_cold_tuned_ms: cold
// kernels for shapes this machine has tuned). --in-process runs every case
// here with the caches as they are (and sim always does: it has no JIT).
// Prints a table and writes JSON. Runs on cuda when present, else on sim (a
// smoke test for CI: use a small --iters there).
//
//   eager_latency [--device cuda|sim] [--iters 200] [--warmup 20]
//                 [--cases 0,1,2] [--in-process] [--profile-top 8]
//                 [--jit-probe] [--json eager_latency.json]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "benchmarks/common/flags.h"
#include "benchmarks/common/latency.h"
#include "compiler/backends/compile.h"
#include "compiler/codegen/kernel_compiler.h"
#include "compiler/model_format/model_json.h"
#include "runtime/blas.h"
#include "runtime/compile_profile.h"
#include "runtime/device_context.h"
#include "runtime/error.h"

namespace grove::benchmarks {
namespace {

using runtime::Device;
using runtime::Tensor;

struct Options {
  Device device = runtime::default_device();
  int iters = 200;
  int warmup = 20;
  std::string json_path;
  std::string models_dir = "benchmarks/models";
  std::vector<int64_t> cases;  // indices into the case list; empty: all
  int profile_top = 8;
  bool in_process = false;  // Note [A cold compile in a process of its own]
  bool jit_probe = false;
};

struct Case {
  std::string label;
  std::string model;
  std::map<std::string, int64_t> dims;
};

struct Result {
  Case config;
  double latency_median_us = 0, latency_p90_us = 0;
  double enqueue_median_us = 0;
  double gpu_median_us = 0;
  size_t kernels = 0, gemms = 0;
  double compile_cold_ms = 0, codegen_cold_ms = 0, compile_cached_ms = 0, state_init_ms = 0;
  double first_call_ms = 0;  // the compiled model's first call, until its results are ready
  std::vector<runtime::CompileEvent> cold_events;  // Note [Compile profile]
};

// Per category: events, total ms and PTX bytes.
struct CategoryTotal {
  size_t count = 0;
  double ms = 0;
  size_t bytes = 0;
};

std::map<std::string, CategoryTotal> category_totals(
    const std::vector<runtime::CompileEvent>& events) {
  std::map<std::string, CategoryTotal> totals;
  for (const runtime::CompileEvent& event : events) {
    CategoryTotal& total = totals[event.category];
    ++total.count;
    total.ms += event.ms;
    total.bytes += event.bytes;
  }
  return totals;
}

void print_profile(const Result& r, int top) {
  std::printf("  cold compile of %s: %.1f ms; by category (events, ms, KB):",
              r.config.label.c_str(), r.compile_cold_ms);
  for (const auto& [category, total] : category_totals(r.cold_events)) {
    std::printf(" %s %zu %.1f %.0f;", category.c_str(), total.count, total.ms,
                static_cast<double>(total.bytes) / 1024);
  }
  std::printf("\n");
  std::vector<const runtime::CompileEvent*> slow;
  for (const runtime::CompileEvent& event : r.cold_events) {
    if (event.category == "jit" || event.category == "tuning") slow.push_back(&event);
  }
  std::sort(slow.begin(), slow.end(), [](auto* a, auto* b) { return a->ms > b->ms; });
  for (size_t i = 0; i < slow.size() && static_cast<int>(i) < top; ++i) {
    std::printf("    %-6s %8.1f ms %8.1f KB  %s\n", slow[i]->category.c_str(), slow[i]->ms,
                static_cast<double>(slow[i]->bytes) / 1024, slow[i]->name.c_str());
  }
}

compiler::TensorList random_inputs(const compiler::backends::CompiledModel& model, Device device) {
  std::mt19937 rng(2026);
  compiler::TensorList inputs;
  const compiler::ir::Program& program = model.program();
  for (const std::string& name : model.input_names()) {
    const compiler::ir::Value& value = program.value(*program.find_value(name));
    int64_t n = runtime::shape_numel(value.type.shape);
    if (value.type.dtype == runtime::DType::kI64) {
      std::vector<int64_t> ids(static_cast<size_t>(n));
      for (auto& id : ids) id = static_cast<int64_t>(rng() % 512);
      inputs.push_back(Tensor::from_vector(ids, value.type.shape, device));
    } else {
      std::uniform_real_distribution<float> uniform(-1.f, 1.f);
      std::vector<float> values(static_cast<size_t>(n));
      for (float& v : values) v = uniform(rng);
      inputs.push_back(Tensor::from_vector(values, value.type.shape, device));
    }
  }
  return inputs;
}

Result run_case(const Case& config, const Options& options) {
  Result result;
  result.config = config;
  compiler::ir::Program program = compiler::model_format::load_model_file(
      options.models_dir + "/" + config.model + ".json", config.dims, options.device);
  compiler::codegen::clear_kernel_cache();
  const bool profile_was_on = runtime::compile_profile_enabled();
  runtime::set_compile_profile(true);
  runtime::take_compile_events();
  compiler::backends::CompiledModel cold = compiler::backends::compile(program);
  result.cold_events = runtime::take_compile_events();
  runtime::set_compile_profile(profile_was_on);
  result.compile_cold_ms = cold.lower_ms();
  result.codegen_cold_ms = cold.compile_ms();
  result.state_init_ms = cold.total_compile_ms() - cold.lower_ms();
  compiler::backends::CompiledModel model = compiler::backends::compile(program);
  result.compile_cached_ms = model.lower_ms();
  compiler::lowering::KernelReport report = model.kernel_report();
  result.kernels = report.kernels.size();
  result.gemms = report.library_gemms;

  runtime::DeviceContext& context = runtime::device_context(options.device);
  runtime::Platform& platform = context.platform();
  runtime::StreamHandle stream = context.create_stream();
  runtime::StreamGuard guard(options.device, stream);
  compiler::TensorList inputs = random_inputs(model, options.device);
  {
    Stopwatch first_call;
    model(inputs);
    platform.synchronize_stream(stream);
    result.first_call_ms = first_call.elapsed_us() / 1000;
  }
  for (int i = 0; i < options.warmup; ++i) model(inputs);
  platform.synchronize_stream(stream);

  runtime::EventHandle before = platform.create_event(true);
  runtime::EventHandle after = platform.create_event(true);
  std::vector<double> latency, enqueue, gpu;
  for (int i = 0; i < options.iters; ++i) {
    platform.record_event(before, stream);
    Stopwatch call_watch;
    compiler::TensorList outputs = model(inputs);
    enqueue.push_back(call_watch.elapsed_us());
    platform.record_event(after, stream);
    platform.synchronize_stream(stream);
    latency.push_back(call_watch.elapsed_us());
    gpu.push_back(1000.0 * platform.elapsed_ms(before, after));
  }
  platform.destroy_event(before);
  platform.destroy_event(after);
  result.latency_median_us = percentile(latency, 0.5);
  result.latency_p90_us = percentile(latency, 0.9);
  result.enqueue_median_us = percentile(enqueue, 0.5);
  result.gpu_median_us = percentile(gpu, 0.5);
  return result;
}

const std::vector<FlagSpec> kFlags = {
    {"--device", "DEVICE", "cuda or sim (default: cuda when present, else sim)"},
    {"--iters", "N", "timed calls per case (default 200)"},
    {"--warmup", "N", "untimed calls first (default 20)"},
    kJsonFlag,
    {"--models", "DIR", "directory of the benchmark models (default benchmarks/models)"},
    {"--cases", "LIST", "which cases, by index (0 mlp b=1, 1 mlp b=256, 2 gpt; default all)"},
    {"--profile-top", "N", "slowest JIT modules and tunings printed per case (default 8)"},
    {"--jit-probe", "",
     "only load cuda's tiled GEMM kernels for f32 (GROVE_TILE_PRELOAD, "
     "GROVE_KERNEL_LOAD_THREADS) and print how long their JIT took"},
    {"--in-process", "",
     "run every case in this process, caches as they are (cuda's default: "
     "each case in a process of its own with empty caches)"},
};

Options parse(const FlagValues& flags) {
  Options options;
  if (flags.has("--device")) options.device = Device::parse(flags.text("--device", ""));
  options.iters = static_cast<int>(flags.integer("--iters", options.iters, 1, 1 << 30));
  options.warmup = static_cast<int>(flags.integer("--warmup", options.warmup, 0, 1 << 30));
  options.json_path = flags.text("--json", options.json_path);
  options.models_dir = flags.text("--models", options.models_dir);
  for (const std::string& item : flags.list("--cases", {})) {
    options.cases.push_back(cli::parse_integer("--cases", item, 0, 2));
  }
  options.profile_top =
      static_cast<int>(flags.integer("--profile-top", options.profile_top, 0, 1 << 20));
  options.in_process = flags.has("--in-process") || !options.device.is_cuda();
  options.jit_probe = flags.has("--jit-probe");
  return options;
}

std::string json_rows(const std::vector<Result>& results);

// The "results" entries of a JSON file this benchmark wrote, as text.
std::string results_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  const std::string all = text.str();
  const std::string open = "\"results\": [\n";
  const size_t begin = all.find(open);
  const size_t end = all.rfind("\n  ]");
  GROVE_CHECK(begin != std::string::npos && end != std::string::npos && end >= begin,
              "eager_latency: no results in ", path, " (did the case's process fail?)");
  return all.substr(begin + open.size(), end - begin - open.size());
}

std::string json(const std::string& rows, const Options& options) {
  std::ostringstream out;
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  out << "{\n  \"benchmark\": \"eager_latency\",\n  \"device\": \""
      << runtime::device_context(options.device).platform().name() << "\",\n  \"date\": \"" << date
      << "\",\n  \"iters\": " << options.iters << ",\n  \"cold\": \""
      << (options.in_process ? "in one process, caches as they were"
                             : "each case in a process of its own, driver JIT cache and GEMM "
                               "tuning table empty (compile_cold_tuned_ms: another process with "
                               "the tuning table the first one left)")
      << "\",\n  \"results\": [\n"
      << rows << "\n  ]\n}\n";
  return out.str();
}

std::string json_rows(const std::vector<Result>& results) {
  std::ostringstream out;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    out << "    {\"case\": \"" << r.config.label
        << "\", \"latency_median_us\": " << r.latency_median_us
        << ", \"latency_p90_us\": " << r.latency_p90_us
        << ", \"enqueue_median_us\": " << r.enqueue_median_us
        << ", \"gpu_median_us\": " << r.gpu_median_us << ", \"kernels\": " << r.kernels
        << ", \"gemms\": " << r.gemms << ", \"compile_cold_ms\": " << r.compile_cold_ms
        << ", \"codegen_cold_ms\": " << r.codegen_cold_ms
        << ", \"compile_cached_ms\": " << r.compile_cached_ms
        << ", \"state_init_ms\": " << r.state_init_ms << ", \"first_call_ms\": " << r.first_call_ms
        << ", \"cold_profile\": {";
    bool first = true;
    for (const auto& [category, total] : category_totals(r.cold_events)) {
      out << (first ? "" : ", ") << "\"" << category << "\": {\"count\": " << total.count
          << ", \"ms\": " << total.ms << ", \"bytes\": " << total.bytes << "}";
      first = false;
    }
    out << "}, \"cold_events\": [";
    for (size_t e = 0; e < r.cold_events.size(); ++e) {
      const runtime::CompileEvent& event = r.cold_events[e];
      out << (e ? ", " : "") << "[\"" << event.category << "\", \"" << event.name << "\", "
          << event.bytes << ", " << event.ms << "]";
    }
    out << "]}" << (i + 1 < results.size() ? ",\n" : "");
  }
  return out.str();
}

// Runs this binary with `args`, CUDA_CACHE_PATH = `driver_cache` and
// GROVE_CACHE_DIR = `grove_cache`; throws when it fails.
void run_child(std::vector<std::string> args, const std::filesystem::path& driver_cache,
               const std::filesystem::path& grove_cache) {
  std::vector<std::string> environment = {"CUDA_CACHE_PATH=" + driver_cache.string(),
                                          "GROVE_CACHE_DIR=" + grove_cache.string()};
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    if (!text.starts_with("CUDA_CACHE_PATH=") && !text.starts_with("GROVE_CACHE_DIR=")) {
      environment.emplace_back(text);
    }
  }
  std::vector<char*> argv, envp;
  for (std::string& arg : args) argv.push_back(arg.data());
  for (std::string& entry : environment) envp.push_back(entry.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  std::fflush(stdout);
  const pid_t child = ::fork();
  GROVE_CHECK(child >= 0, "eager_latency: fork failed");
  if (child == 0) {
    ::execve(argv[0], argv.data(), envp.data());
    std::_Exit(127);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  GROVE_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "eager_latency: the process of case ",
              args[5] /* --cases N */, " failed (status ", status, ")");
}

// The number after "key": in a JSON row this benchmark wrote.
double json_number(const std::string& row, const std::string& key) {
  const size_t at = row.find("\"" + key + "\": ");
  GROVE_CHECK(at != std::string::npos, "eager_latency: no ", key, " in a case's results");
  return std::strtod(row.c_str() + at + key.size() + 4, nullptr);
}

// Case `index` in a child process with new empty caches (Note [A cold
// compile in a process of its own]), then in another with the GEMM tuning table
// the first one left and the driver's cache empty again (cold kernels, tuned
// shapes: a second model of the same shapes, or the same model on a machine
// that ran it before and lost only its JIT cache); returns the first one's
// JSON entry with the second one's cold compile and first call added.
std::string run_case_in_own_process(size_t index, const Options& options) {
  char directory_template[] = "/tmp/grove_eager_latency_XXXXXX";
  GROVE_CHECK(::mkdtemp(directory_template) != nullptr,
              "eager_latency: cannot make a temporary directory in /tmp");
  const std::filesystem::path directory(directory_template);
  std::filesystem::create_directories(directory / "driver_cache");
  std::filesystem::create_directories(directory / "driver_cache_again");
  std::filesystem::create_directories(directory / "grove_cache");
  // The second process is there for its compile: a few calls do.
  auto args = [&](const std::string& json_path, int iters, int warmup) {
    return std::vector<std::string>{"/proc/self/exe", "--in-process",
                                    "--device",       options.device.str(),
                                    "--cases",        std::to_string(index),
                                    "--iters",        std::to_string(iters),
                                    "--warmup",       std::to_string(warmup),
                                    "--models",       options.models_dir,
                                    "--profile-top",  std::to_string(options.profile_top),
                                    "--json",         json_path};
  };
  std::string row;
  try {
    const std::string cold_path = (directory / "cold.json").string();
    run_child(args(cold_path, options.iters, options.warmup), directory / "driver_cache",
              directory / "grove_cache");
    row = results_text(cold_path);
    std::printf("  again with the tuning table it left (driver cache empty):\n");
    const std::string tuned_path = (directory / "tuned.json").string();
    run_child(args(tuned_path, std::min(options.iters, 5), std::min(options.warmup, 1)),
              directory / "driver_cache_again", directory / "grove_cache");
    const std::string tuned = results_text(tuned_path);
    const size_t profile = row.find(", \"cold_profile\"");
    GROVE_CHECK(profile != std::string::npos, "eager_latency: no cold_profile in a case's results");
    row.insert(profile,
               str_cat(", \"compile_cold_tuned_ms\": ", json_number(tuned, "compile_cold_ms"),
                       ", \"first_call_tuned_ms\": ", json_number(tuned, "first_call_ms")));
  } catch (...) {
    std::filesystem::remove_all(directory);
    throw;
  }
  std::filesystem::remove_all(directory);
  return row;
}

// --jit-probe: whether the driver JITs modules side by side. The wall time of
// loading every tile of the tiled GEMM against the sum of the JITs' times.
int jit_probe(const Options& options) {
  runtime::Platform& platform = runtime::device_context(options.device).platform();
  runtime::set_compile_profile(true);
  runtime::take_compile_events();
  Stopwatch wall;
  platform.blas().preload_small_m_tiled_kernels(runtime::DType::kF32);
  platform.wait_for_kernel_loads();
  const double wall_ms = wall.elapsed_us() / 1000;
  const std::vector<runtime::CompileEvent> events = runtime::take_compile_events();
  double jit_ms = 0;
  size_t jits = 0;
  for (const runtime::CompileEvent& event : events) {
    if (event.category != "jit") continue;
    jit_ms += event.ms;
    ++jits;
  }
  std::printf("jit probe: %zu JITs, wall %.1f ms, their sum %.1f ms\n", jits, wall_ms, jit_ms);
  return 0;
}

int run(int argc, char** argv) {
  std::optional<FlagValues> parsed = parse_flags_or_help(
      "eager_latency", "Per-call latency of the eager backend.", argc, argv, kFlags);
  if (!parsed) return 0;
  const FlagValues& flags = *parsed;
  Options options = parse(flags);
  if (options.jit_probe) return jit_probe(options);
  std::vector<Case> cases = {
      {"mlp16x512 b=1", "mlp16x512", {{"batch", 1}}},
      {"mlp16x512 b=256", "mlp16x512", {{"batch", 256}}},
      {"gpt4x256 b=1 T=32", "gpt4x256", {{"batch", 1}, {"seq", 32}}},
  };
  if (!options.in_process) {
    std::printf(
        "eager latency: each case in a process of its own, driver JIT cache and GEMM "
        "tuning table empty (Note [A cold compile in a process of its own])\n");
    std::string rows;
    for (size_t c = 0; c < cases.size(); ++c) {
      if (!options.cases.empty() && std::find(options.cases.begin(), options.cases.end(),
                                              static_cast<int64_t>(c)) == options.cases.end()) {
        continue;
      }
      rows += (rows.empty() ? "" : ",\n") + run_case_in_own_process(c, options);
    }
    if (!options.json_path.empty()) {
      std::ofstream file(options.json_path);
      GROVE_CHECK(file.good(), "eager_latency: cannot write ", options.json_path);
      file << json(rows, options);
    }
    return 0;
  }
  std::printf("eager latency on %s (%s), f32, %d iters after %d warm-up\n",
              options.device.str().c_str(),
              runtime::device_context(options.device).platform().name().c_str(), options.iters,
              options.warmup);
  std::printf("%-18s | %10s %10s | %10s | %10s | %7s %5s | %9s %9s %9s | %8s\n", "case",
              "median us", "p90 us", "enqueue us", "GPU us", "kernels", "GEMMs", "JIT cold",
              "codegen", "JIT warm", "init ms");
  std::vector<Result> results;
  for (size_t c = 0; c < cases.size(); ++c) {
    if (!options.cases.empty() && std::find(options.cases.begin(), options.cases.end(),
                                            static_cast<int64_t>(c)) == options.cases.end()) {
      continue;
    }
    const Case& config = cases[c];
    Result r = run_case(config, options);
    std::printf("%-18s | %10.1f %10.1f | %10.1f | %10.1f | %7zu %5zu | %9.1f %9.1f %9.2f | %8.1f\n",
                r.config.label.c_str(), r.latency_median_us, r.latency_p90_us, r.enqueue_median_us,
                r.gpu_median_us, r.kernels, r.gemms, r.compile_cold_ms, r.codegen_cold_ms,
                r.compile_cached_ms, r.state_init_ms);
    print_profile(r, options.profile_top);
    std::printf("  first call %.1f ms\n", r.first_call_ms);
    std::fflush(stdout);
    results.push_back(r);
  }
  if (!options.json_path.empty()) {
    std::ofstream file(options.json_path);
    GROVE_CHECK(file.good(), "eager_latency: cannot write ", options.json_path);
    file << json(json_rows(results), options);
  }
  return 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  return grove::benchmarks::benchmark_main("eager_latency", grove::benchmarks::run, argc, argv);
}
