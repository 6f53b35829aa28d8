// The `grove` command. Until the compiler lands, `grove demo` records a graph
// of a few kernels on the default device (cuda when present, else sim),
// replays it, and prints the result and the capture pool's statistics.
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/graph_recording.h"
#include "runtime/tensor.h"
#include "tests/runtime/test_kernels.h"

namespace grove::cli {
namespace {

using runtime::Device;
using runtime::Tensor;

void print_usage() {
  std::printf(
      "usage: grove <command> [options]\n\n"
      "commands:\n"
      "  demo [--device auto|cuda|sim]   record a graph of a few kernels, replay it,\n"
      "                                  print the result and the pool statistics\n"
      "  help                            show this message\n");
}

Device parse_device(const std::string& text) {
  if (text == "auto") return runtime::default_device();
  return Device::parse(text);
}

int run_demo(Device device) {
  std::printf("grove demo on %s (%s)\n", device.str().c_str(),
              runtime::device_context(device).backend().name().c_str());
  runtime::DeviceContext& context = runtime::device_context(device);
  constexpr int64_t n = 8;
  std::mt19937 generator(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> host_x(n), host_y(n);
  for (auto& v : host_x) v = uniform(generator);
  for (auto& v : host_y) v = uniform(generator);
  Tensor x = Tensor::from_vector(host_x, {n}, device);
  Tensor y = Tensor::from_vector(host_y, {n}, device);

  // The graph computes out = 2 * (x + y) + 1 in three kernels.
  runtime::PoolId pool = context.allocator().create_pool();
  runtime::StreamHandle capture_stream = context.create_stream();
  runtime::GraphRecording recording(device);
  Tensor out;
  {
    runtime::StreamGuard guard(device, capture_stream);
    recording.capture_begin(capture_stream, pool);
    Tensor sum = testing::add(x, y);
    out = testing::scale(sum, 2.0f);
    testing::launch_add_scalar_in_place(out, 1.0f);
    recording.capture_end();
  }
  recording.instantiate();
  std::printf("recorded %zu graph nodes\n", recording.node_count());

  for (int step = 0; step < 2; ++step) {
    for (auto& v : host_x) v += 1.0f;
    x.copy_from_host(host_x.data());
    recording.replay(capture_stream);
    runtime::StreamGuard guard(device, capture_stream);
    std::vector<float> result = out.to_vector<float>();
    std::printf("replay %d: out =", step + 1);
    bool correct = true;
    for (int64_t i = 0; i < n; ++i) {
      std::printf(" %.4f", result[i]);
      float expected = 2.0f * (host_x[i] + host_y[i]) + 1.0f;
      correct = correct && std::abs(result[i] - expected) <= 1e-5f * (1 + std::abs(expected));
    }
    std::printf("  [%s]\n", correct ? "matches 2*(x+y)+1" : "WRONG");
    if (!correct) return 1;
  }
  runtime::PoolStats stats = context.allocator().stats(pool);
  std::printf("capture pool: reserved %zu bytes, allocated %zu bytes, peak %zu bytes, %zu live "
              "blocks in %zu segment(s)\n",
              stats.reserved_bytes, stats.allocated_bytes, stats.peak_allocated_bytes,
              stats.live_blocks, stats.segments);
  return 0;
}

int main_impl(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "--help") == 0) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  if (command == "demo") {
    std::string device_text = "auto";
    for (int i = 2; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--device" && i + 1 < argc) {
        device_text = argv[++i];
      } else {
        throw Error(str_cat("demo: unknown option '", arg, "' (see grove help)"));
      }
    }
    return run_demo(parse_device(device_text));
  }
  throw Error(str_cat("unknown command '", command, "' (see grove help)"));
}

}  // namespace
}  // namespace grove::cli

int main(int argc, char** argv) {
  try {
    return grove::cli::main_impl(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "grove: error: %s\n", error.what());
    return 1;
  }
}
