// Note [Reduction prologues] (compiler/lowering/reduction_prologue.h): a
// reduction computes and writes the elementwise value it reduces, and column
// reductions run one row per thread on cuda (Note [Thread-per-row
// reductions]). The fused kernels equal the unfused path
// (GROVE_FUSE_REDUCTION_PROLOGUES=0) bitwise and the reference within
// tolerance, and the kernel counts drop by the numbers asserted here.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "compiler/autodiff/training_programs.h"
#include "compiler/ir/builder.h"
#include "compiler/lowering/lower.h"
#include "runtime/device_context.h"
#include "tests/common/test_util.h"
#include "tests/compiler/lowering/lowering_test_util.h"
#include "tests/training/benchmark_models.h"

namespace grove {
namespace {

using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using compiler::lowering::KernelReport;
using compiler::lowering::LoweredProgram;
using runtime::DType;

// The backward of one linear + gelu layer as autodiff writes it: gelu's
// gradient read by the next GEMM (before the sum, in program order), by the
// weight gradient's GEMM and by the bias gradient's column sum.
compiler::ir::Program gelu_gradient_and_bias_gradient(runtime::Device device, int64_t rows,
                                                      int64_t features) {
  ProgramBuilder b("gelu_gradient_and_bias_gradient", device);
  ValueId g = b.input("g", {rows, features}, DType::kF32);
  ValueId pre = b.input("pre", {rows, features}, DType::kF32);
  ValueId w = b.input("w", {features, 24}, DType::kF32);
  ValueId x = b.input("x", {rows, 24}, DType::kF32);
  ValueId gradient = b.op1("gelu_backward", {g, pre});
  b.output(b.matmul(gradient, w, "input_grad"));
  b.output(b.matmul(b.transpose(gradient, 0, 1), x, "weight_grad"));
  b.output(b.sum(gradient, {0}, /*keepdim=*/false, "bias_grad"));
  return b.build();
}

LoweredProgram lower_training(const compiler::ir::Program& program) {
  compiler::lowering::LowerOptions options;
  options.mode = compiler::ops::ExecMode::kTraining;
  return compiler::lowering::lower(program, options);
}

std::vector<runtime::Tensor> run(const LoweredProgram& lowered,
                                 const testing::HostTensorList& inputs, runtime::Device device) {
  std::vector<runtime::Tensor> tensors;
  for (const auto& input : inputs) tensors.push_back(testing::to_device(input, device));
  return lowered.function().call(tensors);
}

// `skip`: an output whose summation order the switch changes (on cuda the
// unfused column sum is one block per column, the fused one a thread per
// column); it is checked against the reference instead.
void expect_bitwise_equal(const std::vector<runtime::Tensor>& fused,
                          const std::vector<runtime::Tensor>& unfused, int skip = -1) {
  ASSERT_EQ(fused.size(), unfused.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    if (static_cast<int>(i) == skip) continue;
    testing::HostTensor a = testing::to_host(fused[i]);
    testing::HostTensor b = testing::to_host(unfused[i]);
    ASSERT_EQ(a.data.size(), b.data.size()) << "output " << i;
    for (size_t k = 0; k < a.data.size(); ++k) {
      ASSERT_EQ(std::memcmp(&a.data[k], &b.data[k], sizeof(double)), 0)
          << "output " << i << " element " << k << ": " << a.data[k] << " vs " << b.data[k];
    }
  }
}

class ReductionPrologue : public testing::DeviceTest {};

TEST_P(ReductionPrologue, GeluGradientAndItsColumnSumAreOneKernelEqualToTheUnfusedPath) {
  // GEMM epilogues off: the bias gradient is a `sum` on every device (as on
  // cuda, where the GEMM cannot yield it) and gelu's gradient is a kernel.
  testing::ScopedEnv no_epilogues("GROVE_GEMM_EPILOGUES", "0");
  // The product stays the device's BLAS: on cuda a 7-row GEMM would take
  // grove's small-M kernel, another kernel in the report (GPU run of 35ce4d1).
  testing::ScopedEnv library_gemms("GROVE_SMALL_M_GEMM", "off");
  for (auto [rows, features] : {std::pair<int64_t, int64_t>{32, 512}, {7, 40}, {300, 96}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << features);
    compiler::ir::Program program = gelu_gradient_and_bias_gradient(device(), rows, features);
    testing::HostTensorList inputs = testing::random_inputs(program, 22);
    LoweredProgram fused = [&] {
      testing::ScopedEnv on("GROVE_FUSE_REDUCTION_PROLOGUES", "1");  // off by default
      return lower_training(program);
    }();
    KernelReport fused_report = fused.kernel_report();
    ASSERT_EQ(fused_report.kernels, std::vector<std::string>{"gelu_backward_sum"})
        << fused_report.str();
    std::vector<runtime::Tensor> fused_outputs = run(fused, inputs, device());
    std::vector<runtime::Tensor> unfused_outputs;
    {
      testing::ScopedEnv off("GROVE_FUSE_REDUCTION_PROLOGUES", "0");
      LoweredProgram unfused = lower_training(program);
      KernelReport unfused_report = unfused.kernel_report();
      EXPECT_EQ(unfused_report.kernels, (std::vector<std::string>{"gelu_backward", "sum"}))
          << unfused_report.str();
      unfused_outputs = run(unfused, inputs, device());
    }
    // The same expressions; on sim each column is summed in increasing row
    // order in both, on cuda only the fused kernel keeps that order.
    expect_bitwise_equal(fused_outputs, unfused_outputs, device().is_cuda() ? 2 : -1);
    testing::expect_matches_reference(program, inputs, device(),
                                      testing::tolerance_for(DType::kF32),
                                      "gelu_gradient_and_bias_gradient");
  }
}

TEST_P(ReductionPrologue, ResidualAddAndLayerNormAreOneKernelEqualToTheUnfusedPath) {
  ProgramBuilder b("residual_layer_norm", device());
  ValueId x = b.input("x", {6, 48}, DType::kF32);
  ValueId y = b.input("y", {6, 48}, DType::kF32);
  ValueId weight = b.input("weight", {48}, DType::kF32);
  ValueId bias = b.input("bias", {48}, DType::kF32);
  ValueId residual = b.add(x, y);
  b.output(b.layer_norm(residual, weight, bias, 1e-5));
  b.output(b.mul(residual, residual));
  compiler::ir::Program program = b.build();
  testing::HostTensorList inputs = testing::random_inputs(program, 23);
  LoweredProgram fused = [&] {
    testing::ScopedEnv on("GROVE_FUSE_REDUCTION_PROLOGUES", "1");  // off by default
    return compiler::lowering::lower(program);
  }();
  EXPECT_EQ(fused.kernel_report().kernels.size(), 2u) << fused.kernel_report().str();
  std::vector<runtime::Tensor> fused_outputs = run(fused, inputs, device());
  testing::ScopedEnv off("GROVE_FUSE_REDUCTION_PROLOGUES", "0");
  LoweredProgram unfused = compiler::lowering::lower(program);
  EXPECT_EQ(unfused.kernel_report().kernels.size(), 3u) << unfused.kernel_report().str();
  expect_bitwise_equal(fused_outputs, run(unfused, inputs, device()));
  testing::expect_matches_reference(program, inputs, device(), testing::tolerance_for(DType::kF32),
                                    "residual_layer_norm");
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(ReductionPrologue);

// The kernels of `model`'s backward lowered with GROVE_FUSE_REDUCTION_PROLOGUES=`prologues`.
size_t backward_kernels(const training::testing::ModelWithLoss& model, const char* prologues) {
  testing::ScopedEnv env("GROVE_FUSE_REDUCTION_PROLOGUES", prologues);
  compiler::autodiff::TrainingPrograms programs =
      compiler::autodiff::build_training_programs(model.program, model.loss);
  return lower_training(programs.backward).kernel_report().kernels.size();
}

// The mlp16x512 step's backward with the bias gradients as `sum` kernels (as
// on cuda): each of the 16 layers' gelu gradient and bias gradient become one
// kernel (the last layer's with the loss gradient), 33 -> 17 (the loss
// gradient's scale is computed where it is used: Note [Small values computed
// per element]).
TEST(ReductionPrologueCounts, MlpBackwardLaunchesSixteenFewerKernels) {
  testing::ScopedEnv no_epilogues("GROVE_GEMM_EPILOGUES", "0");
  const auto model = training::testing::mlp_with_mse(32, runtime::kSimDevice);
  EXPECT_EQ(backward_kernels(model, "0"), 33u);
  EXPECT_EQ(backward_kernels(model, "1"), 17u);
}

// gpt4x256's backward with GEMM epilogues (sim's default): per block the
// residual gradient's add and the following bias-gradient sum are one kernel.
TEST(ReductionPrologueCounts, GptBackwardLaunchesFourFewerKernels) {
  const auto model = training::testing::gpt_with_next_token_loss(2, 8, runtime::kSimDevice);
  // (122, not 131: two concats compute a pointwise operand in their part
  // kernel, Note [Concat parts compute their operand]; each concat of two
  // equal parts is one kernel, Note [One kernel for a concat of equal parts];
  // four per-row sums are applied in their reduction's kernel, Note [Per-row
  // values broadcast in their reduction's kernel]; and the loss gradient's
  // scale is computed where it is used, Note [Small values computed per element].)
  EXPECT_EQ(backward_kernels(model, "0"), 122u);
  EXPECT_EQ(backward_kernels(model, "1"), 118u);
}

// Note [Reduction prologues]: unset, the switch fuses into row reductions
// only. gpt4x256's forward (its layer_norms are row reductions: each residual
// add runs inside the next one, as with 1) and its backward (the column sums
// of the bias gradients keep their producers apart, as with 0: no reduction
// runs a row per thread).
TEST(ReductionPrologueCounts, RowReductionsTakeProloguesByDefault) {
  const auto model = training::testing::gpt_with_next_token_loss(2, 8, runtime::kSimDevice);
  auto forward_kernels = [&](const char* prologues) {
    testing::ScopedEnv env("GROVE_FUSE_REDUCTION_PROLOGUES", prologues);
    return compiler::lowering::lower(model.program).kernel_report().kernels.size();
  };
  EXPECT_EQ(forward_kernels(""), forward_kernels("1"));
  EXPECT_LT(forward_kernels(""), forward_kernels("0"));
  EXPECT_EQ(backward_kernels(model, ""), backward_kernels(model, "0"));
}

// Note [Reduction prologues] under a pointwise root: LLaMA's pre-norm
// residual add, read by the next rms_norm written out (one kernel: Note
// [Per-row values broadcast in their reduction's kernel]) and by the next
// residual add, runs inside the norm's kernel, which writes it: two kernels
// by default, three with the switch at 0; values match the reference.
TEST(ReductionPrologueCounts, ResidualAddRunsInsideTheRmsNormAfterIt) {
  for (const char* prologues : {"", "0"}) {
    SCOPED_TRACE(prologues);
    testing::ScopedEnv env("GROVE_FUSE_REDUCTION_PROLOGUES", prologues);
    compiler::ir::ProgramBuilder b("residual_rms_norm", runtime::kSimDevice);
    compiler::ir::ValueId x = b.input("x", {2, 3, 16});
    compiler::ir::ValueId sum = b.add(x, b.input("attention", {2, 3, 16}));
    compiler::ir::ValueId scale =
        b.rsqrt(b.add(b.mean(b.mul(sum, sum), {2}, /*keepdim=*/true), b.full(1e-6)));
    b.output(b.mul(b.mul(sum, scale), b.input("weight", {16})));
    b.output(b.add(sum, b.input("mlp", {2, 3, 16})));
    compiler::ir::Program program = b.build();
    const size_t kernels = compiler::lowering::lower(program).kernel_report().kernels.size();
    EXPECT_EQ(kernels, *prologues == '\0' ? 2u : 3u);
    testing::expect_matches_reference(
        program, testing::random_inputs(program, 20261126), runtime::kSimDevice,
        testing::tolerance_for(runtime::DType::kF32), "residual_rms_norm");
  }
}

TEST(ReductionPrologueCounts, SwitchRejectsOtherValues) {
  testing::ScopedEnv bad("GROVE_FUSE_REDUCTION_PROLOGUES", "yes");
  testing::expect_error<ConfigError>(
      [] { compiler::lowering::lower(gelu_gradient_and_bias_gradient(runtime::kSimDevice, 4, 8)); },
      {"GROVE_FUSE_REDUCTION_PROLOGUES='yes'", "expected 1"});
}

}  // namespace
}  // namespace grove
