// Reduction kernels (Note [Kernel spec reductions]) on sim through the host JIT,
// and the kernel cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_builder.h"
#include "compiler/codegen/kernel_compiler.h"
#include "runtime/device.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "tests/compiler/codegen/codegen_test_util.h"

namespace grove::compiler::codegen {
namespace {

using runtime::DType;
using runtime::Shape;
using testing::Buffer;
using testing::close;

constexpr uint32_t kSeed = 4321;

KernelSpec softmax_spec(int64_t rows, int64_t length, DType dtype) {
  KernelBuilder k("softmax", {rows, length});
  int x = k.load(k.input(dtype, {length, 1}));
  int row_max = k.reduced(k.reduce(ReduceOp::kMax, x));
  int shifted = k.unary(ExprOp::kExp, k.binary(ExprOp::kSub, x, row_max));
  int total = k.reduced(k.reduce(ReduceOp::kSum, shifted));
  k.output(k.binary(ExprOp::kDiv, shifted, total), dtype, {length, 1});
  return k.build();
}

// layer_norm over the last dimension with gamma/beta broadcast over rows;
// mean and rstd are per-row outputs (what the backward pass saves).
KernelSpec layer_norm_spec(int64_t rows, int64_t length, DType dtype) {
  KernelBuilder k("layer_norm", {rows, length});
  int x = k.load(k.input(dtype, {length, 1}));
  int gamma = k.load(k.input(DType::kF32, {0, 1}));
  int beta = k.load(k.input(DType::kF32, {0, 1}));
  int inverse_length = k.constant(1.0 / static_cast<double>(length));
  int mean = k.binary(ExprOp::kMul, k.reduced(k.reduce(ReduceOp::kSum, x)), inverse_length);
  int centered = k.binary(ExprOp::kSub, x, mean);
  int variance = k.binary(
      ExprOp::kMul, k.reduced(k.reduce(ReduceOp::kSum, k.binary(ExprOp::kMul, centered, centered))),
      inverse_length);
  int rstd = k.unary(ExprOp::kRsqrt, k.binary(ExprOp::kAdd, variance, k.constant(1e-5)));
  int normalized = k.binary(ExprOp::kMul, centered, rstd);
  k.output(k.binary(ExprOp::kAdd, k.binary(ExprOp::kMul, normalized, gamma), beta), dtype,
           {length, 1});
  k.output(mean, DType::kF32, {1}, /*per_row=*/true);
  k.output(rstd, DType::kF32, {1}, /*per_row=*/true);
  return k.build();
}

TEST(Reduction, SumMaxAndMinOverRowsOfA3dSpaceWithPerRowOutputs) {
  std::mt19937 rng(kSeed);
  const Shape shape = {3, 4, 37};
  KernelBuilder k("row_stats", shape);
  int x = k.load(k.input(DType::kF32, {148, 37, 1}));
  int bias = k.load(k.input(DType::kF32, {0, 1, 0}));  // one value per middle index, broadcast
  int sum = k.reduced(k.reduce(ReduceOp::kSum, x));
  int max = k.reduced(k.reduce(ReduceOp::kMax, x));
  int min = k.reduced(k.reduce(ReduceOp::kMin, x));
  k.output(k.binary(ExprOp::kAdd, sum, bias), DType::kF32, {4, 1}, true);
  k.output(max, DType::kF32, {1, 3}, true);  // written transposed
  k.output(min, DType::kBF16, {4, 1}, true);
  const KernelSpec spec = k.build();
  std::vector<Buffer> inputs = {testing::random_buffer(rng, DType::kF32, 444, -10, 10),
                                testing::random_buffer(rng, DType::kF32, 4, -1, 1)};
  std::vector<Buffer> out = testing::run_kernel(spec, runtime::kSimDevice, inputs);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      double sum_ref = 0, max_ref = -INFINITY, min_ref = INFINITY;
      for (int l = 0; l < 37; ++l) {
        double v = inputs[0].values[i * 148 + j * 37 + l];
        sum_ref += v;
        max_ref = std::max(max_ref, v);
        min_ref = std::min(min_ref, v);
      }
      EXPECT_TRUE(close(out[0].values[i * 4 + j], sum_ref + inputs[1].values[j], 1e-5, 1e-5))
          << "seed " << kSeed;
      EXPECT_EQ(out[1].values[i + 3 * j], max_ref);
      EXPECT_EQ(out[2].values[i * 4 + j], testing::representable(min_ref, DType::kBF16));
    }
  }
}

