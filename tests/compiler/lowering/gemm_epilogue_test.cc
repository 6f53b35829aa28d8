// GEMM epilogues that keep a training step's work inside its GEMMs (Note [GEMM
// auxiliary output] and Note [GEMM bias gradients] in runtime/cuda/blas.h):
// the lowering picks them where cuBLASLt can run them, the host GEMM computes the same math, and
// results match the float64 reference on sim and on cuda.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "compiler/host_blas/host_gemm.h"
#include "compiler/ir/builder.h"
#include "compiler/lowering/lower.h"
#include "runtime/error.h"
#include "tests/compiler/lowering/lowering_test_util.h"
#include "tests/runtime/device_test_util.h"

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

double gelu_slope(double x) {
  const double k = std::sqrt(2 / M_PI), a = 0.044715;
  const double t = std::tanh(k * (x + a * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * a * x * x);
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

TEST(HostGemmEpilogue, DGeluMultipliesTheProductByGelusSlopeAtAux) {
  GROVE_SEEDED_RNG(rng);
  const int64_t m = 4, n = 8, k = 3;
  std::vector<float> a = testing::random_floats(rng, m * k, -1, 1);
  std::vector<float> b = testing::random_floats(rng, k * n, -1, 1);
  std::vector<float> aux = testing::random_floats(rng, m * n, -3, 3);
  std::vector<float> c(m * n, 0.0f);
  runtime::GemmArgs g;
  g.m = m, g.n = n, g.k = k;
  g.a = a.data(), g.lda = k;
  g.b = b.data(), g.ldb = n;
  g.c = c.data(), g.ldc = n;
  g.epilogue = runtime::GemmEpilogue::kDGelu;
  g.aux = aux.data(), g.ld_aux = n;
  compiler::host_blas::gemm_row_major(g);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double product = 0;
      for (int64_t p = 0; p < k; ++p) product += double(a[i * k + p]) * b[p * n + j];
      EXPECT_NEAR(c[i * n + j], product * gelu_slope(aux[i * n + j]), 1e-5)
          << "c at (" << i << ", " << j << ")";
    }
  }
}

TEST(HostGemmEpilogue, BiasGradientsSumOpAsRowsAndOpBsColumns) {
  GROVE_SEEDED_RNG(rng);
  const int64_t m = 6, n = 5, k = 9;
  // op(A) = A^T with A stored [k, m]; op(B) = B stored [k, n].
  std::vector<float> a = testing::random_floats(rng, k * m, -1, 1);
  std::vector<float> b = testing::random_floats(rng, k * n, -1, 1);
  for (runtime::GemmEpilogue epilogue :
       {runtime::GemmEpilogue::kBiasGradA, runtime::GemmEpilogue::kBiasGradB}) {
    SCOPED_TRACE(runtime::gemm_epilogue_name(epilogue));
    std::vector<float> c(m * n, 0.0f), bias_grad(8, -99.0f);
    runtime::GemmArgs g;
    g.m = m, g.n = n, g.k = k;
    g.transpose_a = true;
    g.a = a.data(), g.lda = m;
    g.b = b.data(), g.ldb = n;
    g.c = c.data(), g.ldc = n;
    g.epilogue = epilogue;
    g.bias_grad = bias_grad.data();
    compiler::host_blas::gemm_row_major(g);
    const bool of_a = epilogue == runtime::GemmEpilogue::kBiasGradA;
    for (int64_t i = 0; i < (of_a ? m : n); ++i) {
      double expected = 0;
      for (int64_t p = 0; p < k; ++p) expected += of_a ? a[p * m + i] : b[p * n + i];
      EXPECT_NEAR(bias_grad[i], expected, 1e-5) << "bias_grad[" << i << "]";
    }
    EXPECT_EQ(bias_grad[7], -99.0f);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double expected = 0;
        for (int64_t p = 0; p < k; ++p) expected += double(a[p * m + i]) * b[p * n + j];
        EXPECT_NEAR(c[i * n + j], expected, 1e-5) << "c at (" << i << ", " << j << ")";
      }
    }
    g.beta = 1.0f;  // the bias gradient would not be of the stored product
    EXPECT_THROW(compiler::host_blas::gemm_row_major(g), ShapeError);
  }
}

TEST(HostGemmEpilogue, AuxOutputHoldsThePreActivationAndCIsItsGelu) {
  GROVE_SEEDED_RNG(rng);
  const int64_t m = 5, n = 8, k = 7;
  std::vector<float> a = testing::random_floats(rng, m * k, -1, 1);
  std::vector<float> b = testing::random_floats(rng, n * k, -1, 1);
  std::vector<float> bias = testing::random_floats(rng, n, -1, 1);
  std::vector<float> c(m * n, 0.0f), aux(m * 16, -99.0f);
  runtime::GemmArgs g;
  g.m = m, g.n = n, g.k = k;
  g.transpose_b = true;  // C = A B^T, as a linear's weight
  g.a = a.data(), g.lda = k;
  g.b = b.data(), g.ldb = k;
  g.c = c.data(), g.ldc = n;
  g.epilogue = runtime::GemmEpilogue::kBiasGeluAux;
  g.bias = bias.data();
  g.aux = aux.data(), g.ld_aux = 16;  // wider than C: the padding stays untouched
  compiler::host_blas::gemm_row_major(g);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double pre = bias[j];
      for (int64_t p = 0; p < k; ++p) pre += double(a[i * k + p]) * b[j * k + p];
      double gelu =
          0.5 * pre * (1 + std::tanh(std::sqrt(2 / M_PI) * (pre + 0.044715 * pre * pre * pre)));
      EXPECT_NEAR(aux[i * 16 + j], pre, 1e-5) << "aux at (" << i << ", " << j << ")";
      EXPECT_NEAR(c[i * n + j], gelu, 1e-5) << "c at (" << i << ", " << j << ")";
    }
    for (int64_t j = n; j < 16; ++j) EXPECT_EQ(aux[i * 16 + j], -99.0f);
  }
  g.aux = nullptr;
  EXPECT_THROW(compiler::host_blas::gemm_row_major(g), ShapeError);
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

GROVE_INSTANTIATE_DEVICE_TEST_SUITE(GemmEpilogueOnDevice);

}  // namespace
}  // namespace grove
