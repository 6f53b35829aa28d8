#include "tests/reliability/soak.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/testing/test_kernels.h"

namespace grove::reliability {

namespace {

using compiler::TensorList;
using cudagraph_trees::FunctionId;
using cudagraph_trees::FunctionSpec;
using cudagraph_trees::TreeManager;
using runtime::Tensor;

struct Variant {
  bool step_begin;  // mark_step_begin() first
  int input_slot;   // which of the input tensors x is
  bool keep_y;      // keep f's output alive after g ran
  bool call_h;      // also run the other root function
  bool keep_z;      // keep g's output alive into the next iteration
};

constexpr int kPeriod = 12;
constexpr int kWarmCycles = 4;

FunctionSpec make_spec(std::string name, compiler::Callable body,
                       std::vector<size_t> static_inputs) {
  FunctionSpec spec;
  spec.name = std::move(name);
  spec.static_input_indices = std::move(static_inputs);
  spec.body = std::move(body);
  return spec;
}

PoolFigures figures(const TreeManager& manager, runtime::Device device) {
  runtime::CachingAllocator& allocator = runtime::device_context(device).allocator();
  runtime::PoolStats pool = allocator.stats(manager.pool());
  runtime::PoolStats shared = allocator.stats(runtime::kDefaultPool);
  return {pool.reserved_bytes, pool.allocated_bytes, pool.live_blocks, shared.allocated_bytes,
          shared.live_blocks};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

std::string PoolFigures::str() const {
  std::ostringstream out;
  out << "tree pool reserved " << reserved_bytes << " B, allocated " << allocated_bytes
      << " B, live blocks " << live_blocks << "; default pool allocated " << default_allocated_bytes
      << " B, live blocks " << default_live_blocks;
  return out.str();
}

std::string SoakReport::str() const {
  std::ostringstream out;
  out << "soak: " << iterations << " iterations, " << calls << " calls, " << replays << " replays, "
      << recordings << " recordings in " << seconds << " s\n  start: " << start.str()
      << "\n  end:   " << end.str() << "\n  " << (problem.empty() ? "OK" : "PROBLEM: " + problem);
  return out.str();
}

SoakReport run_soak(const SoakOptions& options) {
  SoakReport report;
  auto start_time = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  };
  std::mt19937 rng(static_cast<uint32_t>(options.seed));
  std::vector<Variant> schedule;
  for (int i = 0; i < kPeriod; ++i) {
    auto coin = [&] { return std::bernoulli_distribution(0.5)(rng); };
    schedule.push_back(
        {i == 0 || coin(), std::uniform_int_distribution<int>(0, 2)(rng), coin(), coin(), coin()});
  }
  const runtime::Shape shape = {options.elements};
  auto random_values = [&] {
    std::vector<float> values(static_cast<size_t>(options.elements));
    for (float& v : values) v = std::uniform_real_distribution<float>(0.25f, 4.0f)(rng);
    return values;
  };
  try {
    TreeManager manager(options.device, cudagraph_trees::TreeConfig{});
    std::vector<float> w_host = random_values();
    Tensor w = Tensor::from_vector(w_host, shape, options.device);
    std::vector<Tensor> inputs;
    for (int i = 0; i < 3; ++i)
      inputs.push_back(Tensor::from_vector(random_values(), shape, options.device));
    FunctionId f = manager.register_function(make_spec(
        "soak_f", [](const TensorList& in) { return TensorList{testing::add(in[0], in[1])}; },
        {1}));
    FunctionId g = manager.register_function(make_spec(
        "soak_g", [](const TensorList& in) { return TensorList{testing::scale(in[0], 2.0f)}; },
        {}));
    FunctionId h = manager.register_function(make_spec(
        "soak_h", [](const TensorList& in) { return TensorList{testing::scale(in[0], 3.0f)}; },
        {}));
    std::vector<PoolFigures> ring(kPeriod);
    TensorList kept_z;
    while (true) {
      const Variant& variant = schedule[static_cast<size_t>(report.iterations % kPeriod)];
      if (variant.step_begin) manager.mark_step_begin();
      std::vector<float> x_host = random_values();
      Tensor& x = inputs[static_cast<size_t>(variant.input_slot)];
      x.copy_from_host(x_host.data());
      std::vector<float> y_expected(x_host.size()), z_expected(x_host.size()),
          h_expected(x_host.size());
      for (size_t i = 0; i < x_host.size(); ++i) {
        y_expected[i] = x_host[i] + w_host[i];
        z_expected[i] = y_expected[i] * 2.0f;
        h_expected[i] = x_host[i] * 3.0f;
      }
      TensorList y = manager.run(f, {x, w});
      TensorList z = manager.run(g, {y[0]});
      report.calls += 2;
      std::string which;
      if (!same_bits(y[0].to_vector<float>(), y_expected)) which = "f";
      if (!same_bits(z[0].to_vector<float>(), z_expected)) which = "g";
      if (!variant.keep_y) y.clear();
      if (variant.call_h) {
        TensorList out = manager.run(h, {x});
        ++report.calls;
        if (!same_bits(out[0].to_vector<float>(), h_expected)) which = "h";
      }
      kept_z = variant.keep_z ? z : TensorList{};
      z.clear();
      y.clear();
      if (!which.empty()) {
        report.problem = "iteration " + std::to_string(report.iterations) + ": output of " + which +
                         " differs from the host reference";
        break;
      }
      ++report.iterations;
      report.replays = static_cast<int64_t>(manager.counters().replays);
      PoolFigures sample = figures(manager, options.device);
      PoolFigures& previous_cycle = ring[static_cast<size_t>(report.iterations % kPeriod)];
      if (report.iterations % kPeriod == 0) manager.verify();
      int64_t n = report.iterations;
      if (n == kWarmCycles * kPeriod) report.start = sample;
      if (n > kWarmCycles * kPeriod && !(sample == previous_cycle)) {
        report.problem = "pool figures changed between cycles at iteration " + std::to_string(n) +
                         ": " + previous_cycle.str() + " then " + sample.str();
        break;
      }
      previous_cycle = sample;
      report.end = sample;
      // Stop at cycle boundaries only, so that start and end are comparable.
      if (n % kPeriod == 0 && (report.replays >= options.replays ||
                               (options.seconds > 0 && elapsed() >= options.seconds))) {
        break;
      }
    }
    kept_z.clear();
    report.recordings = static_cast<int64_t>(manager.counters().recordings);
    if (report.problem.empty()) manager.verify();
    manager.shutdown();
  } catch (const std::exception& error) {
    report.problem = "iteration " + std::to_string(report.iterations) + " threw: " + error.what();
  }
  report.seconds = elapsed();
  return report;
}

}  // namespace grove::reliability
