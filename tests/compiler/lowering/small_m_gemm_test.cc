// grove's small-M GEMM kernel (compiler/lowering/small_m_gemm.h): the switch
// GROVE_SMALL_M_GEMM really changes what runs (kernel and GEMM counts), the
// kernel matches the float64 reference for several M, K and N (not multiples
// of 32) with bias and gelu epilogues, "eager" equals "cudagraphs" bitwise with
// the kernel chosen, its PTX passes ptxas, and the tuning table's logic (keys,
// reads, writes, corrupt files) holds on any machine.
#include "compiler/lowering/small_m_gemm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/autodiff/training_programs.h"
#include "compiler/backends/compile.h"
#include "compiler/codegen/codegen.h"
#include "compiler/ir/builder.h"
#include "compiler/lowering/gemm_tuning_table.h"
#include "compiler/lowering/lower.h"
#include "compiler/lowering/scheduler.h"
#include "compiler/model_format/model_json.h"
#include "cudagraph_trees/backend/cudagraphs_backend.h"
#include "cudagraph_trees/tree_manager.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "tests/common/test_util.h"
#include "tests/compiler/codegen/codegen_test_util.h"
#include "tests/compiler/lowering/lowering_test_util.h"
#include "tests/training/benchmark_models.h"

namespace grove {
namespace {

using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using compiler::lowering::GemmTuningEntry;
using compiler::lowering::GemmTuningTable;
using compiler::lowering::KernelReport;
using runtime::DType;

enum class Epilogue { kNone, kBias, kBiasGelu, kBiasRelu };

const char* epilogue_label(Epilogue epilogue) {
  switch (epilogue) {
    case Epilogue::kNone:
      return "none";
    case Epilogue::kBias:
      return "bias";
    case Epilogue::kBiasGelu:
      return "bias_gelu";
    case Epilogue::kBiasRelu:
      return "bias_relu";
  }
  return "?";
}

// y = linear(x [m, k], w [n, k], bias [n]), then gelu: one GEMM whose epilogue
// is `epilogue` (Note [GEMM epilogues in lowering]).
compiler::ir::Program linear_program(runtime::Device device, int64_t m, int64_t k, int64_t n,
                                     Epilogue epilogue, DType dtype = DType::kF32) {
  ProgramBuilder b("small_m_linear", device);
  ValueId x = b.input("x", {m, k}, dtype);
  ValueId w = b.input("w", {n, k}, dtype);
  ValueId bias = epilogue == Epilogue::kNone ? compiler::ir::kNoValue : b.input("bias", {n}, dtype);
  ValueId y = b.linear(x, w, bias, "fc");
  b.output(epilogue == Epilogue::kBiasGelu   ? b.gelu(y, "act")
           : epilogue == Epilogue::kBiasRelu ? b.relu(y, "act")
                                             : y);
  return b.build();
}

// Two layers, as a decoder's MLP at batch 1: linear + gelu, then linear.
compiler::ir::Program two_layers(runtime::Device device, int64_t m) {
  ProgramBuilder b("small_m_mlp", device);
  ValueId x = b.input("x", {m, 80});
  ValueId w1 = b.input("w1", {96, 80});
  ValueId b1 = b.input("b1", {96});
  ValueId w2 = b.input("w2", {40, 96});
  ValueId b2 = b.input("b2", {40});
  b.output(b.linear(b.gelu(b.linear(x, w1, b1, "fc1"), "act"), w2, b2, "fc2"));
  return b.build();
}

KernelReport report_of(const compiler::ir::Program& program) {
  return compiler::lowering::lower(program).kernel_report();
}

size_t small_m_kernels(const KernelReport& report) {
  size_t count = 0;
  for (const std::string& name : report.kernels) count += name.rfind("small_m_gemm", 0) == 0;
  return count;
}

testing::HostTensorList inputs_for(const compiler::ir::Program& program, uint32_t seed) {
  testing::InputRanges ranges;
  ranges.float_low = -1.0, ranges.float_high = 1.0;
  return testing::random_inputs(program, seed, ranges);
}

TEST(SmallMGemmSelection, SwitchChangesTheKernelAndGemmCounts) {
  compiler::ir::Program program =
      linear_program(runtime::kSimDevice, 2, 45, 37, Epilogue::kBiasGelu);
  {
    testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "on");
    KernelReport report = report_of(program);
    EXPECT_EQ(report.library_gemms, 0u) << report.str();
    ASSERT_EQ(report.kernels.size(), 1u) << report.str();
    EXPECT_EQ(report.kernels[0], "small_m_gemm_bias_gelu") << report.str();
  }
  {
    testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "off");
    KernelReport report = report_of(program);
    EXPECT_EQ(report.library_gemms, 1u) << report.str();
    EXPECT_EQ(report.kernels.size(), 0u) << report.str();
  }
}

// auto is a cuda policy: sim keeps its host GEMM.
TEST(SmallMGemmSelection, AutoOnSimKeepsTheHostGemm) {
  testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "auto");
  KernelReport report =
      report_of(linear_program(runtime::kSimDevice, 1, 512, 512, Epilogue::kBiasGelu));
  EXPECT_EQ(small_m_kernels(report), 0u) << report.str();
  EXPECT_EQ(report.library_gemms, 1u) << report.str();
}

// A cuda program lowered without loading kernels cannot measure: auto is the
// heuristic (M <= 8, weight read along K, at most 8 MiB of weights).
TEST(SmallMGemmSelection, AutoWithoutMeasurementsUsesTheShapeHeuristic) {
  testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "auto");
  auto kernels_and_gemms = [](int64_t m, int64_t k, int64_t n) {
    compiler::lowering::ScheduleOptions options;
    options.load_kernels = false;
    compiler::lowering::ScheduledProgram scheduled = compiler::lowering::schedule_program(
        linear_program(runtime::kCudaDevice, m, k, n, Epilogue::kBiasGelu), options);
    std::pair<size_t, size_t> counts;
    for (const compiler::lowering::Step& step : scheduled.steps) {
      counts.first += step.kind == compiler::lowering::StepKind::kKernel;
      counts.second += step.kind == compiler::lowering::StepKind::kGemm;
    }
    return counts;
  };
  EXPECT_EQ(kernels_and_gemms(1, 512, 512), std::make_pair(size_t{1}, size_t{0}));
  EXPECT_EQ(kernels_and_gemms(8, 512, 512), std::make_pair(size_t{1}, size_t{0}));
  EXPECT_EQ(kernels_and_gemms(16, 512, 512), std::make_pair(size_t{0}, size_t{1}));
  EXPECT_EQ(kernels_and_gemms(1, 4096, 4096), std::make_pair(size_t{0}, size_t{1}));  // 64 MiB
}

// Issue 22's case: mlp16x512 at batch 1 is 16 GEMMs (graph nodes) either way,
// library calls when off, grove's kernels (bias and gelu inside) when on.
TEST(SmallMGemmSelection, Mlp16x512AtBatchOneRunsSixteenKernelsInsteadOfSixteenGemms) {
  compiler::ir::Program program = compiler::model_format::load_model_file(
      "benchmarks/models/mlp16x512.json", {{"batch", 1}}, runtime::kSimDevice);
  for (const char* mode : {"off", "on"}) {
    testing::ScopedEnv env("GROVE_SMALL_M_GEMM", mode);
    compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
    KernelReport report = lowered.kernel_report();
    std::printf("mlp16x512 b=1, GROVE_SMALL_M_GEMM=%s: %s\n", mode, report.str().c_str());
    ASSERT_EQ(lowered.function().segments.size(), 1u);
    const compiler::Segment& segment = lowered.function().segments[0];
    EXPECT_EQ(segment.kernel_count + segment.gemm_count, 16u);
    EXPECT_EQ(segment.kernel_count, std::string(mode) == "on" ? 16u : 0u) << report.str();
    EXPECT_EQ(small_m_kernels(report), std::string(mode) == "on" ? 16u : 0u) << report.str();
  }
}

// mlp16x512's training backward at batch 4: each layer's input gradient is a
// GEMM with the gelu-gradient epilogue (kDGelu), which grove's kernel now
// takes with the switch on (15 of them: the first layer's input needs none),
// and the backward still matches the float64 reference.
TEST(SmallMGemmSelection, TrainingBackwardsGeluGradientGemmsRunAsSmallMKernels) {
  training::testing::ModelWithLoss model = training::testing::mlp_with_mse(4, runtime::kSimDevice);
  compiler::autodiff::TrainingPrograms training =
      compiler::autodiff::build_training_programs(model.program, model.loss);
  size_t dgelu_off = 0;
  {
    testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "off");
    for (const std::string& name : report_of(training.backward).kernels) {
      dgelu_off += name.rfind("small_m_gemm", 0) == 0;
    }
  }
  EXPECT_EQ(dgelu_off, 0u);
  testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "on");
  KernelReport report = report_of(training.backward);
  size_t dgelu = 0;
  for (const std::string& name : report.kernels) dgelu += name == "small_m_gemm_dgelu";
  EXPECT_EQ(dgelu, 15u) << report.str();
  testing::expect_matches_reference(training.backward, inputs_for(training.backward, 3),
                                    runtime::kSimDevice, testing::tolerance_for(DType::kF32),
                                    "mlp16x512 backward, batch 4");
}

