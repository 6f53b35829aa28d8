// PTX from the NVPTX path: accepted by ptxas for sm_90, and (with a GPU) run on cuda.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/kernel_builder.h"
#include "compiler/codegen/programmatic_ptx.h"
#include "runtime/device_context.h"
#include "tests/compiler/codegen/codegen_test_util.h"

namespace grove::compiler::codegen {
namespace {

using runtime::DType;
using testing::Buffer;

constexpr const char* kPtxas = "/usr/local/cuda/bin/ptxas";

std::vector<KernelSpec> representative_kernels() {
  std::vector<KernelSpec> specs;
  {  // bf16 bias + gelu with broadcasting, f16 and integer traffic, every unary op
    KernelBuilder k("bias_gelu_mix", {64, 33});
    int x = k.load(k.input(DType::kBF16, {33, 1}));
    int b = k.load(k.input(DType::kF32, {0, 1}));
    int h = k.load(k.input(DType::kF16, {1, 64}));
    int i = k.load(k.input(DType::kI64, {33, 1}), DType::kI64);
    int s = k.scalar();
    int v = k.binary(ExprOp::kAdd, x, b);
    for (ExprOp op : {ExprOp::kGelu, ExprOp::kExp, ExprOp::kLog, ExprOp::kTanh, ExprOp::kSigmoid,
                      ExprOp::kRelu, ExprOp::kSqrt, ExprOp::kRsqrt, ExprOp::kAbs, ExprOp::kNeg,
                      ExprOp::kFloor, ExprOp::kCeil, ExprOp::kTrunc, ExprOp::kRound, ExprOp::kErf,
                      ExprOp::kRoundToBf16, ExprOp::kRoundToF16}) {
      v = k.binary(ExprOp::kAdd, v, k.unary(op, h));
    }
    v = k.binary(ExprOp::kPow, v, s);
    int mask = k.binary(ExprOp::kAnd, k.binary(ExprOp::kGt, i, k.index(1)),
                        k.unary(ExprOp::kNot, k.binary(ExprOp::kEq, x, b)));
    int chosen = k.where(mask, v, k.binary(ExprOp::kMax, x, k.binary(ExprOp::kDiv, h, b)));
    k.output(chosen, DType::kBF16, {33, 1});
    k.output(k.cast(chosen, DType::kI32), DType::kI32, {1, 64});
    k.output(mask, DType::kBool, {33, 1});
    k.output(chosen, DType::kF16, {33, 1});
    // Bitwise ops on integers.
    int bits = k.binary(ExprOp::kXor, k.binary(ExprOp::kAnd, i, k.index(0)),
                        k.unary(ExprOp::kNot, k.binary(ExprOp::kOr, i, k.index(1))));
    bits = k.binary(ExprOp::kIntDiv, bits, k.index(1));
    k.output(bits, DType::kI64, {33, 1});
    specs.push_back(k.build());
  }
  {  // softmax, 256-thread blocks with a shared-memory stage
    KernelBuilder k("softmax", {16, 1000});
    int x = k.load(k.input(DType::kF32, {1000, 1}));
    int m = k.reduced(k.reduce(ReduceOp::kMax, x));
    int e = k.unary(ExprOp::kExp, k.binary(ExprOp::kSub, x, m));
    int total = k.reduced(k.reduce(ReduceOp::kSum, e));
    k.output(k.binary(ExprOp::kDiv, e, total), DType::kF32, {1000, 1});
    specs.push_back(k.build());
  }
  {  // layer_norm in bf16 with per-row outputs, 64-thread blocks
    KernelBuilder k("layer_norm", {4, 3, 48});
    int x = k.load(k.input(DType::kBF16, {144, 48, 1}));
    int mean = k.binary(ExprOp::kMul, k.reduced(k.reduce(ReduceOp::kSum, x)), k.constant(1.0 / 48));
    int c = k.binary(ExprOp::kSub, x, mean);
    int var =
        k.binary(ExprOp::kMul, k.reduced(k.reduce(ReduceOp::kSum, k.binary(ExprOp::kMul, c, c))),
                 k.constant(1.0 / 48));
    int rstd = k.unary(ExprOp::kRsqrt, k.binary(ExprOp::kAdd, var, k.constant(1e-5)));
    k.output(k.binary(ExprOp::kMul, c, rstd), DType::kBF16, {144, 48, 1});
    k.output(rstd, DType::kF32, {3, 1}, true);
    specs.push_back(k.build());
  }
  {  // Note [Elementwise kernels in aligned chunks]: chunked loads (contiguous,
     // a broadcast bias, one broadcast value) beside a transposed read and
     // write, the index along the chunked dimension, bf16 and f32 stores
    KernelBuilder k("chunked_bias_act", {36, 64});
    int x = k.load(k.input(DType::kF32, {64, 1}));
    int b = k.load(k.input(DType::kF32, {0, 1}));
    int t = k.load(k.input(DType::kF32, {1, 36}));
    int one = k.load(k.input(DType::kF32, {0, 0}));
    int v = k.binary(ExprOp::kMul, k.binary(ExprOp::kAdd, x, b), k.unary(ExprOp::kTanh, t));
    v = k.binary(ExprOp::kAdd, v, k.binary(ExprOp::kMul, one, k.cast(k.index(1), DType::kF32)));
    k.output(v, DType::kF32, {64, 1});
    k.output(v, DType::kBF16, {64, 1});
    k.output(k.unary(ExprOp::kRelu, v), DType::kF32, {1, 36});
    specs.push_back(k.build());
  }
  {  // a short-row min (one warp per row, no shared memory)
    KernelBuilder k("row_min", {1000, 20});
    k.output(k.reduced(k.reduce(ReduceOp::kMin, k.load(k.input(DType::kF32, {20, 1})))),
             DType::kF32, {1}, true);
    specs.push_back(k.build());
  }
  return specs;
}

TEST(Ptx, RepresentativeKernelsAreAcceptedByPtxasForSm90) {
  if (access(kPtxas, X_OK) != 0) GTEST_SKIP() << kPtxas << " not found: skipping the PTX check";
  for (const KernelSpec& spec : representative_kernels()) {
    const auto start = std::chrono::steady_clock::now();
    const std::string ptx = emit_ptx(spec);
    std::printf(
        "%s: PTX generated in %.1f ms (%zu bytes)\n", spec.name.c_str(),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
        ptx.size());
    EXPECT_NE(ptx.find(".entry " + kernel_symbol(spec)), std::string::npos) << ptx.substr(0, 2000);
    EXPECT_NE(ptx.find(".target sm_80"), std::string::npos);
    EXPECT_EQ(ptx.find("__nv_"), std::string::npos) << "libdevice calls cannot be resolved";
    char path[] = "/tmp/grove_ptx_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    std::ofstream(path) << ptx;
    const std::string command = std::string(kPtxas) + " -arch=sm_90 " + path + " -o /dev/null 2>&1";
    const int status = std::system(command.c_str());
    EXPECT_EQ(status, 0) << "ptxas rejected " << spec.name << ":\n" << ptx;
    std::remove(path);
  }
}

// Note [Programmatic generated kernels]: sm_90, PTX 7.8, one griddepcontrol.wait
// per entry before its first memory access, and ptxas takes it.
TEST(Ptx, ProgrammaticFormWaitsFirstAndIsAcceptedByPtxasForSm90) {
  const bool have_ptxas = access(kPtxas, X_OK) == 0;
  for (const KernelSpec& spec : representative_kernels()) {
    SCOPED_TRACE(spec.name);
    const std::string plain = emit_ptx(spec);
    const std::string ptx = programmatic_ptx(plain);
    EXPECT_NE(ptx.find(".target sm_90"), std::string::npos);
    EXPECT_NE(ptx.find(".version 7.8"), std::string::npos);
    const size_t wait = ptx.find("griddepcontrol.wait;");
    ASSERT_NE(wait, std::string::npos) << ptx.substr(0, 3000);
    EXPECT_EQ(ptx.find("griddepcontrol.wait;", wait + 1), std::string::npos);
    EXPECT_GT(wait, ptx.find(".entry "));
    for (const char* access : {"ld.global", "st.global", "ld.shared", "st.shared"}) {
      EXPECT_TRUE(ptx.find(access) == std::string::npos || ptx.find(access) > wait) << access;
    }
    // Only the header and the wait differ from the plain form.
    EXPECT_EQ(ptx.size(), plain.size() + std::string("\tgriddepcontrol.wait;\n").size());
    if (!have_ptxas) continue;
    char path[] = "/tmp/grove_ptx_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    std::ofstream(path) << ptx;
    const std::string command = std::string(kPtxas) + " -arch=sm_90 " + path + " -o /dev/null 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << "ptxas rejected " << spec.name << ":\n" << ptx;
    std::remove(path);
  }
  EXPECT_THROW(programmatic_ptx("not ptx"), Error);
}

// Note [Kernels generated side by side]: PTX generated on several threads at
// once is the PTX generated one kernel at a time, and compile_kernels
// generates each signature once, in the order asked.
TEST(KernelCompiler, KernelsCompiledSideBySideMatchOneAfterAnother) {
  const std::vector<KernelSpec> specs = representative_kernels();
  std::vector<std::string> one_after_another;
  for (const KernelSpec& spec : specs) one_after_another.push_back(emit_ptx(spec));
  std::vector<std::future<std::string>> side_by_side;
  for (int round = 0; round < 2; ++round) {
    for (const KernelSpec& spec : specs) {
      side_by_side.push_back(std::async(std::launch::async, [&spec] { return emit_ptx(spec); }));
    }
  }
  for (size_t i = 0; i < side_by_side.size(); ++i) {
    EXPECT_EQ(side_by_side[i].get(), one_after_another[i % specs.size()])
        << specs[i % specs.size()].name;
  }

  clear_kernel_cache();
  std::vector<const KernelSpec*> asked;
  for (const KernelSpec& spec : specs) asked.push_back(&spec);
  asked.push_back(&specs[0]);
  asked.push_back(&specs[0]);
  const KernelCacheStats before = kernel_cache_stats();
  const std::vector<CompiledKernel> kernels = compile_kernels(asked, runtime::kSimDevice);
  const KernelCacheStats after = kernel_cache_stats();
  ASSERT_EQ(kernels.size(), asked.size());
  for (size_t i = 0; i < asked.size(); ++i) EXPECT_EQ(kernels[i].name, kernel_symbol(*asked[i]));
  EXPECT_EQ(after.code_generations - before.code_generations, specs.size());
  EXPECT_EQ(kernels.back().handle.impl, kernels.front().handle.impl);
}

TEST(Ptx, ReductionKernelsSynchronizeTheBlockAndShuffle) {
  const std::vector<KernelSpec> specs = representative_kernels();
  const std::string softmax = emit_ptx(specs[1]);
  EXPECT_NE(softmax.find("bar.sync"), std::string::npos);
  EXPECT_NE(softmax.find("shfl.sync.bfly"), std::string::npos);
  EXPECT_NE(softmax.find(".shared"), std::string::npos);
  const std::string row_min = emit_ptx(specs[4]);
  EXPECT_EQ(row_min.find("bar.sync"), std::string::npos) << "one warp needs no barrier";
}

TEST(CudaExecution, KernelsOnCudaMatchTheHostKernels) {
  if (runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(99);
  for (const KernelSpec& spec : representative_kernels()) {
    std::vector<Buffer> inputs;
    for (const BufferSpec& input : spec.inputs) {
      runtime::Shape shape = spec.iteration_shape;
      inputs.push_back(
          testing::random_buffer(rng, input.dtype, testing::span(shape, input.strides), 0.5, 2));
    }
    std::vector<float> scalars(spec.scalar_count, 1.5f);
    std::vector<Buffer> on_cuda = testing::run_kernel(spec, runtime::kCudaDevice, inputs, scalars);
    std::vector<Buffer> on_sim = testing::run_kernel(spec, runtime::kSimDevice, inputs, scalars);
    for (size_t o = 0; o < on_cuda.size(); ++o) {
      for (size_t i = 0; i < on_cuda[o].values.size(); ++i) {
        const double tolerance = spec.outputs[o].dtype == DType::kBF16 ? 1e-2 : 1e-5;
        ASSERT_TRUE(testing::close(on_cuda[o].values[i], on_sim[o].values[i], tolerance, 1e-6))
            << spec.name << " output " << o << " element " << i;
      }
    }
  }
}

// Note [Elementwise kernels in aligned chunks]: a bias + relu over [272, 768]
// f32 loads its input and bias and stores its output in 16-byte vectors (the
// chunked loop) and in single elements (the loop for misaligned pointers);
// GROVE_CHUNKED_ELEMENTWISE=0 leaves only the single elements.
TEST(Ptx, ElementwiseChunksLoadAndStoreVectors) {
  KernelBuilder k("bias_relu", {272, 768});
  int x = k.load(k.input(DType::kF32, {768, 1}));
  int b = k.load(k.input(DType::kF32, {0, 1}));
  k.output(k.unary(ExprOp::kRelu, k.binary(ExprOp::kAdd, x, b)), DType::kF32, {768, 1});
  const KernelSpec spec = k.build();
  auto count = [](const std::string& text, const std::string& what) {
    size_t found = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
      ++found;
    }
    return found;
  };
  const std::string chunked = emit_ptx(spec);
  EXPECT_EQ(count(chunked, "ld.global.v4.f32"), 2u) << chunked;
  EXPECT_EQ(count(chunked, "st.global.v4.f32"), 1u) << chunked;
  EXPECT_GT(count(chunked, "ld.global.f32"), 0u) << chunked;
  ::setenv("GROVE_CHUNKED_ELEMENTWISE", "0", 1);
  const std::string plain = emit_ptx(spec);
  ::unsetenv("GROVE_CHUNKED_ELEMENTWISE");
  EXPECT_EQ(count(plain, ".v4."), 0u) << plain;
}

}  // namespace
}  // namespace grove::compiler::codegen