TEST(Reduction, SoftmaxPatternIsOneKernelAndMatchesDoubleReference) {
  std::mt19937 rng(kSeed + 1);
  for (auto [rows, length] : {std::pair<int64_t, int64_t>{8, 100}, {5, 1}, {2, 1000}}) {
    const KernelSpec spec = softmax_spec(rows, length, DType::kF32);
    std::vector<Buffer> inputs = {testing::random_buffer(rng, DType::kF32, rows * length, -20, 20)};
    std::vector<Buffer> out = testing::run_kernel(spec, runtime::kSimDevice, inputs);
    for (int64_t r = 0; r < rows; ++r) {
      double max_ref = -INFINITY, total = 0;
      for (int64_t l = 0; l < length; ++l)
        max_ref = std::max(max_ref, inputs[0].values[r * length + l]);
      for (int64_t l = 0; l < length; ++l)
        total += std::exp(inputs[0].values[r * length + l] - max_ref);
      for (int64_t l = 0; l < length; ++l) {
        double expected = std::exp(inputs[0].values[r * length + l] - max_ref) / total;
        ASSERT_TRUE(close(out[0].values[r * length + l], expected, 1e-5, 1e-9))
            << "rows " << rows << " length " << length << " at " << r << "," << l << " (seed "
            << kSeed + 1 << ")";
      }
    }
  }
}

TEST(Reduction, LayerNormPatternWithTwoReductionsAndAnEpilogueMatchesDoubleReference) {
  std::mt19937 rng(kSeed + 2);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const int64_t rows = 6, length = 96;
    const KernelSpec spec = layer_norm_spec(rows, length, dtype);
    std::vector<Buffer> inputs = {testing::random_buffer(rng, dtype, rows * length, -3, 5),
                                  testing::random_buffer(rng, DType::kF32, length, 0.5, 1.5),
                                  testing::random_buffer(rng, DType::kF32, length, -0.5, 0.5)};
    std::vector<Buffer> out = testing::run_kernel(spec, runtime::kSimDevice, inputs);
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, variance = 0;
      for (int64_t l = 0; l < length; ++l) mean += inputs[0].values[r * length + l];
      mean /= length;
      for (int64_t l = 0; l < length; ++l) {
        variance += std::pow(inputs[0].values[r * length + l] - mean, 2);
      }
      variance /= length;
      const double rstd = 1 / std::sqrt(variance + 1e-5);
      EXPECT_TRUE(close(out[1].values[r], mean, 1e-5, 1e-6));
      EXPECT_TRUE(close(out[2].values[r], rstd, 1e-5, 1e-6));
      for (int64_t l = 0; l < length; ++l) {
        const double expected =
            (inputs[0].values[r * length + l] - mean) * rstd * inputs[1].values[l] +
            inputs[2].values[l];
        const double rtol = dtype == DType::kBF16 ? 8e-3 : 1e-5;
        ASSERT_TRUE(close(out[0].values[r * length + l], expected, rtol, 1e-5))
            << dtype << " at " << r << "," << l << ": got " << out[0].values[r * length + l]
            << ", expected " << expected << " (seed " << kSeed + 2 << ")";
      }
    }
  }
}

