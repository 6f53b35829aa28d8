// GEMM epilogues that keep a training step's work inside its GEMMs (Note [GEMM
// auxiliary output] and Note [GEMM bias gradients] in runtime/blas.h): the
// lowering picks them where the device's BLAS runs them, and results match the
// float64 reference on sim and on cuda. The host GEMM's own epilogue tests are
// in tests/runtime/host_gemm_test.cc.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "compiler/ir/builder.h"
#include "compiler/lowering/lower.h"
#include "runtime/error.h"
#include "tests/common/test_util.h"
#include "tests/compiler/lowering/lowering_test_util.h"

namespace grove {
namespace {

using compiler::ir::ProgramBuilder;
using compiler::ir::ValueId;
using compiler::lowering::KernelReport;
using runtime::DType;

// linear(x, w, b) -> gelu, returning the gelu's result and (as a training
// forward saves it) the linear's pre-activation too.
compiler::ir::Program linear_gelu_saving_pre_activation(runtime::Device device, int64_t rows,
                                                        int64_t features, DType dtype) {
  ProgramBuilder b("linear_gelu_aux", device);
  ValueId x = b.input("x", {rows, 24}, dtype);
  ValueId w = b.input("w", {features, 24}, dtype);
  ValueId bias = b.input("bias", {features}, dtype);
  ValueId pre = b.linear(x, w, bias, "fc");
  b.output(b.gelu(pre, "act"));
  b.output(pre);
  return b.build();
}

// The same through a view, as an ATen forward has it (Note [GEMM auxiliary
// output in lowering], through a view): the linear's [6, features] rows read
// as [2, 3, features] by the gelu and saved in that shape.
compiler::ir::Program linear_gelu_viewed_saving_pre_activation(runtime::Device device,
                                                               int64_t features, DType dtype) {
  ProgramBuilder b("linear_gelu_aux_viewed", device);
  ValueId x = b.input("x", {6, 24}, dtype);
  ValueId w = b.input("w", {features, 24}, dtype);
  ValueId bias = b.input("bias", {features}, dtype);
  ValueId pre = b.reshape(b.linear(x, w, bias, "fc"), {2, 3, features});
  b.output(b.gelu(pre, "act"));
  b.output(pre);
  return b.build();
}

// The weight and bias gradients of a linear over [2, 3, 24] -> [2, 3, 16]
// inputs, as autodiff writes them: dW = matmul(transpose(G rows), X rows) and
// db = sum(G) over the leading dims (keepdim, then reshaped). G = mul(g, s) so
// that it is computed by a kernel, as a backward's gradients are.
compiler::ir::Program weight_and_bias_gradients(runtime::Device device, DType dtype) {
  ProgramBuilder b("linear_gradients", device);
  ValueId g = b.input("g", {2, 3, 16}, dtype);
  ValueId s = b.input("s", {2, 3, 16}, dtype);
  ValueId x = b.input("x", {2, 3, 24}, dtype);
  ValueId gradient = b.mul(g, s, "gradient");
  ValueId rows = b.reshape(gradient, {6, 16});
  b.output(b.matmul(b.transpose(rows, 0, 1), b.reshape(x, {6, 24}), "weight_grad"));
  b.output(b.reshape(b.sum(gradient, {0, 1}, /*keepdim=*/true, "bias_grad"), {16}));
  return b.build();
}

// gelu's gradient after a linear layer's input gradient, as a backward has
// it: gelu_backward(linear(g, w^T), pre-activation).
compiler::ir::Program input_gradient_through_gelu(runtime::Device device, DType dtype) {
  ProgramBuilder b("gelu_gradient", device);
  ValueId g = b.input("g", {6, 16}, dtype);
  ValueId w = b.input("w", {16, 24}, dtype);
  ValueId pre = b.input("pre", {6, 24}, dtype);
  ValueId product = b.linear(g, b.transpose(w, 0, 1), compiler::ir::kNoValue, "input_grad");
  b.output(b.op1("gelu_backward", {product, pre}));
  return b.build();
}

// The same through a view, as an ATen backward has it (Note [GEMM gelu
// gradients], through a view): the input gradient's [6, 24] rows read as
// [2, 3, 24] by gelu_backward, with the pre-activation [2, 3, 24].
compiler::ir::Program input_gradient_through_reshape_and_gelu(runtime::Device device, DType dtype) {
  ProgramBuilder b("gelu_gradient_viewed", device);
  ValueId g = b.input("g", {6, 16}, dtype);
  ValueId w = b.input("w", {16, 24}, dtype);
  ValueId pre = b.input("pre", {2, 3, 24}, dtype);
  ValueId product = b.matmul(g, w, "input_grad");
  b.output(b.op1("gelu_backward", {b.reshape(product, {2, 3, 24}), pre}));
  return b.build();
}

// A bias-less linear whose result a separate add of `bias` [bias_features]
// reads, through a reshape to `viewed` (none when empty), the bias first when
// `bias_first`: ATen's mm -> _unsafe_view -> add of a linear over a strided
// 3-d input (Note [Bias adds as GEMM epilogues]).
compiler::ir::Program linear_then_bias_add(runtime::Device device,
                                           const compiler::ir::Shape& viewed, int64_t bias_features,
                                           bool bias_first, DType dtype) {
  ProgramBuilder b("linear_bias_add", device);
  ValueId x = b.input("x", {6, 24}, dtype);
  ValueId w = b.input("w", {16, 24}, dtype);
  ValueId bias = b.input("bias", {bias_features}, dtype);
  ValueId product = b.linear(x, w, compiler::ir::kNoValue, "fc");
  if (!viewed.empty()) product = b.reshape(product, viewed);
  b.output(bias_first ? b.add(bias, product, "bias_add") : b.add(product, bias, "bias_add"));
  return b.build();
}

// linear(x, w, b) -> relu, directly or through a reshape to [2, 3, 16]
// (Note [ReLU epilogues]).
compiler::ir::Program linear_relu(runtime::Device device, bool through_reshape, DType dtype) {
  ProgramBuilder b("linear_relu", device);
  ValueId x = b.input("x", {6, 24}, dtype);
  ValueId w = b.input("w", {16, 24}, dtype);
  ValueId bias = b.input("bias", {16}, dtype);
  ValueId pre = b.linear(x, w, bias, "fc");
  if (through_reshape) pre = b.reshape(pre, {2, 3, 16});
  b.output(b.relu(pre));
  return b.build();
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

compiler::lowering::LoweredProgram lower_for_training(const compiler::ir::Program& program) {
  compiler::lowering::LowerOptions options;
  options.mode = compiler::ops::ExecMode::kTraining;
  return compiler::lowering::lower(program, options);
}

TEST(GemmEpilogueLowering, SavedPreActivationOfLinearGeluComesFromTheGemmsAuxOutput) {
  compiler::ir::Program program =
      linear_gelu_saving_pre_activation(runtime::kSimDevice, 6, 16, DType::kF32);
  compiler::lowering::LoweredProgram lowered = lower_for_training(program);
  KernelReport report = lowered.kernel_report();
  EXPECT_EQ(report.library_gemms, 1u) << report.str();
  EXPECT_EQ(report.kernels.size(), 0u) << report.str();
  EXPECT_EQ(count_of(lowered.describe(), "+bias_gelu_aux"), 1u) << lowered.describe();
}

TEST(GemmEpilogueLowering, SavedPreActivationReadThroughAReshapeComesFromTheGemmsAuxOutput) {
  compiler::ir::Program program =
      linear_gelu_viewed_saving_pre_activation(runtime::kSimDevice, 16, DType::kF32);
  compiler::lowering::LoweredProgram lowered = lower_for_training(program);
  KernelReport report = lowered.kernel_report();
  EXPECT_EQ(report.library_gemms, 1u) << report.str();
  EXPECT_EQ(report.kernels.size(), 0u) << report.str();
  EXPECT_EQ(count_of(lowered.describe(), "+bias_gelu_aux"), 1u) << lowered.describe();
}

TEST(GemmEpilogueLowering, FeatureCountNotAMultipleOfEightKeepsTheGeluKernel) {
  // cuBLASLt's aux leading dimension must be a multiple of 8.
  compiler::ir::Program program =
      linear_gelu_saving_pre_activation(runtime::kSimDevice, 6, 12, DType::kF32);
  compiler::lowering::LoweredProgram lowered = lower_for_training(program);
  KernelReport report = lowered.kernel_report();
  EXPECT_EQ(report.library_gemms, 1u) << report.str();
  EXPECT_EQ(report.kernels.size(), 1u) << report.str();
  EXPECT_EQ(count_of(lowered.describe(), "+bias_gelu_aux"), 0u) << lowered.describe();
  EXPECT_EQ(count_of(lowered.describe(), "+bias"), 1u) << lowered.describe();
}

TEST(GemmEpilogueLowering, BiasAddThroughAReshapeIsTheGemmsEpilogue) {
  for (bool bias_first : {false, true}) {
    for (const compiler::ir::Shape& viewed :
         {compiler::ir::Shape{2, 3, 16}, compiler::ir::Shape{}}) {
      compiler::ir::Program program =
          linear_then_bias_add(runtime::kSimDevice, viewed, 16, bias_first, DType::kF32);
      compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
      KernelReport report = lowered.kernel_report();
      EXPECT_EQ(report.library_gemms, 1u) << report.str();
      EXPECT_EQ(report.kernels.size(), 0u) << report.str();
      EXPECT_EQ(count_of(lowered.describe(), "+bias"), 1u) << lowered.describe();
    }
  }
}

TEST(GemmEpilogueLowering, BiasAddOverASplitLastDimOrSwitchedOffKeepsItsKernel) {
  // [6, 16] viewed as [6, 4, 4]: a [4] bias is not one per GEMM column.
  compiler::ir::Program split =
      linear_then_bias_add(runtime::kSimDevice, {6, 4, 4}, 4, false, DType::kF32);
  compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(split);
  EXPECT_EQ(lowered.kernel_report().kernels.size(), 1u) << lowered.describe();
  EXPECT_EQ(count_of(lowered.describe(), "+bias"), 0u) << lowered.describe();
  testing::ScopedEnv off("GROVE_GEMM_BIAS_ADDS", "0");
  compiler::ir::Program viewed =
      linear_then_bias_add(runtime::kSimDevice, {2, 3, 16}, 16, false, DType::kF32);
  lowered = compiler::lowering::lower(viewed);
  EXPECT_EQ(lowered.kernel_report().kernels.size(), 1u) << lowered.describe();
  EXPECT_EQ(count_of(lowered.describe(), "+bias"), 0u) << lowered.describe();
}

// Note [Bias adds in the consumer's kernel]: with GROVE_BIAS_INTO_CONSUMERS=1
// a linear over 40 rows read (through a reshape) only by a residual add before
// a layer norm runs bare, its bias added in the add + layer norm kernel (one
// kernel either way); one read by a GEMM, or of 8 rows (grove's small-M
// kernel adds it for free), keeps the epilogue. Values match the reference.
TEST(GemmEpilogueLowering, BiasJoinsTheConsumersKernelWhenAsked) {
  auto program_of = [](int64_t rows, bool read_by_gemm) {
    ProgramBuilder b("bias_into_consumer", runtime::kSimDevice);
    ValueId x = b.input("x", {rows, 24});
    ValueId y = b.linear(x, b.input("w", {16, 24}), b.input("bias", {16}), "fc");
    ValueId viewed = b.reshape(y, {rows / 4, 4, 16});
    if (read_by_gemm) {
      b.output(b.matmul(viewed, b.input("m", {16, 8})));
    } else {
      b.output(b.layer_norm(b.add(viewed, b.input("residual", {rows / 4, 4, 16})),
                            b.input("g", {16}), b.input("beta", {16})));
    }
    return b.build();
  };
  for (const auto& [rows, read_by_gemm] :
       {std::pair<int64_t, bool>{40, false}, {40, true}, {8, false}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows, read by a GEMM: " << read_by_gemm);
    compiler::ir::Program program = program_of(rows, read_by_gemm);
    testing::ScopedEnv on("GROVE_BIAS_INTO_CONSUMERS", "1");
    compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
    const bool bare = rows > 32 && !read_by_gemm;
    EXPECT_EQ(count_of(lowered.describe(), "+bias"), bare ? 0u : 1u) << lowered.describe();
    EXPECT_EQ(lowered.kernel_report().kernels.size(), read_by_gemm ? 0u : 1u) << lowered.describe();
    testing::expect_matches_reference(program, testing::random_inputs(program, 20261127),
                                      runtime::kSimDevice, testing::tolerance_for(DType::kF32),
                                      "bias_into_consumer");
  }
}

TEST(GemmEpilogueLowering, LinearReluIsOneGemm) {
  for (bool through_reshape : {false, true}) {
    compiler::ir::Program program = linear_relu(runtime::kSimDevice, through_reshape, DType::kF32);
    compiler::lowering::LoweredProgram lowered = compiler::lowering::lower(program);
    KernelReport report = lowered.kernel_report();
    EXPECT_EQ(report.library_gemms, 1u) << report.str();
    EXPECT_EQ(report.kernels.size(), 0u) << report.str();
    EXPECT_EQ(count_of(lowered.describe(), "+bias_relu"), 1u) << lowered.describe();
  }
}

TEST(GemmEpilogueLowering, BiasGradientIsTheWeightGradientGemmsEpilogue) {
  compiler::ir::Program program = weight_and_bias_gradients(runtime::kSimDevice, DType::kF32);
  compiler::lowering::LoweredProgram lowered = lower_for_training(program);
  KernelReport report = lowered.kernel_report();
  EXPECT_EQ(report.library_gemms, 1u) << report.str();
  ASSERT_EQ(report.kernels.size(), 1u) << report.str();  // the mul, and no reduction
  EXPECT_EQ(count_of(lowered.describe(), "+bias_grad_a"), 1u) << lowered.describe();
}

TEST(GemmEpilogueLowering, GeluGradientOfAnInputGradientIsTheGemmsEpilogue) {
  compiler::ir::Program program = input_gradient_through_gelu(runtime::kSimDevice, DType::kF32);
  compiler::lowering::LoweredProgram lowered = lower_for_training(program);
  KernelReport report = lowered.kernel_report();
  EXPECT_EQ(report.library_gemms, 1u) << report.str();
  EXPECT_EQ(report.kernels.size(), 0u) << report.str();
  EXPECT_EQ(count_of(lowered.describe(), "+dgelu"), 1u) << lowered.describe();
}

TEST(GemmEpilogueLowering, GeluGradientReadThroughAReshapeIsTheGemmsEpilogue) {
  compiler::ir::Program program =
      input_gradient_through_reshape_and_gelu(runtime::kSimDevice, DType::kF32);
  compiler::lowering::LoweredProgram lowered = lower_for_training(program);
  KernelReport report = lowered.kernel_report();
  EXPECT_EQ(report.library_gemms, 1u) << report.str();
  EXPECT_EQ(report.kernels.size(), 0u) << report.str();
  EXPECT_EQ(count_of(lowered.describe(), "+dgelu"), 1u) << lowered.describe();
}

class GemmEpilogueOnDevice : public testing::DeviceTest {};

// The lead runs the cuda instance on the GPU host (cuBLASLt GELU_AUX_BIAS).
TEST_P(GemmEpilogueOnDevice, LinearGeluWithSavedPreActivationMatchesTheReference) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(runtime::dtype_name(dtype));
    compiler::ir::Program program = linear_gelu_saving_pre_activation(device(), 40, 64, dtype);
    testing::HostTensorList inputs = testing::random_inputs(program, 8);
    testing::expect_matches_reference(program, inputs, device(), testing::tolerance_for(dtype),
                                      "linear_gelu_aux");
  }
}

// The cuda instance runs cuBLASLt's BGRADB (the row-major A is cuBLAS's B).
TEST_P(GemmEpilogueOnDevice, WeightAndBiasGradientsFromOneGemmMatchTheReference) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(runtime::dtype_name(dtype));
    compiler::ir::Program program = weight_and_bias_gradients(device(), dtype);
    testing::HostTensorList inputs = testing::random_inputs(program, 9);
    testing::expect_matches_reference(program, inputs, device(), testing::tolerance_for(dtype),
                                      "linear_gradients");
  }
}