TEST(SmallMGemmSelection, TooManyRowsNeverQualify) {
  testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "on");
  KernelReport report = report_of(linear_program(
      runtime::kSimDevice, compiler::lowering::kMaxSmallM + 1, 45, 37, Epilogue::kBias));
  EXPECT_EQ(report.library_gemms, 1u) << report.str();
  EXPECT_EQ(small_m_kernels(report), 0u) << report.str();
}

// Note [Small-N GEMMs as their transpose]: a linear of 100 rows and 12
// outputs (MLP-Mixer's token-mixing fc2 is 512 x 16) is one transposed kernel
// with GROVE_SMALL_N_GEMM=on, matching the reference with its bias and relu;
// auto keeps the library GEMM where nothing is measured (sim), off always; an
// A read transposed (its rows strided) never qualifies.
TEST(SmallMGemmSelection, TransposedFormRunsWhereSwitchedOnAndMatchesTheReference) {
  compiler::ir::Program program =
      linear_program(runtime::kSimDevice, 100, 70, 12, Epilogue::kBiasRelu);
  auto small_n_kernels = [](const KernelReport& report) {
    size_t count = 0;
    for (const std::string& name : report.kernels) count += name.rfind("small_n_gemm", 0) == 0;
    return count;
  };
  {
    testing::ScopedEnv env("GROVE_SMALL_N_GEMM", "on");
    KernelReport report = report_of(program);
    EXPECT_EQ(report.library_gemms, 0u) << report.str();
    ASSERT_EQ(small_n_kernels(report), 1u) << report.str();
    testing::expect_matches_reference(program, inputs_for(program, 21), runtime::kSimDevice,
                                      testing::tolerance_for(DType::kF32),
                                      "100 x 12 linear, transposed kernel");
  }
  for (const char* mode : {"auto", "off"}) {
    testing::ScopedEnv env("GROVE_SMALL_N_GEMM", mode);
    KernelReport report = report_of(program);
    EXPECT_EQ(report.library_gemms, 1u) << mode << ": " << report.str();
    EXPECT_EQ(small_n_kernels(report), 0u) << mode << ": " << report.str();
  }
  // x^T [100, 70] read from x [70, 100]: A is not K-contiguous.
  ProgramBuilder b("transposed_input", runtime::kSimDevice);
  ValueId x = b.input("x", {70, 100});
  b.output(b.linear(b.transpose(x, 0, 1), b.input("w", {12, 70}), b.input("bias", {12}), "fc"));
  testing::ScopedEnv env("GROVE_SMALL_N_GEMM", "on");
  KernelReport report = report_of(b.build());
  EXPECT_EQ(small_n_kernels(report), 0u) << report.str();
}

// The transposed form in bf16 and f16 (operands read as f32, sums in f32).
TEST(SmallMGemmSelection, TransposedFormInHalfPrecisionMatchesTheReference) {
  testing::ScopedEnv env("GROVE_SMALL_N_GEMM", "on");
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(runtime::dtype_name(dtype));
    compiler::ir::Program program =
        linear_program(runtime::kSimDevice, 100, 70, 12, Epilogue::kBias, dtype);
    KernelReport report = report_of(program);
    ASSERT_EQ(report.kernels.size(), 1u) << report.str();
    EXPECT_EQ(report.kernels[0], "small_n_gemm_bias") << report.str();
    testing::expect_matches_reference(program, inputs_for(program, 31), runtime::kSimDevice,
                                      testing::tolerance_for(dtype), "half-precision small-N");
  }
}

TEST(SmallMGemmSelection, UnknownSmallNSwitchValueNamesTheVariable) {
  testing::ScopedEnv env("GROVE_SMALL_N_GEMM", "fast");
  testing::expect_error<ConfigError>(
      [] { report_of(linear_program(runtime::kSimDevice, 100, 45, 12, Epilogue::kBias)); },
      {"GROVE_SMALL_N_GEMM='fast'", "off", "on", "auto"});
}

TEST(SmallMGemmSelection, UnknownSwitchValueNamesTheVariable) {
  testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "fast");
  testing::expect_error<ConfigError>(
      [] { report_of(linear_program(runtime::kSimDevice, 1, 45, 37, Epilogue::kBias)); },
      {"GROVE_SMALL_M_GEMM='fast'", "off", "on", "auto"});
}

// The kernel on [N, K] with warp_rows: one warp per column on cuda, no barrier.
// One GEMM of contiguous operands: A [m, k] in slot 0, B in slot 1 ([n, k]
// read transposed, as linear's weight, or [k, n]), C [m, n] in slot 2, then
// the bias (slot 3) and the aux matrix [m, n] (next slot) where the epilogue
// has them.
compiler::lowering::GemmLaunch contiguous_launch(int64_t m, int64_t n, int64_t k,
                                                 runtime::GemmEpilogue epilogue,
                                                 bool transpose_b = true) {
  using runtime::GemmEpilogue;
  compiler::lowering::GemmLaunch launch;
  launch.a_slot = 0, launch.b_slot = 1, launch.c_slot = 2;
  int next = 3;
  if (epilogue == GemmEpilogue::kBias || epilogue == GemmEpilogue::kBiasGelu ||
      epilogue == GemmEpilogue::kBiasGeluAux) {
    launch.bias_slot = next++;
  }
  if (epilogue == GemmEpilogue::kBiasGeluAux || epilogue == GemmEpilogue::kDGelu) {
    launch.aux_slot = next++;
  }
  launch.args.m = m, launch.args.n = n, launch.args.k = k;
  launch.args.lda = k, launch.args.ldb = transpose_b ? k : n, launch.args.ldc = n;
  launch.args.ld_aux = n;
  launch.args.transpose_b = transpose_b;
  launch.args.epilogue = epilogue;
  launch.calls.emplace_back();
  return launch;
}

// sum_i A[row, i] W[col, i] in double, A [m, k] row-major, W read as [n, k]
// (linear's weight) or, without transpose_b, as [k, n]: the reference the
// kernel tests compare with.
double reference_product(const testing::Buffer& a, const testing::Buffer& w, int64_t row,
                         int64_t col, int64_t n, int64_t k, bool transpose_b = true) {
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t w_at = transpose_b ? col * k + i : i * n + col;
    sum += a.values[static_cast<size_t>(row * k + i)] * w.values[static_cast<size_t>(w_at)];
  }
  return sum;
}

constexpr const char* kPtxas = "/usr/local/cuda/bin/ptxas";

// Whether ptxas assembles `ptx` for sm_90 (false when its file cannot be made).
bool ptxas_accepts(const std::string& ptx) {
  char path[] = "/tmp/grove_small_m_ptx_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return false;
  close(fd);
  std::ofstream(path) << ptx;
  const std::string command = std::string(kPtxas) + " -arch=sm_90 " + path + " -o /dev/null 2>&1";
  const bool accepted = std::system(command.c_str()) == 0;
  std::remove(path);
  return accepted;
}

TEST(SmallMGemmKernel, PtxShufflesWithoutBarriersAndPassesPtxas) {
  // K = 200: lanes run the 4-element unrolled loop, then the remainder.
  const compiler::lowering::GemmLaunch launch =
      contiguous_launch(3, 37, 200, runtime::GemmEpilogue::kBiasGelu);
  const compiler::codegen::KernelSpec spec = compiler::lowering::small_m_gemm_kernel(launch).spec;
  EXPECT_TRUE(spec.warp_rows);
  EXPECT_EQ(spec.reductions.size(), 3u);
  EXPECT_EQ(spec.outputs.size(), 3u);
  runtime::LaunchDims dims =
      compiler::codegen::kernel_launch_dims(spec, runtime::DeviceType::kCuda);
  EXPECT_EQ(dims.block.x, 128u);
  EXPECT_EQ(dims.grid.x, 10u);  // 37 columns, 4 per block
  const std::string ptx = compiler::codegen::emit_ptx(spec);
  if (const char* dump = std::getenv("GROVE_TEST_PTX_DUMP")) std::ofstream(dump) << ptx;
  EXPECT_NE(ptx.find("shfl.sync.bfly"), std::string::npos);
  EXPECT_EQ(ptx.find("bar.sync"), std::string::npos) << "a warp per row needs no barrier";
  if (access(kPtxas, X_OK) != 0) GTEST_SKIP() << kPtxas << " not found: skipping ptxas";
  EXPECT_TRUE(ptxas_accepts(ptx)) << ptx;
}

