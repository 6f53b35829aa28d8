// grove's tiny-K GEMM kernel (compiler/lowering/tiny_k_gemm.h): a thread per
// output, its sums equal to the host's in every layout and epilogue, the
// switch GROVE_TINY_K_GEMM really changes what runs, and its PTX passes ptxas.
#include "compiler/lowering/tiny_k_gemm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/ir/builder.h"
#include "compiler/lowering/lower.h"
#include "runtime/error.h"
#include "tests/common/test_util.h"
#include "tests/compiler/codegen/codegen_test_util.h"
#include "tests/compiler/lowering/lowering_test_util.h"

namespace grove {
namespace {

using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using runtime::DType;
using runtime::GemmEpilogue;

// One GEMM C [m, n] = op(A) op(B) over slots A 0, B 1, C 2, bias 3: A [m, k]
// or read transposed from [k, m]; B [n, k] (linear's weight) or [k, n].
compiler::lowering::GemmLaunch launch_of(int64_t m, int64_t n, int64_t k, GemmEpilogue epilogue,
                                         bool transpose_a, bool transpose_b) {
  compiler::lowering::GemmLaunch launch;
  launch.a_slot = 0, launch.b_slot = 1, launch.c_slot = 2;
  if (epilogue != GemmEpilogue::kNone) launch.bias_slot = 3;
  launch.args.m = m, launch.args.n = n, launch.args.k = k;
  launch.args.transpose_a = transpose_a;
  launch.args.transpose_b = transpose_b;
  launch.args.lda = transpose_a ? m : k;
  launch.args.ldb = transpose_b ? k : n;
  launch.args.ldc = n;
  launch.args.epilogue = epilogue;
  launch.calls.emplace_back();
  return launch;
}

// Note [Tiny-K GEMM kernel]: every layout of A and B, with and without a bias
// and with relu, against the float64 reference (on sim, whose loop is cuda's
// per-thread order); 100 rows (more than small-M's 64), K = 16.
TEST(TinyKGemm, KernelMatchesTheReferenceInEveryLayout) {
  const int64_t m = 100, n = 24, k = 16;
  uint32_t seed = 3;
  for (bool transpose_a : {true, false}) {
    for (bool transpose_b : {true, false}) {
      for (GemmEpilogue epilogue :
           {GemmEpilogue::kNone, GemmEpilogue::kBias, GemmEpilogue::kBiasRelu}) {
        SCOPED_TRACE(str_cat(transpose_a ? "A read transposed, " : "A [m, k], ",
                             transpose_b ? "B [n, k], " : "B [k, n], ",
                             runtime::gemm_epilogue_name(epilogue)));
        const compiler::lowering::GemmLaunch launch =
            launch_of(m, n, k, epilogue, transpose_a, transpose_b);
        ASSERT_TRUE(compiler::lowering::tiny_k_gemm_qualifies(launch));
        std::mt19937 rng(++seed);
        const testing::Buffer a = testing::random_buffer(rng, DType::kF32, m * k, -1, 1);
        const testing::Buffer b = testing::random_buffer(rng, DType::kF32, n * k, -1, 1);
        const testing::Buffer bias = testing::random_buffer(rng, DType::kF32, n, -1, 1);
        std::vector<testing::Buffer> inputs = {a, b};
        if (epilogue != GemmEpilogue::kNone) inputs.push_back(bias);
        const compiler::lowering::AssembledKernel kernel =
            compiler::lowering::tiny_k_gemm_kernel(launch);
        EXPECT_TRUE(kernel.spec.thread_rows);
        EXPECT_EQ(kernel.spec.iteration_shape, (runtime::Shape{n, m, k}));
        std::vector<testing::Buffer> outputs =
            testing::run_kernel(kernel.spec, runtime::kSimDevice, inputs);
        ASSERT_EQ(outputs.size(), 1u);
        for (int64_t row = 0; row < m; ++row) {
          for (int64_t col = 0; col < n; ++col) {
            double expected = epilogue == GemmEpilogue::kNone ? 0.0 : bias.values[col];
            for (int64_t i = 0; i < k; ++i) {
              expected += a.values[static_cast<size_t>(transpose_a ? i * m + row : row * k + i)] *
                          b.values[static_cast<size_t>(transpose_b ? col * k + i : i * n + col)];
            }
            if (epilogue == GemmEpilogue::kBiasRelu) expected = std::max(expected, 0.0);
            const double got = outputs[0].values[static_cast<size_t>(row * n + col)];
            ASSERT_TRUE(testing::close(got, expected, 1e-5, 1e-6))
                << "row " << row << " col " << col << ": " << got << " vs " << expected;
          }
        }
      }
    }
  }
}

// Too few rows (small-M's), too long a K, or a batch: not the tiny-K kernel's.
TEST(TinyKGemm, OnlyTallGemmsWithAShortInnerDimensionQualify) {
  using compiler::lowering::tiny_k_gemm_qualifies;
  EXPECT_TRUE(tiny_k_gemm_qualifies(launch_of(512, 256, 16, GemmEpilogue::kBias, true, true)));
  EXPECT_FALSE(tiny_k_gemm_qualifies(launch_of(64, 256, 16, GemmEpilogue::kBias, true, true)));
  EXPECT_FALSE(tiny_k_gemm_qualifies(launch_of(512, 256, 33, GemmEpilogue::kBias, true, true)));
  compiler::lowering::GemmLaunch batched = launch_of(512, 256, 16, GemmEpilogue::kNone, true, true);
  batched.args.batch_count = 2;
  EXPECT_FALSE(tiny_k_gemm_qualifies(batched));
}

// MLP-Mixer's token mixing in small: linear over the transpose of x [16, 100]
// (16 tokens, 100 channels) with 24 outputs. GROVE_TINY_K_GEMM=on makes it one
// tiny-K kernel matching the reference; auto keeps the library GEMM where
// nothing is measured (sim), off always.
TEST(TinyKGemm, SwitchChangesTheKernelAndTheProgramMatchesTheReference) {
  ProgramBuilder b("token_mixing", runtime::kSimDevice);
  ValueId x = b.input("x", {16, 100});
  b.output(b.relu(
      b.linear(b.transpose(x, 0, 1), b.input("w", {24, 16}), b.input("bias", {24}), "fc"), "act"));
  const compiler::ir::Program program = b.build();
  auto tiny_k_kernels = [](const compiler::lowering::KernelReport& report) {
    size_t count = 0;
    for (const std::string& name : report.kernels) count += name.rfind("tiny_k_gemm", 0) == 0;
    return count;
  };
  {
    testing::ScopedEnv env("GROVE_TINY_K_GEMM", "on");
    const compiler::lowering::KernelReport report =
        compiler::lowering::lower(program).kernel_report();
    EXPECT_EQ(report.library_gemms, 0u) << report.str();
    EXPECT_EQ(tiny_k_kernels(report), 1u) << report.str();
    testing::InputRanges ranges;
    ranges.float_low = -1.0, ranges.float_high = 1.0;
    testing::expect_matches_reference(program, testing::random_inputs(program, 9, ranges),
                                      runtime::kSimDevice, testing::tolerance_for(DType::kF32),
                                      "token mixing, tiny-K kernel");
  }
  for (const char* mode : {"auto", "off"}) {
    testing::ScopedEnv env("GROVE_TINY_K_GEMM", mode);
    const compiler::lowering::KernelReport report =
        compiler::lowering::lower(program).kernel_report();
    EXPECT_EQ(report.library_gemms, 1u) << mode << ": " << report.str();
    EXPECT_EQ(tiny_k_kernels(report), 0u) << mode << ": " << report.str();
  }
  testing::ScopedEnv env("GROVE_TINY_K_GEMM", "fast");
  testing::expect_error<ConfigError>([&] { compiler::lowering::lower(program); },
                                     {"GROVE_TINY_K_GEMM='fast'", "off", "on", "auto"});
}

// PyTorch's default gelu as the importer writes it: mul(mul(x, 0.5),
// add(erf(mul(x, 1/sqrt 2)), 1)).
ValueId exact_gelu(ProgramBuilder& b, ValueId x) {
  ValueId scaled = b.mul(x, b.full(0.7071067811865476));
  ValueId one_plus = b.add(b.op1("erf", {scaled}), b.full(1.0));
  return b.mul(b.mul(x, b.full(0.5)), one_plus);
}

// MLP-Mixer's token-mixing fc1 as ATen gives it (x [1, 16, channels]
// transposed to [1, channels, 16], reshaped to rows, mm with the weight,
// reshaped back, the bias added, the exact gelu).
compiler::ir::Program token_mixing_fc1(int64_t channels) {
  ProgramBuilder b("token_mixing_fc1", runtime::kSimDevice);
  ValueId x = b.input("x", {1, 16, channels});
  ValueId rows = b.reshape(b.transpose(x, 1, 2), {channels, 16});
  ValueId product = b.linear(rows, b.input("w", {24, 16}), compiler::ir::kNoValue, "fc");
  ValueId biased = b.add(b.reshape(product, {1, channels, 24}), b.input("bias", {24}));
  b.output(exact_gelu(b, biased));
  return b.build();
}

// Note [Exact gelu in the tiny-K GEMM]: token-mixing fc1 over 100 channels is
// one tiny-K kernel with the gelu in it (two kernels with
// GROVE_TINY_K_EXACT_GELU=0), matching the reference either way; past
// kMaxTinyKExactGeluRows rows the gelu keeps its kernel.
TEST(TinyKGemm, ExactGeluAfterABiasAddIsTheKernelsEpilogue) {
  {
    testing::ScopedEnv small_m("GROVE_SMALL_M_GEMM", "on");
    testing::ScopedEnv tiny_k("GROVE_TINY_K_GEMM", "on");
    const compiler::lowering::KernelReport tall =
        compiler::lowering::lower(token_mixing_fc1(compiler::lowering::kMaxTinyKExactGeluRows + 1))
            .kernel_report();
    ASSERT_EQ(tall.kernels.size(), 2u) << tall.str();
    EXPECT_EQ(tall.kernels[0], "tiny_k_gemm_bias") << tall.str();
  }
  const compiler::ir::Program program = token_mixing_fc1(100);
  testing::ScopedEnv small_m("GROVE_SMALL_M_GEMM", "on");
  testing::ScopedEnv tiny_k("GROVE_TINY_K_GEMM", "on");
  testing::InputRanges ranges;
  ranges.float_low = -1.0, ranges.float_high = 1.0;
  for (const char* joins : {"1", "0"}) {
    testing::ScopedEnv env("GROVE_TINY_K_EXACT_GELU", joins);
    SCOPED_TRACE(str_cat("GROVE_TINY_K_EXACT_GELU=", joins));
    const compiler::lowering::KernelReport report =
        compiler::lowering::lower(program).kernel_report();
    EXPECT_EQ(report.library_gemms, 0u) << report.str();
    if (std::string(joins) == "1") {
      ASSERT_EQ(report.kernels.size(), 1u) << report.str();
      EXPECT_EQ(report.kernels[0], "tiny_k_gemm_bias_exact_gelu") << report.str();
    } else {
      ASSERT_EQ(report.kernels.size(), 2u) << report.str();
      EXPECT_EQ(report.kernels[0], "tiny_k_gemm_bias") << report.str();
    }
    testing::expect_matches_reference(program, testing::random_inputs(program, 17, ranges),
                                      runtime::kSimDevice, testing::tolerance_for(DType::kF32),
                                      str_cat("token mixing fc1, exact gelu joins ", joins));
  }
}

// bf16 and f16 operands (read as f32, sums in f32, C rounded once): the
// tiny-K kernel of a linear over a transposed activation matches the reference
// within the dtype's tolerance on sim.
TEST(TinyKGemm, HalfPrecisionMatchesTheReference) {
  testing::ScopedEnv tiny_k("GROVE_TINY_K_GEMM", "on");
  testing::InputRanges ranges;
  ranges.float_low = -1.0, ranges.float_high = 1.0;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(runtime::dtype_name(dtype));
    ProgramBuilder b("token_mixing_half", runtime::kSimDevice);
    ValueId x = b.input("x", {16, 100}, dtype);
    b.output(b.linear(b.transpose(x, 0, 1), b.input("w", {24, 16}, dtype),
                      b.input("bias", {24}, dtype), "fc"));
    const compiler::ir::Program program = b.build();
    const compiler::lowering::KernelReport report =
        compiler::lowering::lower(program).kernel_report();
    ASSERT_EQ(report.kernels.size(), 1u) << report.str();
    EXPECT_EQ(report.kernels[0], "tiny_k_gemm_bias") << report.str();
    testing::expect_matches_reference(program, testing::random_inputs(program, 23, ranges),
                                      runtime::kSimDevice, testing::tolerance_for(dtype),
                                      "half-precision tiny-K");
  }
}

TEST(TinyKGemm, PtxPassesPtxas) {
  const std::string ptx =
      compiler::codegen::emit_ptx(compiler::lowering::tiny_k_gemm_kernel(
                                      launch_of(512, 256, 16, GemmEpilogue::kBias, true, true))
                                      .spec);
  constexpr const char* kPtxas = "/usr/local/cuda/bin/ptxas";
  if (const char* dump = std::getenv("GROVE_TEST_PTX_DUMP")) std::ofstream(dump) << ptx;
  if (access(kPtxas, X_OK) != 0) GTEST_SKIP() << kPtxas << " not found: skipping ptxas";
  char path[] = "/tmp/grove_tiny_k_ptx_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << ptx;
  const std::string command = std::string(kPtxas) + " -arch=sm_90 " + path + " -o /dev/null 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << ptx;
  std::remove(path);
}

}  // namespace
}  // namespace grove