// The cuda instance runs cuBLASLt's DGELU with the pre-activation as aux.
TEST_P(GemmEpilogueOnDevice, GeluGradientFromOneGemmMatchesTheReference) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(runtime::dtype_name(dtype));
    compiler::ir::Program program = input_gradient_through_gelu(device(), dtype);
    testing::HostTensorList inputs = testing::random_inputs(program, 10);
    testing::expect_matches_reference(program, inputs, device(), testing::tolerance_for(dtype),
                                      "gelu_gradient");
  }
}

TEST_P(GemmEpilogueOnDevice, LinearGeluThroughAReshapeMatchesTheReference) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(runtime::dtype_name(dtype));
    compiler::ir::Program program = linear_gelu_viewed_saving_pre_activation(device(), 64, dtype);
    testing::HostTensorList inputs = testing::random_inputs(program, 12);
    testing::expect_matches_reference(program, inputs, device(), testing::tolerance_for(dtype),
                                      "linear_gelu_aux_viewed");
  }
}

TEST_P(GemmEpilogueOnDevice, BiasAddThroughAReshapeMatchesTheReference) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(runtime::dtype_name(dtype));
    compiler::ir::Program program = linear_then_bias_add(device(), {2, 3, 16}, 16, true, dtype);
    testing::HostTensorList inputs = testing::random_inputs(program, 13);
    testing::expect_matches_reference(program, inputs, device(), testing::tolerance_for(dtype),
                                      "linear_bias_add");
  }
}

TEST_P(GemmEpilogueOnDevice, LinearReluThroughAReshapeMatchesTheReference) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool through_reshape : {false, true}) {
      SCOPED_TRACE(runtime::dtype_name(dtype));
      compiler::ir::Program program = linear_relu(device(), through_reshape, dtype);
      testing::HostTensorList inputs = testing::random_inputs(program, 14);
      testing::expect_matches_reference(program, inputs, device(), testing::tolerance_for(dtype),
                                        "linear_relu");
    }
  }
}

TEST_P(GemmEpilogueOnDevice, GeluGradientThroughAReshapeMatchesTheReference) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(runtime::dtype_name(dtype));
    compiler::ir::Program program = input_gradient_through_reshape_and_gelu(device(), dtype);
    testing::HostTensorList inputs = testing::random_inputs(program, 11);
    testing::expect_matches_reference(program, inputs, device(), testing::tolerance_for(dtype),
                                      "gelu_gradient_viewed");
  }
}

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(GemmEpilogueOnDevice);

}  // namespace
}  // namespace grove