// Note [Small-M GEMM kernel]: M rows of A are cut into groups of at most 8
// (the largest divisor of M that fits), one warp per group and column.
TEST(SmallMGemmKernel, RowsAreCutIntoGroupsOfAtMostEight) {
  using compiler::lowering::small_m_rows_per_warp;
  EXPECT_EQ(small_m_rows_per_warp(1), 1);
  EXPECT_EQ(small_m_rows_per_warp(3), 3);
  EXPECT_EQ(small_m_rows_per_warp(8), 8);
  EXPECT_EQ(small_m_rows_per_warp(16), 8);
  EXPECT_EQ(small_m_rows_per_warp(20), 5);
  EXPECT_EQ(small_m_rows_per_warp(17), 1);
  EXPECT_EQ(small_m_rows_per_warp(32), 8);
  const compiler::lowering::GemmLaunch launch =
      contiguous_launch(32, 256, 256, runtime::GemmEpilogue::kBias);
  const compiler::lowering::AssembledKernel kernel =
      compiler::lowering::small_m_gemm_kernel(launch);
  EXPECT_EQ(kernel.spec.iteration_shape, (runtime::Shape{4, 256, 256}));
  EXPECT_EQ(kernel.spec.reductions.size(), 8u);
  ASSERT_EQ(kernel.output_offsets.size(), 8u);
  for (size_t m = 0; m < 8; ++m) {
    EXPECT_EQ(kernel.output_offsets[m], static_cast<int64_t>(m) * 256);
    EXPECT_EQ(kernel.spec.outputs[m].strides, (runtime::Shape{8 * 256, 1}));
  }
  runtime::LaunchDims dims =
      compiler::codegen::kernel_launch_dims(kernel.spec, runtime::DeviceType::kCuda);
  EXPECT_EQ(dims.grid.x, 256u);  // 4 groups x 256 columns, 4 warps per block
}