// Note [Short rows held by a warp]: softmax and layer norm over rows of 1 to
// 32 elements (a warp per row, lanes past the row among them) and longer (a
// block per row), and more rows than one grid-stride pass, agree on cuda with
// the host kernel; with GROVE_WARP_HELD_ROWS=0 (a block per row) as well.
// A block's reductions give the same bits with one barrier or two (Note [One
// barrier per block reduction]).
TEST(Reduction, ShortRowsHeldByAWarpOnCudaMatchTheHost) {
  if (runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(kSeed + 5);
  for (const char* held : {"1", "0"}) {
    ::setenv("GROVE_WARP_HELD_ROWS", held, 1);
    for (auto [rows, length] : std::vector<std::pair<int64_t, int64_t>>{
             {3, 1}, {5, 31}, {7, 32}, {7, 33}, {272, 192}, {256, 512}, {300001, 8}}) {
      for (const KernelSpec& spec :
           {softmax_spec(rows, length, DType::kF32), layer_norm_spec(rows, length, DType::kF32)}) {
        std::vector<Buffer> inputs = {
            testing::random_buffer(rng, DType::kF32, rows * length, -3, 5)};
        for (size_t i = 1; i < spec.inputs.size(); ++i) {
          inputs.push_back(testing::random_buffer(rng, DType::kF32, length, 0.5, 1.5));
        }
        std::vector<Buffer> on_cuda = testing::run_kernel(spec, runtime::kCudaDevice, inputs);
        std::vector<Buffer> on_sim = testing::run_kernel(spec, runtime::kSimDevice, inputs);
        // Note [One barrier per block reduction]: the same bits as two barriers.
        ::setenv("GROVE_ONE_BARRIER_REDUCE", "1", 1);
        std::vector<Buffer> one_barrier = testing::run_kernel(spec, runtime::kCudaDevice, inputs);
        ::unsetenv("GROVE_ONE_BARRIER_REDUCE");
        for (size_t o = 0; o < on_cuda.size(); ++o) {
          ASSERT_EQ(on_cuda[o].values, one_barrier[o].values)
              << spec.name << " rows " << rows << " length " << length << " output " << o;
        }
        for (size_t o = 0; o < on_cuda.size(); ++o) {
          for (size_t i = 0; i < on_cuda[o].values.size(); ++i) {
            ASSERT_TRUE(close(on_cuda[o].values[i], on_sim[o].values[i], 1e-5, 1e-6))
                << spec.name << " rows " << rows << " length " << length << " held " << held
                << " output " << o << " element " << i << ": cuda " << on_cuda[o].values[i]
                << ", host " << on_sim[o].values[i] << " (seed " << kSeed + 5 << ")";
          }
        }
      }
    }
  }
  ::unsetenv("GROVE_WARP_HELD_ROWS");
}

TEST(Reduction, ReducesAlongAStridedDimensionAndPropagatesNaN) {
  // Column sums of a contiguous [5, 9] matrix: the iteration space is [9, 5], reduced over 5.
  std::mt19937 rng(kSeed + 3);
  KernelBuilder k("column_max", {9, 5});
  int x = k.load(k.input(DType::kF32, {1, 9}));
  k.output(k.reduced(k.reduce(ReduceOp::kSum, x)), DType::kF32, {1}, true);
  k.output(k.reduced(k.reduce(ReduceOp::kMax, x)), DType::kF32, {1}, true);
  const KernelSpec spec = k.build();
  std::vector<Buffer> inputs = {testing::random_buffer(rng, DType::kF32, 45, -1, 1)};
  inputs[0].values[2 * 9 + 4] = std::numeric_limits<double>::quiet_NaN();  // column 4
  std::vector<Buffer> out = testing::run_kernel(spec, runtime::kSimDevice, inputs);
  for (int c = 0; c < 9; ++c) {
    double sum = 0, max = -INFINITY;
    for (int r = 0; r < 5; ++r) {
      sum += inputs[0].values[r * 9 + c];
      max = std::max(max, inputs[0].values[r * 9 + c]);
    }
    if (c == 4) {
      EXPECT_TRUE(std::isnan(out[0].values[c]));
      EXPECT_TRUE(std::isnan(out[1].values[c])) << "max must propagate NaN";
      continue;
    }
    EXPECT_TRUE(close(out[0].values[c], sum, 1e-6, 1e-6));
    EXPECT_EQ(out[1].values[c], max);
  }
}

// A hit is proven by the cache's counters and the shared handle; how fast a
// hit is belongs to the benchmarks (compile times in RESULTS.md), not to a
// timed assertion that a loaded machine can fail (CI did, at 4.1 ms).
TEST(KernelCache, SecondCompileOfASignatureIsACacheHit) {
  clear_kernel_cache();
  const KernelSpec spec = softmax_spec(4, 64, DType::kF32);
  const KernelCacheStats before = kernel_cache_stats();
  auto start = std::chrono::steady_clock::now();
  CompiledKernel first = compile_kernel(spec, runtime::kSimDevice);
  const double cold_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  start = std::chrono::steady_clock::now();
  CompiledKernel second = compile_kernel(softmax_spec(4, 64, DType::kF32), runtime::kSimDevice);
  const double warm_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const KernelCacheStats after = kernel_cache_stats();
  EXPECT_EQ(after.code_generations, before.code_generations + 1);
  EXPECT_EQ(after.hits, before.hits + 1);
  EXPECT_EQ(first.handle.impl, second.handle.impl);
  EXPECT_EQ(first.name, second.name);
  EXPECT_GT(first.compile_ms, 0);
  std::printf("softmax[4x64] host kernel: cold compile %.2f ms, cached %.4f ms\n", cold_ms,
              warm_ms);
  // A different shape is a different kernel; the cpu device shares the host code.
  compile_kernel(softmax_spec(4, 65, DType::kF32), runtime::kSimDevice);
  CompiledKernel on_cpu = compile_kernel(spec, runtime::kCpuDevice);
  EXPECT_EQ(kernel_cache_stats().code_generations, before.code_generations + 2);
  EXPECT_EQ(on_cpu.device, runtime::kCpuDevice);
}

// Note [JIT memory in arenas] (compiler/codegen/jit_arena.h): host kernels
// share a few memory mappings instead of adding about three each, so a
// process cannot run out of mappings (vm.max_map_count) by compiling many.
TEST(HostJitMemory, ManyDistinctKernelsAddFewMappings) {
  auto mappings = [] {
    std::ifstream maps("/proc/self/maps");
    return std::count(std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>(), '\n');
  };
  compile_kernel(softmax_spec(2, 99, DType::kF32), runtime::kSimDevice);  // the JIT exists
  const auto before = mappings();
  constexpr int kKernels = 300;
  for (int i = 0; i < kKernels; ++i) {
    compile_kernel(softmax_spec(2, 100 + i, DType::kF32), runtime::kSimDevice);
  }
  const auto after = mappings();
  std::printf("%d host kernels added %ld memory mappings\n", kKernels,
              static_cast<long>(after - before));
  EXPECT_LT(after - before, 30) << "each kernel must not map pages of its own";
}

TEST(KernelCache, LaunchChecksArgumentCountsAndDevices) {
  const KernelSpec spec = softmax_spec(2, 8, DType::kF32);
  CompiledKernel kernel = compile_kernel(spec, runtime::kSimDevice);
  float data[16] = {};
  EXPECT_THROW(make_args(kernel, {data}, {}, {}), Error);
  EXPECT_THROW(make_args(kernel, {data}, {data}, {1.0f}), Error);
  runtime::KernelArgs args = make_args(kernel, {data}, {data + 1}, {});
  ASSERT_EQ(args.slots.size(), 2u);
  EXPECT_EQ(args.slots[1], reinterpret_cast<uint64_t>(data + 1));
  runtime::Tensor on_cpu = runtime::Tensor::empty({16}, DType::kF32, runtime::kCpuDevice);
  EXPECT_THROW(launch(kernel, {on_cpu}, {on_cpu}), DeviceError);
}

TEST(KernelCache, CompileForAnAbsentCudaDeviceThrowsDeviceError) {
  if (runtime::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(compile_kernel(softmax_spec(2, 8, DType::kF32), runtime::kCudaDevice), DeviceError);
}

}  // namespace
}  // namespace grove::compiler::codegen
