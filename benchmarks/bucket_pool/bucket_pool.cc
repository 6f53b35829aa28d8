// bucket_pool: the memory of shape buckets (Note [Shape buckets]). One
// row-wise function recorded for batch buckets 1, 2, 4, ..., 64 in one shared
// pool, against each bucket recorded alone in a manager (and pool) of its own.
// Issue 7's goal: the shared pool at most 1.25x the largest bucket's
// recording alone (the sum of the separate recordings is what a tree without
// a shared pool would hold).
//
// The function is a chain of --kernels row-wise kernels over [batch, --width]
// f32 rows with every intermediate kept alive to the end (so the recording's
// pool holds kernels x batch x width x 4 bytes, like a model's activations).
// Calls of every size 1..64 in a seeded random order check the results.
//
//   bucket_pool [--device auto|cuda|sim] [--width 4096] [--kernels 8] [--json FILE]
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/common/flags.h"
#include "benchmarks/common/json_report.h"
#include "benchmarks/common/table.h"
#include "cudagraph_trees/shape_buckets.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"
#include "runtime/testing/test_kernels.h"

namespace grove::benchmarks {
namespace {

using cudagraph_trees::BucketedFunction;
using cudagraph_trees::BucketSpec;
using cudagraph_trees::TreeConfig;
using cudagraph_trees::TreeManager;
using runtime::Tensor;

constexpr const char* kName = "bucket_pool";
const std::vector<int64_t> kBuckets = {1, 2, 4, 8, 16, 32, 64};

const std::vector<FlagSpec> kFlags = {
    kDeviceFlag,
    {"--width", "W", "f32 elements per row (default 4096)"},
    {"--kernels", "K", "row-wise kernels in the chain (default 8)"},
    kJsonFlag,
};

BucketSpec chain_spec(int64_t kernels, std::vector<int64_t> buckets) {
  BucketSpec spec;
  spec.function.name = "rowwise_chain";
  spec.function.body = [kernels](const compiler::TensorList& in) {
    // Every intermediate stays alive to the end of the body: sum of all.
    std::vector<Tensor> kept = {testing::scale(in[0], 1.5f)};
    for (int64_t k = 1; k < kernels; ++k) kept.push_back(testing::add(kept.back(), in[0]));
    return compiler::TensorList{kept.back()};
  };
  spec.batched_inputs = {0};
  spec.batched_outputs = {0};
  spec.buckets = std::move(buckets);
  return spec;
}

Tensor random_rows(std::mt19937& rng, int64_t rows, int64_t width, runtime::Device device) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(rows * width));
  for (float& value : values) value = uniform(rng);
  return Tensor::from_vector(values, {rows, width}, device);
}

// y = 1.5x + (kernels - 1) x, in the kernels' order of float operations.
void check_rows(const Tensor& x, const Tensor& y, int64_t kernels) {
  std::vector<float> xs = x.to_vector<float>();
  std::vector<float> ys = y.to_vector<float>();
  GROVE_CHECK(xs.size() == ys.size(), kName, ": output has ", ys.size(), " values, expected ",
              xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    float expected = xs[i] * 1.5f;
    for (int64_t k = 1; k < kernels; ++k) expected = expected + xs[i];
    GROVE_CHECK(ys[i] == expected, kName, ": wrong value at ", i, ": ", ys[i], " vs ", expected);
  }
}

runtime::PoolStats pool_stats(const TreeManager& trees) {
  return runtime::device_context(trees.device()).allocator().stats(trees.pool());
}

int run(int argc, char** argv) {
  std::optional<FlagValues> parsed = parse_flags_or_help(
      kName, "Pool bytes of shape buckets: shared pool vs separate.", argc, argv, kFlags);
  if (!parsed) return 0;
  const FlagValues& flags = *parsed;
  runtime::Device device = resolve_device(flags.text("--device", "auto"));
  const int64_t width = flags.integer("--width", 4096, 1, 1 << 20);
  const int64_t kernels = flags.integer("--kernels", 8, 1, 256);
  std::mt19937 rng(2026);

  // Each bucket alone, in a manager (and pool) of its own.
  std::vector<size_t> alone_bytes;
  for (int64_t bucket : kBuckets) {
    TreeManager alone(device, TreeConfig{});
    BucketedFunction only(alone, chain_spec(kernels, {bucket}));
    Tensor x = random_rows(rng, bucket, width, device);
    check_rows(x, only({x})[0], kernels);
    alone_bytes.push_back(pool_stats(alone).reserved_bytes);
    alone.shutdown();
  }

  // All buckets in one shared pool, every size 1..64 once, in random order.
  TreeManager shared(device, TreeConfig{});
  BucketedFunction bucketed(shared, chain_spec(kernels, kBuckets));
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= kBuckets.back(); ++n) sizes.push_back(n);
  std::shuffle(sizes.begin(), sizes.end(), rng);
  for (int64_t n : sizes) {
    Tensor x = random_rows(rng, n, width, device);
    check_rows(x, bucketed({x})[0], kernels);
  }
  GROVE_CHECK(shared.counters().recordings == kBuckets.size(), kName, ": ",
              shared.counters().recordings, " recordings for ", kBuckets.size(), " buckets");
  const size_t shared_bytes = pool_stats(shared).reserved_bytes;
  size_t sum = 0;
  for (size_t bytes : alone_bytes) sum += bytes;
  const size_t largest = alone_bytes.back();

  nlohmann::json report = report_header(kName, device);
  std::printf(
      "%s on %s (%s): %lld row-wise kernels over [batch, %lld] f32, buckets 1..64; "
      "pool reserved bytes\n",
      kName, device.str().c_str(), report["device_name"].get<std::string>().c_str(),
      static_cast<long long>(kernels), static_cast<long long>(width));
  Table table({{"recording"}, {"pool bytes", Align::kRight}, {"vs largest alone", Align::kRight}});
  for (size_t b = 0; b < kBuckets.size(); ++b) {
    table.add_row({"bucket " + std::to_string(kBuckets[b]) + " alone", format_bytes(alone_bytes[b]),
                   format_ratio(static_cast<double>(alone_bytes[b]) / largest)});
  }
  table.add_row({"sum of separate recordings", format_bytes(sum),
                 format_ratio(static_cast<double>(sum) / largest)});
  table.add_row({"all buckets, shared pool", format_bytes(shared_bytes),
                 format_ratio(static_cast<double>(shared_bytes) / largest)});
  std::fputs(table.render().c_str(), stdout);
  const double ratio = static_cast<double>(shared_bytes) / largest;
  std::printf("shared pool / largest bucket alone: %.3f (goal <= 1.25): %s\n", ratio,
              ratio <= 1.25 ? "met" : "NOT met");
  shared.shutdown();

  const std::string json_path = flags.text("--json", "");
  if (!json_path.empty()) {
    report["width"] = width;
    report["kernels"] = kernels;
    report["buckets"] = kBuckets;
    report["alone_reserved_bytes"] = alone_bytes;
    report["sum_of_separate_bytes"] = sum;
    report["shared_pool_bytes"] = shared_bytes;
    report["shared_vs_largest"] = ratio;
    report["meets_goal"] = ratio <= 1.25;
    write_json_file(json_path, report);
  }
  return 0;
}

}  // namespace
}  // namespace grove::benchmarks

int main(int argc, char** argv) {
  return grove::benchmarks::benchmark_main(grove::benchmarks::kName, grove::benchmarks::run, argc,
                                           argv);
}