TEST(SmallMGemmKernel, RowVariantsAreTheDivisorsUpToEightFourAndTwo) {
  using compiler::lowering::small_m_row_variants;
  EXPECT_EQ(small_m_row_variants(32), (std::vector<int64_t>{8, 4, 2}));
  EXPECT_EQ(small_m_row_variants(20), (std::vector<int64_t>{5, 4, 2}));
  EXPECT_EQ(small_m_row_variants(3), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(small_m_row_variants(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(small_m_row_variants(17), (std::vector<int64_t>{1}));
}

// Note [Small-M GEMM variants]: every variant computes the same product (on
// sim, against a float64 reference), with bias and gelu and the pre-activation
// written aside.
TEST(SmallMGemmKernel, EveryRowVariantMatchesTheReference) {
  const int64_t m = 12, n = 37, k = 70;
  const compiler::lowering::GemmLaunch launch =
      contiguous_launch(m, n, k, runtime::GemmEpilogue::kBiasGeluAux);
  std::mt19937 rng(5);
  const testing::Buffer a = testing::random_buffer(rng, DType::kF32, m * k, -1, 1);
  const testing::Buffer w = testing::random_buffer(rng, DType::kF32, n * k, -1, 1);
  const testing::Buffer bias = testing::random_buffer(rng, DType::kF32, n, -1, 1);
  const std::vector<int64_t> variants = compiler::lowering::small_m_row_variants(m);
  ASSERT_EQ(variants, (std::vector<int64_t>{6, 4, 2}));
  for (int64_t rows : variants) {
    SCOPED_TRACE(str_cat(rows, " rows per warp"));
    const compiler::lowering::AssembledKernel kernel =
        compiler::lowering::small_m_gemm_kernel(launch, rows);
    std::vector<testing::Buffer> outputs =
        testing::run_kernel(kernel.spec, runtime::kSimDevice, {a, w, bias});
    ASSERT_EQ(outputs.size(), static_cast<size_t>(2 * rows));  // C and aux per row of a group
    for (int64_t row = 0; row < m; ++row) {
      const int64_t group = row / rows, within = row % rows;
      for (int64_t col = 0; col < n; ++col) {
        const double pre =
            bias.values[static_cast<size_t>(col)] + reference_product(a, w, row, col, n, k);
        // grove's gelu: the tanh approximation.
        const double gelu =
            0.5 * pre * (1 + std::tanh(std::sqrt(2 / M_PI) * (pre + 0.044715 * pre * pre * pre)));
        const size_t at = static_cast<size_t>(group * rows * n + col);
        const testing::Buffer& c = outputs[static_cast<size_t>(2 * within)];
        const testing::Buffer& aux = outputs[static_cast<size_t>(2 * within + 1)];
        ASSERT_TRUE(testing::close(aux.values[at], pre, 1e-4, 1e-5))
            << "aux row " << row << " col " << col << ": " << aux.values[at] << " vs " << pre;
        ASSERT_TRUE(testing::close(c.values[at], gelu, 1e-4, 1e-5))
            << "row " << row << " col " << col << ": " << c.values[at] << " vs " << gelu;
      }
    }
  }
}

// Note [Small-M GEMMs measured past 32 rows]: the kernel of a 48-row GEMM
// with a bias (what auto times against the library on cuda) matches the
// float64 reference in each of its variants, on sim.
TEST(SmallMGemmKernel, FortyEightRowsMatchTheReferenceInEveryVariant) {
  const int64_t m = 48, n = 37, k = 70;
  const compiler::lowering::GemmLaunch launch =
      contiguous_launch(m, n, k, runtime::GemmEpilogue::kBias);
  EXPECT_FALSE(compiler::lowering::small_m_gemm_qualifies(launch));  // on: 32 rows at most
  std::mt19937 rng(48);
  const testing::Buffer a = testing::random_buffer(rng, DType::kF32, m * k, -1, 1);
  const testing::Buffer w = testing::random_buffer(rng, DType::kF32, n * k, -1, 1);
  const testing::Buffer bias = testing::random_buffer(rng, DType::kF32, n, -1, 1);
  const std::vector<int64_t> variants = compiler::lowering::small_m_row_variants(m);
  ASSERT_EQ(variants, (std::vector<int64_t>{8, 4, 2}));
  for (int64_t rows : variants) {
    SCOPED_TRACE(str_cat(rows, " rows per warp"));
    const compiler::lowering::AssembledKernel kernel =
        compiler::lowering::small_m_gemm_kernel(launch, rows);
    std::vector<testing::Buffer> outputs =
        testing::run_kernel(kernel.spec, runtime::kSimDevice, {a, w, bias});
    ASSERT_EQ(outputs.size(), static_cast<size_t>(rows));
    for (int64_t row = 0; row < m; ++row) {
      const int64_t group = row / rows, within = row % rows;
      for (int64_t col = 0; col < n; ++col) {
        const double expected =
            bias.values[static_cast<size_t>(col)] + reference_product(a, w, row, col, n, k);
        const double got = outputs[static_cast<size_t>(within)]
                               .values[static_cast<size_t>(group * rows * n + col)];
        ASSERT_TRUE(testing::close(got, expected, 1e-4, 1e-5))
            << "row " << row << " col " << col << ": " << got << " vs " << expected;
      }
    }
  }
}

// Note [Small-N GEMMs as their transpose]: a 100 x 12 product (more rows
// than kMaxMeasuredSmallM, few columns) computed as the small-M kernel of its
// transpose matches the float64 reference in every variant (rows per warp
// dividing N = 12), with the bias per column of C, for the weight read as
// [n, k] (linear's) and as [k, n]; C keeps its row-major layout.
TEST(SmallMGemmKernel, TransposedFormMatchesTheReferenceInEveryVariant) {
  const int64_t m = 100, n = 12, k = 70;
  for (bool transpose_b : {true, false}) {
    SCOPED_TRACE(transpose_b ? "weight [n, k]" : "weight [k, n]");
    const compiler::lowering::GemmLaunch launch =
        contiguous_launch(m, n, k, runtime::GemmEpilogue::kBias, transpose_b);
    ASSERT_TRUE(compiler::lowering::small_n_gemm_qualifies(launch));
    EXPECT_FALSE(compiler::lowering::small_m_gemm_qualifies(launch));
    std::mt19937 rng(transpose_b ? 12 : 13);
    const testing::Buffer a = testing::random_buffer(rng, DType::kF32, m * k, -1, 1);
    const testing::Buffer w = testing::random_buffer(rng, DType::kF32, n * k, -1, 1);
    const testing::Buffer bias = testing::random_buffer(rng, DType::kF32, n, -1, 1);
    const std::vector<int64_t> variants = compiler::lowering::small_m_row_variants(n);
    ASSERT_EQ(variants, (std::vector<int64_t>{6, 4, 2}));
    for (int64_t rows : variants) {
      SCOPED_TRACE(str_cat(rows, " rows per warp"));
      const compiler::lowering::AssembledKernel kernel =
          compiler::lowering::small_m_gemm_kernel(launch, rows, /*transposed=*/true);
      EXPECT_EQ(kernel.spec.iteration_shape, (runtime::Shape{n / rows, m, k}));
      // The weight first (read through load_at), then A, then the bias.
      EXPECT_EQ(kernel.input_slots, (std::vector<int>{launch.b_slot, launch.a_slot, 3}));
      std::vector<testing::Buffer> outputs =
          testing::run_kernel(kernel.spec, runtime::kSimDevice, {w, a, bias});
      ASSERT_EQ(outputs.size(), static_cast<size_t>(rows));
      for (int64_t row = 0; row < m; ++row) {
        for (int64_t col = 0; col < n; ++col) {
          const double expected = bias.values[static_cast<size_t>(col)] +
                                  reference_product(a, w, row, col, n, k, transpose_b);
          // Output (col % rows) of the kernel's row (col / rows, row), at
          // C + row * n + col less its offset (col % rows).
          const int64_t within = col % rows;
          EXPECT_EQ(kernel.output_offsets[static_cast<size_t>(within)], within);
          const double got = outputs[static_cast<size_t>(within)]
                                 .values[static_cast<size_t>(row * n + col - within)];
          ASSERT_TRUE(testing::close(got, expected, 1e-4, 1e-5))
              << "row " << row << " col " << col << ": " << got << " vs " << expected;
        }
      }
    }
  }
  const std::string ptx = compiler::codegen::emit_ptx(
      compiler::lowering::small_m_gemm_kernel(
          contiguous_launch(m, n, k, runtime::GemmEpilogue::kBias), 0, /*transposed=*/true)
          .spec);
  EXPECT_EQ(ptx.find("bar.sync"), std::string::npos) << "a warp per row needs no barrier";
  if (access(kPtxas, X_OK) != 0) GTEST_SKIP() << kPtxas << " not found: skipping ptxas";
  EXPECT_TRUE(ptxas_accepts(ptx)) << ptx;
}

// Note [Small-M GEMM column tiles]: every row variant with four columns per
// warp matches the float64 reference, for the plain form (12 x 36, bias and
// the pre-activation written aside; the gelu gradient with the weight read
// [k, n]) and the transposed one (100 x 12 with a bias), both weight layouts.
TEST(SmallMGemmKernel, ColumnTilesMatchTheReference) {
  using runtime::GemmEpilogue;
  struct Case {
    int64_t m, n;
    GemmEpilogue epilogue;
    bool transpose_b, transposed;
  };
  const int64_t k = 70;
  for (const Case& test : {Case{12, 36, GemmEpilogue::kBiasGeluAux, true, false},
                           Case{12, 36, GemmEpilogue::kBias, false, false},
                           Case{12, 36, GemmEpilogue::kDGelu, false, false},
                           Case{100, 12, GemmEpilogue::kBias, true, true},
                           Case{100, 12, GemmEpilogue::kNone, false, true}}) {
    SCOPED_TRACE(str_cat(test.m, " x ", test.n, " ", runtime::gemm_epilogue_name(test.epilogue),
                         test.transpose_b ? " weight [n, k]" : " weight [k, n]",
                         test.transposed ? " transposed" : ""));
    const compiler::lowering::GemmLaunch launch =
        contiguous_launch(test.m, test.n, k, test.epilogue, test.transpose_b);
    std::mt19937 rng(static_cast<uint32_t>(test.m + test.n + k));
    const int64_t m = test.m, n = test.n;
    const testing::Buffer a = testing::random_buffer(rng, DType::kF32, m * k, -1, 1);
    const testing::Buffer w = testing::random_buffer(rng, DType::kF32, n * k, -1, 1);
    const testing::Buffer bias = testing::random_buffer(rng, DType::kF32, n, -1, 1);
    const testing::Buffer x = testing::random_buffer(rng, DType::kF32, m * n, -2, 2);
    std::vector<testing::Buffer> inputs =
        test.transposed ? std::vector<testing::Buffer>{w, a} : std::vector<testing::Buffer>{a, w};
    if (test.epilogue == GemmEpilogue::kBias || test.epilogue == GemmEpilogue::kBiasGeluAux) {
      inputs.push_back(bias);
    }
    if (test.epilogue == GemmEpilogue::kDGelu) inputs.push_back(x);
    const bool aux = test.epilogue == GemmEpilogue::kBiasGeluAux;
    const int64_t kernel_m = test.transposed ? n : m;
    const std::vector<compiler::lowering::SmallMVariant> variants =
        compiler::lowering::small_m_variants(kernel_m, test.transposed ? m : n);
    size_t tiled = 0;
    for (const compiler::lowering::SmallMVariant& variant : variants) {
      if (variant.columns == 1) continue;
      ++tiled;
      SCOPED_TRACE(str_cat(variant.rows, " rows, ", variant.columns, " columns per warp"));
      const compiler::lowering::AssembledKernel kernel = compiler::lowering::small_m_gemm_kernel(
          launch, variant.rows, test.transposed, variant.columns);
      std::vector<testing::Buffer> outputs =
          testing::run_kernel(kernel.spec, runtime::kSimDevice, inputs);
      const int64_t per_place = aux ? 2 : 1;
      ASSERT_EQ(outputs.size(), static_cast<size_t>(per_place * variant.rows * variant.columns));
      for (int64_t row = 0; row < m; ++row) {
        for (int64_t col = 0; col < n; ++col) {
          const double pre =
              (test.epilogue == GemmEpilogue::kNone || test.epilogue == GemmEpilogue::kDGelu
                   ? 0.0
                   : bias.values[static_cast<size_t>(col)]) +
              reference_product(a, w, row, col, n, k, test.transpose_b);
          double expected = pre;
          if (aux) {
            expected = 0.5 * pre *
                       (1 + std::tanh(std::sqrt(2 / M_PI) * (pre + 0.044715 * pre * pre * pre)));
          }
          if (test.epilogue == GemmEpilogue::kDGelu) {
            // gelu' (tanh approximation) of x at this place.
            const double v = x.values[static_cast<size_t>(row * n + col)];
            const double inner = std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v);
            const double t = std::tanh(inner);
            expected = pre * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * std::sqrt(2 / M_PI) *
                                                  (1 + 3 * 0.044715 * v * v));
          }
          // The kernel's (row within its group, column within its tile).
          const int64_t kernel_row = test.transposed ? col : row;
          const int64_t kernel_col = test.transposed ? row : col;
          const size_t o =
              static_cast<size_t>(per_place * ((kernel_row % variant.rows) * variant.columns +
                                               kernel_col % variant.columns));
          const int64_t at = row * n + col - kernel.output_offsets[o];
          const double got = outputs[o].values[static_cast<size_t>(at)];
          ASSERT_TRUE(testing::close(got, expected, 1e-4, 1e-5))
              << "row " << row << " col " << col << ": " << got << " vs " << expected;
          if (aux) {
            const double kept =
                outputs[o + 1]
                    .values[static_cast<size_t>(row * n + col - kernel.output_offsets[o + 1])];
            ASSERT_TRUE(testing::close(kept, pre, 1e-4, 1e-5))
                << "aux row " << row << " col " << col << ": " << kept << " vs " << pre;
          }
        }
      }
    }
    EXPECT_GT(tiled, 0u) << "no column-tiled variant";
  }
  const compiler::codegen::KernelSpec spec =
      compiler::lowering::small_m_gemm_kernel(
          contiguous_launch(16, 2048, 512, runtime::GemmEpilogue::kBias), 8, false, 4)
          .spec;
  EXPECT_EQ(spec.iteration_shape, (runtime::Shape{2, 512, 512}));
  EXPECT_EQ(spec.reductions.size(), 32u);
  const std::string ptx = compiler::codegen::emit_ptx(spec);
  if (const char* dump = std::getenv("GROVE_TEST_COLUMN_PTX_DUMP")) std::ofstream(dump) << ptx;
  if (access(kPtxas, X_OK) != 0) GTEST_SKIP() << kPtxas << " not found: skipping ptxas";
  EXPECT_TRUE(ptxas_accepts(ptx)) << "ptxas rejected the column-tiled kernel";
}

// A column-tiled kernel in bf16 (weights read through load_at as f32, sums in
// f32, each output rounded once to bf16) matches the float64 reference within
// bf16's rounding of the result.
TEST(SmallMGemmKernel, ColumnTilesInBf16MatchTheReference) {
  const int64_t m = 8, n = 16, k = 70;
  compiler::lowering::GemmLaunch launch =
      contiguous_launch(m, n, k, runtime::GemmEpilogue::kBias, /*transpose_b=*/true);
  launch.args.dtype = DType::kBF16;
  std::mt19937 rng(16);
  const testing::Buffer a = testing::random_buffer(rng, DType::kBF16, m * k, -1, 1);
  const testing::Buffer w = testing::random_buffer(rng, DType::kBF16, n * k, -1, 1);
  const testing::Buffer bias = testing::random_buffer(rng, DType::kBF16, n, -1, 1);
  const compiler::lowering::AssembledKernel kernel =
      compiler::lowering::small_m_gemm_kernel(launch, 4, /*transposed=*/false, 4);
  std::vector<testing::Buffer> outputs =
      testing::run_kernel(kernel.spec, runtime::kSimDevice, {a, w, bias});
  ASSERT_EQ(outputs.size(), 16u);
  for (int64_t row = 0; row < m; ++row) {
    for (int64_t col = 0; col < n; ++col) {
      double expected = bias.values[static_cast<size_t>(col)];
      for (int64_t i = 0; i < k; ++i) {
        expected +=
            a.values[static_cast<size_t>(row * k + i)] * w.values[static_cast<size_t>(col * k + i)];
      }
      const size_t o = static_cast<size_t>((row % 4) * 4 + col % 4);
      const double got =
          outputs[o].values[static_cast<size_t>(row * n + col - kernel.output_offsets[o])];
      ASSERT_TRUE(testing::close(got, expected, 1e-2, 1e-2))
          << "row " << row << " col " << col << ": " << got << " vs " << expected;
    }
  }
}

// With GROVE_SMALL_M_COLUMN_TILES=0 auto measures only one column per warp.
TEST(SmallMGemmKernel, ColumnTileSwitchLeavesOnlySingleColumnVariants) {
  EXPECT_EQ(compiler::lowering::small_m_variants(16, 2048).size(), 6u);
  EXPECT_EQ(compiler::lowering::small_m_variants(16, 37).size(), 3u);  // 37 is not in fours
  testing::ScopedEnv env("GROVE_SMALL_M_COLUMN_TILES", "0");
  for (const compiler::lowering::SmallMVariant& variant :
       compiler::lowering::small_m_variants(16, 2048)) {
    EXPECT_EQ(variant.columns, 1);
  }
}

// The gelu-gradient epilogue (kDGelu: the backward of linear + gelu, with B
// read K-major as the backward's weight is): every variant computes
// (A B)[m, n] * gelu'(x[m, n]) for x read at aux's place.
TEST(SmallMGemmKernel, EveryRowVariantComputesTheGeluGradientEpilogue) {
  const int64_t m = 12, n = 37, k = 70;
  const compiler::lowering::GemmLaunch launch =
      contiguous_launch(m, n, k, runtime::GemmEpilogue::kDGelu, /*transpose_b=*/false);
  ASSERT_TRUE(compiler::lowering::small_m_gemm_qualifies(launch));
  std::mt19937 rng(11);
  const testing::Buffer a = testing::random_buffer(rng, DType::kF32, m * k, -1, 1);
  const testing::Buffer w = testing::random_buffer(rng, DType::kF32, k * n, -1, 1);
  const testing::Buffer x = testing::random_buffer(rng, DType::kF32, m * n, -2, 2);
  for (int64_t rows : compiler::lowering::small_m_row_variants(m)) {
    SCOPED_TRACE(str_cat(rows, " rows per warp"));
    const compiler::lowering::AssembledKernel kernel =
        compiler::lowering::small_m_gemm_kernel(launch, rows);
    ASSERT_EQ(kernel.input_slots, (std::vector<int>{0, 1, 3}));
    EXPECT_TRUE(ptxas_accepts(compiler::codegen::emit_ptx(kernel.spec)));  // for cuda too
    std::vector<testing::Buffer> outputs =
        testing::run_kernel(kernel.spec, runtime::kSimDevice, {a, w, x});
    ASSERT_EQ(outputs.size(), static_cast<size_t>(rows));
    const double c = std::sqrt(2 / M_PI), q = 0.044715;
    for (int64_t row = 0; row < m; ++row) {
      for (int64_t col = 0; col < n; ++col) {
        const double product = reference_product(a, w, row, col, n, k, /*transpose_b=*/false);
        const double v = x.values[static_cast<size_t>(row * n + col)];
        const double t = std::tanh(c * (v + q * v * v * v));
        const double slope = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * q * v * v);
        const size_t at = static_cast<size_t>((row / rows) * rows * n + col);
        const double actual = outputs[static_cast<size_t>(row % rows)].values[at];
        ASSERT_TRUE(testing::close(actual, product * slope, 1e-4, 1e-5))
            << "row " << row << " col " << col << ": " << actual << " vs " << product * slope;
      }
    }
  }
}

class SmallMGemmOnDevice : public testing::DeviceTest {
 protected:
  void SetUp() override {
    testing::DeviceTest::SetUp();
    if (IsSkipped()) return;
    cudagraph_trees::backend::register_cudagraphs_backend();
    cudagraph_trees::reset_tree_managers();
  }
  void TearDown() override { cudagraph_trees::reset_tree_managers(); }
};

TEST_P(SmallMGemmOnDevice, MatchesTheReferenceForSeveralRowCountsAndEpilogues) {
  testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "on");
  uint32_t seed = 1;
  for (int64_t m : {1, 2, 3, 8, 16, 20, 32}) {
    for (auto [k, n] : {std::pair<int64_t, int64_t>{45, 37}, {200, 70}}) {
      for (Epilogue epilogue :
           {Epilogue::kNone, Epilogue::kBias, Epilogue::kBiasGelu, Epilogue::kBiasRelu}) {
        const std::string label =
            str_cat("m=", m, " k=", k, " n=", n, " epilogue=", epilogue_label(epilogue));
        SCOPED_TRACE(label);
        compiler::ir::Program program = linear_program(device(), m, k, n, epilogue);
        KernelReport report = report_of(program);
        ASSERT_EQ(small_m_kernels(report), 1u) << report.str();
        ASSERT_EQ(report.library_gemms, 0u) << report.str();
        testing::expect_matches_reference(program, inputs_for(program, ++seed), device(),
                                          testing::tolerance_for(DType::kF32), label);
      }
    }
  }
}

// PyTorch's default gelu as the importer writes it: mul(mul(x, 0.5),
// add(erf(mul(x, 1/sqrt 2)), 1)).
ValueId exact_gelu(ProgramBuilder& b, ValueId x) {
  ValueId scaled = b.mul(x, b.full(0.7071067811865476));
  ValueId one_plus = b.add(b.op1("erf", {scaled}), b.full(1.0));
  return b.mul(b.mul(x, b.full(0.5)), one_plus);
}

// linear(x, w, bias) then the exact gelu, on x [m, k] or on x [2, m / 2, k]
// (a linear over a 3-d activation: rows reshaped in, and back out before the gelu).
compiler::ir::Program exact_gelu_program(runtime::Device device, int64_t m, bool three_d) {
  ProgramBuilder b("exact_gelu", device);
  const int64_t k = 45, n = 70;
  ValueId x = b.input("x", three_d ? runtime::Shape{2, m / 2, k} : runtime::Shape{m, k});
  ValueId rows = three_d ? b.reshape(x, {m, k}) : x;
  ValueId y = b.linear(rows, b.input("w", {n, k}), b.input("bias", {n}), "fc");
  b.output(exact_gelu(b, three_d ? b.reshape(y, {2, m / 2, n}) : y));
  return b.build();
}

// Note [Exact gelu in the small-M GEMM]: with grove's kernel on, a linear and
// PyTorch's exact gelu are one kernel (two with GROVE_SMALL_M_EXACT_GELU=0),
// directly and through the 3-d reshapes, matching the reference; past 32 rows,
// or with the library GEMM (auto on sim), the gelu keeps its kernel.
TEST_P(SmallMGemmOnDevice, ExactGeluIsTheKernelsEpilogue) {
  uint32_t seed = 40;
  for (int64_t m : {2, 16, 24, 32, 40}) {
    for (bool three_d : {false, true}) {
      const std::string label = str_cat("m=", m, three_d ? " 3-d" : " 2-d");
      SCOPED_TRACE(label);
      compiler::ir::Program program = exact_gelu_program(device(), m, three_d);
      {
        testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "on");
        KernelReport report = report_of(program);
        EXPECT_EQ(report.kernels.size(), 1u) << report.str();
        EXPECT_EQ(small_m_kernels(report), m <= 32 ? 1u : 0u) << report.str();
        EXPECT_EQ(report.library_gemms, m <= 32 ? 0u : 1u) << report.str();
        testing::expect_matches_reference(program, inputs_for(program, ++seed), device(),
                                          testing::tolerance_for(DType::kF32), label);
        testing::ScopedEnv off("GROVE_SMALL_M_EXACT_GELU", "0");
        EXPECT_EQ(report_of(program).kernels.size(), m <= 32 ? 2u : 1u);
      }
      if (device().type == runtime::DeviceType::kSim) {
        testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "auto");
        KernelReport report = report_of(program);
        EXPECT_EQ(report.kernels.size(), 1u) << report.str();
        EXPECT_EQ(report.library_gemms, 1u) << report.str();
      }
    }
  }
}

TEST_P(SmallMGemmOnDevice, HalfPrecisionMatchesTheReference) {
  testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "on");
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(runtime::dtype_name(dtype));
    compiler::ir::Program program = linear_program(device(), 3, 45, 37, Epilogue::kBiasGelu, dtype);
    ASSERT_EQ(small_m_kernels(report_of(program)), 1u);
    testing::expect_matches_reference(program, inputs_for(program, 77), device(),
                                      testing::tolerance_for(dtype), "half");
  }
}

// matmul's B is [K, N] (read across K: strided), A read transposed, and the
// pre-activation a training forward saves (bias_gelu_aux: two outputs per row).
TEST_P(SmallMGemmOnDevice, StridedOperandsAndTheSavedPreActivationMatchTheReference) {
  testing::ScopedEnv env("GROVE_SMALL_M_GEMM", "on");
  {
    ProgramBuilder b("small_m_matmul", device());
    ValueId xt = b.input("xt", {45, 3});
    ValueId w = b.input("w", {45, 37});
    b.output(b.matmul(b.transpose(xt, 0, 1), w, "mm"));
    compiler::ir::Program program = b.build();
    ASSERT_EQ(small_m_kernels(report_of(program)), 1u) << report_of(program).str();
    testing::expect_matches_reference(program, inputs_for(program, 5), device(),
                                      testing::tolerance_for(DType::kF32), "matmul");
  }
  {
    ProgramBuilder b("small_m_gelu_aux", device());
    ValueId x = b.input("x", {2, 45});
    ValueId w = b.input("w", {40, 45});
    ValueId bias = b.input("bias", {40});
    ValueId pre = b.linear(x, w, bias, "fc");
    b.output(b.gelu(pre, "act"));
    b.output(pre);
    compiler::ir::Program program = b.build();
    compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
    KernelReport report = lowered.kernel_report();
    ASSERT_EQ(report.kernels.size(), 1u) << report.str() << lowered.describe();
    EXPECT_EQ(report.kernels[0], "small_m_gemm_bias_gelu_aux") << report.str();
    testing::expect_matches_reference(program, inputs_for(program, 6), device(),
                                      testing::tolerance_for(DType::kF32), "gelu_aux");
  }
}

// Note [One small-M choice per shape]: both backends run the kernel, bitwise equal.
TEST_P(SmallMGemmOnDevice, EagerAndCudagraphsAgreeBitwiseWithTheKernelChosen) {
  for (const char* mode : {"on", "auto"}) {
    SCOPED_TRACE(mode);
    testing::ScopedEnv env("GROVE_SMALL_M_GEMM", mode);
    compiler::ir::Program program = two_layers(device(), 1);
    compiler::backends::CompiledModel eager =
        compiler::backends::compile(program, {.backend = "eager"});
    compiler::backends::CompiledModel graphs =
        compiler::backends::compile(program, {.backend = "cudagraphs"});
    // auto: the host GEMM on sim; on cuda whatever the table says, the same for both.
    if (std::string(mode) == "on") {
      EXPECT_EQ(small_m_kernels(eager.kernel_report()), 2u) << eager.kernel_report().str();
    }
    EXPECT_EQ(eager.kernel_report().kernels, graphs.kernel_report().kernels);
    EXPECT_EQ(eager.kernel_report().library_gemms, graphs.kernel_report().library_gemms);
    GROVE_SEEDED_RNG(rng);
    for (int call = 0; call < 4; ++call) {
      compiler::TensorList inputs = {testing::random_tensor(rng, {1, 80}, device()),
                                     testing::random_tensor(rng, {96, 80}, device()),
                                     testing::random_tensor(rng, {96}, device()),
                                     testing::random_tensor(rng, {40, 96}, device()),
                                     testing::random_tensor(rng, {40}, device())};
      std::vector<float> expected = eager(inputs)[0].to_vector<float>();
      std::vector<float> got = graphs(inputs)[0].to_vector<float>();
      ASSERT_EQ(got.size(), expected.size());
      EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0)
          << "call " << call;
    }
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(SmallMGemmOnDevice);

// The tuning table, on any machine: a scratch GROVE_CACHE_DIR per test.
class GemmTuningTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/grove_tuning_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    directory_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }
  std::filesystem::path file() const { return directory_ / "gemm_tuning.json"; }
  std::filesystem::path directory_;
};

// Note [Small-M GEMM variants] on a GPU: auto times every variant of a
// 32-row GEMM (each with its own outputs: 8, 4 or 2 rows per warp) and records
// the fastest; the first version passed every variant the default's 8
// outputs, so each measurement failed and the heuristic chose the library.
TEST_F(GemmTuningTableTest, AutoOnCudaTimesEveryVariantOfAThirtyTwoRowGemm) {
  if (runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::ScopedEnv cache("GROVE_CACHE_DIR", directory_.c_str());
  testing::ScopedEnv mode("GROVE_SMALL_M_GEMM", "auto");
  compiler::lowering::clear_small_m_gemm_choices();
  clear_recent_log();
  compiler::lowering::lower(linear_program(runtime::kCudaDevice, 32, 80, 96, Epilogue::kBias));
  compiler::lowering::clear_small_m_gemm_choices();
  EXPECT_EQ(recent_log().find("could not time"), std::string::npos) << recent_log();
  std::stringstream text;
  text << std::ifstream(file()).rdbuf();
  const std::string table = text.str();
  EXPECT_NE(table.find("|m=32,n=96,k=80|"), std::string::npos) << table;
  EXPECT_NE(table.find("\"grove_rows\""), std::string::npos) << table;
  EXPECT_EQ(table.find("\"grove_rows\": 0"), std::string::npos) << table;
}

// Note [Small-M GEMMs measured past 32 rows] on a GPU: auto times grove's
// kernel for a 48-row GEMM (nn.TransformerDecoder's memory projection at
// batch 1) against the library and records it, and the lowered program
// matches the reference whichever it chose.
TEST_F(GemmTuningTableTest, AutoOnCudaMeasuresAFortyEightRowGemm) {
  if (runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::ScopedEnv cache("GROVE_CACHE_DIR", directory_.c_str());
  testing::ScopedEnv mode("GROVE_SMALL_M_GEMM", "auto");
  compiler::lowering::clear_small_m_gemm_choices();
  compiler::ir::Program program =
      linear_program(runtime::kCudaDevice, 48, 256, 512, Epilogue::kBias);
  testing::expect_matches_reference(program, inputs_for(program, 48), runtime::kCudaDevice,
                                    testing::tolerance_for(DType::kF32), "m=48");
  compiler::lowering::clear_small_m_gemm_choices();
  std::stringstream text;
  text << std::ifstream(file()).rdbuf();
  EXPECT_NE(text.str().find("|m=48,n=512,k=256|"), std::string::npos) << text.str();
}

// Note [Tiled picks by a margin]: a tiled time 10% under the generated
// kernel's is the pick with no margin or a 5% one, not with a 20% one; a
// tiled time under neither other is never the pick.
TEST_F(GemmTuningTableTest, TiledPicksNeedTheirMargin) {
  compiler::lowering::GemmTuningEntry entry;
  entry.grove_us = 10, entry.library_us = 20;
  entry.tiled_us = 9, entry.tiled_rows = 8, entry.tiled_columns = 2;
  EXPECT_TRUE(entry.tiled_fastest());
  EXPECT_TRUE(entry.tiled_fastest(0.05));
  EXPECT_FALSE(entry.tiled_fastest(0.2));
  entry.tiled_us = 10.5;
  EXPECT_FALSE(entry.tiled_fastest());
}

TEST_F(GemmTuningTableTest, DefaultPathFollowsGroveCacheDir) {
  testing::ScopedEnv env("GROVE_CACHE_DIR", directory_.c_str());
  EXPECT_EQ(GemmTuningTable::default_path(), file());
}

TEST_F(GemmTuningTableTest, KeyNamesTheGpuTheShapeAndTheEpilogue) {
  runtime::GemmArgs args;
  args.dtype = DType::kBF16;
  args.m = 1, args.n = 512, args.k = 256;
  args.transpose_b = true;
  args.epilogue = runtime::GemmEpilogue::kBiasGelu;
  EXPECT_EQ(compiler::lowering::small_m_gemm_tuning_key("NVIDIA H200", args),
            "NVIDIA H200|bf16|m=1,n=512,k=256|ta=0,tb=1|bias_gelu|v7");
}

TEST_F(GemmTuningTableTest, StoredEntriesAreFoundAgainByKeyAfterARead) {
  {
    GemmTuningTable table(file());
    table.load();
    EXPECT_EQ(table.size(), 0u);  // no file yet
    table.store("gpu|f32|a", GemmTuningEntry{1.5, 5.0});
    table.store("gpu|f32|b", GemmTuningEntry{7.0, 4.0});
  }
  GemmTuningTable table(file());
  table.load();
  ASSERT_EQ(table.size(), 2u);
  ASSERT_TRUE(table.find("gpu|f32|a").has_value());
  EXPECT_DOUBLE_EQ(table.find("gpu|f32|a")->grove_us, 1.5);
  EXPECT_TRUE(table.find("gpu|f32|a")->grove_faster());
  EXPECT_FALSE(table.find("gpu|f32|b")->grove_faster());
  EXPECT_FALSE(table.find("other gpu|f32|a").has_value());
}

TEST_F(GemmTuningTableTest, TheFastestVariantIsKeptAndAnEntryWithoutOneReadsAsTheDefault) {
  std::ofstream(file()) << R"({"version": 1, "entries": {
      "old": {"grove_us": 1, "library_us": 2},
      "bad": {"grove_us": 1, "library_us": 2, "grove_rows": -4}}})";
  {
    GemmTuningTable table(file());
    table.load();
    EXPECT_EQ(table.size(), 1u);  // "bad" skipped with a warning
    ASSERT_TRUE(table.find("old").has_value());
    EXPECT_EQ(table.find("old")->grove_rows, 0);
    table.store("new", GemmTuningEntry{1, 2, 4});
  }
  GemmTuningTable table(file());
  table.load();
  ASSERT_TRUE(table.find("new").has_value());
  EXPECT_EQ(table.find("new")->grove_rows, 4);
  EXPECT_EQ(table.find("old")->grove_rows, 0);
}

TEST_F(GemmTuningTableTest, StoreKeepsEntriesAnotherProcessWrote) {
  GemmTuningTable first(file());
  first.load();
  GemmTuningTable second(file());
  second.load();
  first.store("one", GemmTuningEntry{1, 2});
  second.store("two", GemmTuningEntry{3, 4});
  GemmTuningTable table(file());
  table.load();
  EXPECT_EQ(table.size(), 2u);
  EXPECT_TRUE(table.find("one").has_value());
}

TEST_F(GemmTuningTableTest, CorruptFileIsIgnoredWithAWarningAndRewritten) {
  for (const char* text : {"{\"version\": 1, \"entries\": {\"k\": ", "[1, 2]", "\x01\x02garbage",
                           "{\"version\": 7, \"entries\": {}}"}) {
    SCOPED_TRACE(text);
    std::ofstream(file(), std::ios::trunc) << text;
    clear_recent_log();
    GemmTuningTable table(file());
    table.load();  // no throw
    EXPECT_EQ(table.size(), 0u);
    EXPECT_NE(recent_log().find("GEMM tuning table"), std::string::npos) << recent_log();
    table.store("k", GemmTuningEntry{1, 2});
    GemmTuningTable reread(file());
    reread.load();
    EXPECT_EQ(reread.size(), 1u);
  }
}

TEST_F(GemmTuningTableTest, EntriesWithoutValidTimesAreSkipped) {
  std::ofstream(file()) << R"({"version": 1, "entries": {
      "good": {"grove_us": 1, "library_us": 2},
      "negative": {"grove_us": -1, "library_us": 2},
      "text": {"grove_us": "fast", "library_us": 2},
      "missing": {"grove_us": 1}}})";
  clear_recent_log();
  GemmTuningTable table(file());
  table.load();
  EXPECT_EQ(table.size(), 1u);
  EXPECT_TRUE(table.find("good").has_value());
  EXPECT_NE(recent_log().find("entry 'negative'"), std::string::npos) << recent_log();
}

TEST_F(GemmTuningTableTest, UnwritableDirectoryWarnsAndKeepsTheEntryInMemory) {
  const std::filesystem::path blocked = directory_ / "not_a_directory";
  std::ofstream(blocked) << "a file";
  GemmTuningTable table(blocked / "gemm_tuning.json");
  clear_recent_log();
  table.store("k", GemmTuningEntry{1, 2});  // no throw
  EXPECT_TRUE(table.find("k").has_value());
  EXPECT_NE(recent_log().find("GEMM tuning table"), std::string::npos) << recent_log();
}

TEST_F(GemmTuningTableTest, TiledTimesRoundTripAndAPartialTiledEntryIsSkipped) {
  std::ofstream(file()) << R"({"version": 1, "entries": {
      "old": {"grove_us": 3, "library_us": 2},
      "half": {"grove_us": 3, "library_us": 2, "tiled_us": 1}}})";
  {
    GemmTuningTable table(file());
    clear_recent_log();
    table.load();
    EXPECT_EQ(table.size(), 1u);  // "half" lacks its tile
    EXPECT_NE(recent_log().find("entry 'half'"), std::string::npos) << recent_log();
    EXPECT_FALSE(table.find("old")->tiled_fastest());
    GemmTuningEntry entry{3, 2, 8, 1};
    entry.tiled_us = 1.5;
    entry.tiled_rows = 16;
    entry.tiled_columns = 2;
    entry.tiled_warps = 8;
    table.store("tiled", entry);
  }
  GemmTuningTable table(file());
  table.load();
  ASSERT_TRUE(table.find("tiled").has_value());
  EXPECT_DOUBLE_EQ(table.find("tiled")->tiled_us, 1.5);
  EXPECT_EQ(table.find("tiled")->tiled_rows, 16);
  EXPECT_EQ(table.find("tiled")->tiled_columns, 2);
  EXPECT_EQ(table.find("tiled")->tiled_warps, 8);
  EXPECT_TRUE(table.find("tiled")->tiled_fastest());
  EXPECT_EQ(table.find("old")->tiled_us, 0.0);
}

// Note [Small-M tiled GEMM]: which GEMMs cuda's tiled kernel takes.
TEST(SmallMTiledGemm, QualifiesForLinearWeightsOfUpToSixtyFourRowsInWholeVectors) {
  runtime::GemmArgs g;
  g.transpose_b = true;
  g.m = 16, g.n = 36, g.k = 64, g.lda = 64, g.ldb = 64, g.ldc = 36;
  g.epilogue = runtime::GemmEpilogue::kBiasGelu;
  EXPECT_TRUE(runtime::small_m_tiled_gemm_qualifies(g));
  runtime::GemmArgs other = g;
  other.m = 65;
  EXPECT_FALSE(runtime::small_m_tiled_gemm_qualifies(other));
  other = g;
  other.k = other.lda = other.ldb = 66;  // not whole 16-byte vectors of f32
  EXPECT_FALSE(runtime::small_m_tiled_gemm_qualifies(other));
  other = g;
  other.dtype = DType::kBF16;  // 64 is whole vectors of 8
  EXPECT_TRUE(runtime::small_m_tiled_gemm_qualifies(other));
  other.k = other.lda = other.ldb = 36;  // 4 1/2 vectors of bf16
  EXPECT_FALSE(runtime::small_m_tiled_gemm_qualifies(other));
  other = g;
  other.transpose_b = false;  // W [K, N]: rows of W are not K-contiguous
  EXPECT_FALSE(runtime::small_m_tiled_gemm_qualifies(other));
  other = g;
  other.epilogue = runtime::GemmEpilogue::kBiasGeluAux;
  EXPECT_FALSE(runtime::small_m_tiled_gemm_qualifies(other));
  other = g;
  other.beta = 1.0f;
  EXPECT_FALSE(runtime::small_m_tiled_gemm_qualifies(other));
}

// Note [Small-M tiled GEMM over a K x N weight]: f32 GEMMs whose weight is
// stored [K, N] (x @ W) take the kernel's [K, N] form, in whole vectors of N.
TEST(SmallMTiledGemm, KByNFormQualifiesForF32WeightsInWholeVectorsOfN) {
  runtime::GemmArgs g;
  g.transpose_b = false;
  g.m = 32, g.n = 768, g.k = 256, g.lda = 256, g.ldb = 768, g.ldc = 768;
  g.epilogue = runtime::GemmEpilogue::kBias;
  EXPECT_TRUE(runtime::small_m_tiled_gemm_kn_qualifies(g));
  EXPECT_FALSE(runtime::small_m_tiled_gemm_qualifies(g));  // the [N, K] form's
  runtime::GemmArgs other = g;
  other.transpose_b = true;
  other.ldb = 256;
  EXPECT_FALSE(runtime::small_m_tiled_gemm_kn_qualifies(other));
  other = g;
  other.n = other.ldb = other.ldc = 770;  // N not whole vectors of 4
  EXPECT_FALSE(runtime::small_m_tiled_gemm_kn_qualifies(other));
  other = g;
  other.k = other.lda = 258;  // A's rows not whole vectors
  EXPECT_FALSE(runtime::small_m_tiled_gemm_kn_qualifies(other));
  other = g;
  other.dtype = DType::kBF16;  // f32 only
  EXPECT_FALSE(runtime::small_m_tiled_gemm_kn_qualifies(other));
  other = g;
  other.m = 65;
  EXPECT_FALSE(runtime::small_m_tiled_gemm_kn_qualifies(other));
  other = g;
  other.transpose_a = true;
  EXPECT_FALSE(runtime::small_m_tiled_gemm_kn_qualifies(other));
  other = g;
  other.epilogue = runtime::GemmEpilogue::kBiasGeluAux;
  EXPECT_FALSE(runtime::small_m_tiled_gemm_kn_qualifies(other));
}

// The steps of a cuda program lowered without a device (no measurement).
std::vector<compiler::lowering::Step> cuda_steps(const compiler::ir::Program& program) {
  compiler::lowering::ScheduleOptions options;
  options.load_kernels = false;
  return compiler::lowering::schedule_program(program, options).steps;
}

// GROVE_SMALL_M_TILED=RxC forces that tile on cuda: the GEMM is a library
// step whose arguments name the tile, up to 64 rows, unless the mode is off
// or the GEMM does not qualify.
TEST(SmallMTiledGemm, ForcedTileIsALibraryStepNamingIt) {
  testing::ScopedEnv tile("GROVE_SMALL_M_TILED", "8x2");
  auto gemm_tile = [](int64_t m, int64_t k, DType dtype) {
    std::pair<int32_t, int32_t> found{-1, -1};
    for (const compiler::lowering::Step& step :
         cuda_steps(linear_program(runtime::kCudaDevice, m, k, 96, Epilogue::kBiasGelu, dtype))) {
      if (step.kind == compiler::lowering::StepKind::kGemm) {
        found = {step.gemm.args.tile_rows, step.gemm.args.tile_columns};
      }
    }
    return found;  // {-1, -1}: no library step
  };
  {
    testing::ScopedEnv mode("GROVE_SMALL_M_GEMM", "auto");
    EXPECT_EQ(gemm_tile(16, 64, DType::kF32), std::make_pair(8, 2));
    EXPECT_EQ(gemm_tile(48, 64, DType::kF32), std::make_pair(8, 2));
    EXPECT_EQ(gemm_tile(64, 64, DType::kBF16), std::make_pair(8, 2));
    EXPECT_EQ(gemm_tile(65, 64, DType::kF32), std::make_pair(0, 0));  // the library's own
    EXPECT_EQ(gemm_tile(16, 66, DType::kF32), std::make_pair(0, 0));  // K: no whole vectors
  }
  {
    testing::ScopedEnv mode("GROVE_SMALL_M_GEMM", "off");
    EXPECT_EQ(gemm_tile(16, 64, DType::kF32), std::make_pair(0, 0));
  }
}

// Note [Small-M tiled GEMM over a K x N weight]: x @ W with W [K, N] takes
// the forced tile too, unless GROVE_SMALL_M_TILED_KN=0.
TEST(SmallMTiledGemm, ForcedTileTakesAKByNWeightUnlessSwitchedOff) {
  testing::ScopedEnv tile("GROVE_SMALL_M_TILED", "8x1");
  testing::ScopedEnv mode("GROVE_SMALL_M_GEMM", "auto");
  auto gemm_args = [] {
    ProgramBuilder b("kn_tiled", runtime::kCudaDevice);
    b.output(b.matmul(b.input("x", {16, 64}), b.input("w", {64, 96}), "mm"));
    runtime::GemmArgs seen;
    size_t gemms = 0;
    for (const compiler::lowering::Step& step : cuda_steps(b.build())) {
      if (step.kind != compiler::lowering::StepKind::kGemm) continue;
      ++gemms;
      seen = step.gemm.args;
    }
    EXPECT_EQ(gemms, 1u);
    return seen;
  };
  {
    testing::ScopedEnv kn("GROVE_SMALL_M_TILED_KN", "0");
    EXPECT_EQ(gemm_args().tile_rows, 0);
  }
  testing::ScopedEnv kn("GROVE_SMALL_M_TILED_KN", nullptr);  // the default: on
  const runtime::GemmArgs seen = gemm_args();
  EXPECT_FALSE(seen.transpose_b);
  EXPECT_EQ(seen.tile_rows, 8);
  EXPECT_EQ(seen.tile_columns, 1);
  EXPECT_FALSE(seen.tile_transposed);
  EXPECT_TRUE(runtime::small_m_tiled_gemm_kn_qualifies(seen));
}

// "RxCxW" names the warps too; "RxC" leaves them to K (0).
TEST(SmallMTiledGemm, ForcedTileNamesItsWarps) {
  for (const auto& [text, warps] :
       {std::pair<const char*, int32_t>{"16x2x8", 8}, std::pair<const char*, int32_t>{"16x2x4", 4},
        std::pair<const char*, int32_t>{"16x2", 0}}) {
    testing::ScopedEnv tile("GROVE_SMALL_M_TILED", text);
    int32_t seen = -1;
    for (const compiler::lowering::Step& step :
         cuda_steps(linear_program(runtime::kCudaDevice, 16, 64, 96, Epilogue::kBias))) {
      if (step.kind == compiler::lowering::StepKind::kGemm) seen = step.gemm.args.tile_warps;
    }
    EXPECT_EQ(seen, warps) << text;
  }
  EXPECT_TRUE(runtime::small_m_tile_known({8, 1, 0}));
  EXPECT_TRUE(runtime::small_m_tile_known({8, 1, 8}));
  EXPECT_FALSE(runtime::small_m_tile_known({8, 1, 2}));
  EXPECT_FALSE(runtime::small_m_tile_known({2, 1, 4}));
}

// Note [Small-N GEMMs as their transpose]: a GEMM of many rows and at most
// 64 columns takes the forced tile as its transpose.
TEST(SmallMTiledGemm, ForcedTileRunsASmallNGemmAsItsTranspose) {
  testing::ScopedEnv tile("GROVE_SMALL_M_TILED", "4x2");
  {
    testing::ScopedEnv off("GROVE_SMALL_M_TILED_TRANSPOSED", "0");  // the default: not taken
    for (const compiler::lowering::Step& step :
         cuda_steps(linear_program(runtime::kCudaDevice, 100, 64, 12, Epilogue::kBias))) {
      if (step.kind == compiler::lowering::StepKind::kGemm) EXPECT_EQ(step.gemm.args.tile_rows, 0);
    }
  }
  testing::ScopedEnv transposed("GROVE_SMALL_M_TILED_TRANSPOSED", "1");
  runtime::GemmArgs seen;
  size_t gemms = 0;
  for (const compiler::lowering::Step& step :
       cuda_steps(linear_program(runtime::kCudaDevice, 100, 64, 12, Epilogue::kBias))) {
    if (step.kind != compiler::lowering::StepKind::kGemm) continue;
    ++gemms;
    seen = step.gemm.args;
  }
  ASSERT_EQ(gemms, 1u);
  EXPECT_EQ(seen.tile_rows, 4);
  EXPECT_EQ(seen.tile_columns, 2);
  EXPECT_TRUE(seen.tile_transposed);
  EXPECT_TRUE(runtime::small_n_tiled_gemm_qualifies(seen));
  EXPECT_FALSE(runtime::small_m_tiled_gemm_qualifies(seen));  // 100 rows
  runtime::GemmArgs wide = seen;
  wide.n = wide.ldc = 65;
  EXPECT_FALSE(runtime::small_n_tiled_gemm_qualifies(wide));
  runtime::GemmArgs transposed_a = seen;
  transposed_a.transpose_a = true;
  EXPECT_FALSE(runtime::small_n_tiled_gemm_qualifies(transposed_a));
}

// Sim keeps its kernels whatever the switch says (the host GEMM applies no
// exact gelu, and nothing there is tuned).
TEST(SmallMTiledGemm, ForcedTileLeavesSimsKernels) {
  testing::ScopedEnv tile("GROVE_SMALL_M_TILED", "16x1");
  testing::ScopedEnv mode("GROVE_SMALL_M_GEMM", "on");
  KernelReport report = report_of(linear_program(runtime::kSimDevice, 16, 64, 96, Epilogue::kBias));
  EXPECT_EQ(small_m_kernels(report), 1u) << report.str();
  EXPECT_EQ(report.library_gemms, 0u) << report.str();
}

// Note [Exact gelu in the small-M GEMM]: the tiled kernel applies the exact
// gelu after the bias, so the linear and its gelu stay one step.
TEST(SmallMTiledGemm, ExactGeluJoinsTheForcedTile) {
  testing::ScopedEnv tile("GROVE_SMALL_M_TILED", "16x2");
  testing::ScopedEnv mode("GROVE_SMALL_M_GEMM", "on");
  ProgramBuilder b("exact_gelu_tiled", runtime::kCudaDevice);
  ValueId y = b.linear(b.input("x", {16, 64}), b.input("w", {96, 64}), b.input("bias", {96}), "fc");
  b.output(exact_gelu(b, y));
  std::vector<compiler::lowering::Step> steps = cuda_steps(b.build());
  size_t gemms = 0, kernels = 0;
  for (const compiler::lowering::Step& step : steps) {
    kernels += step.kind == compiler::lowering::StepKind::kKernel;
    if (step.kind != compiler::lowering::StepKind::kGemm) continue;
    ++gemms;
    EXPECT_EQ(step.gemm.args.tile_rows, 16);
    EXPECT_TRUE(step.gemm.args.tile_exact_gelu);
    EXPECT_EQ(step.gemm.args.epilogue, runtime::GemmEpilogue::kBias);
  }
  EXPECT_EQ(gemms, 1u);
  EXPECT_EQ(kernels, 0u);
}

TEST(SmallMTiledGemm, UnknownTileNamesTheTiles) {
  testing::ScopedEnv tile("GROVE_SMALL_M_TILED", "3x3");
  testing::ScopedEnv mode("GROVE_SMALL_M_GEMM", "on");
  testing::expect_error<ConfigError>(
      [] { cuda_steps(linear_program(runtime::kCudaDevice, 16, 64, 96, Epilogue::kBias)); },
      {"GROVE_SMALL_M_TILED='3x3'", "8x2x4", "16x1x8", "RxCxW", "0"});
}

}  // namespace
}  // namespace grove
