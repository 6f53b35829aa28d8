// The host GEMM behind the sim and cpu devices' BLAS computes the epilogues
// (Note [GEMM epilogues], Note [GEMM auxiliary output] and Note [GEMM bias
// gradients] in runtime/blas.h) as cuBLASLt does, and rejects arguments an
// epilogue cannot take.
#include "runtime/sim/host_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/blas.h"
#include "runtime/error.h"
#include "tests/common/test_util.h"

namespace grove {
namespace {

double gelu_slope(double x) {
  const double k = std::sqrt(2 / M_PI), a = 0.044715;
  const double t = std::tanh(k * (x + a * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * a * x * x);
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
  runtime::sim::host_gemm_row_major(g);
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
    runtime::sim::host_gemm_row_major(g);
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
    EXPECT_THROW(runtime::sim::host_gemm_row_major(g), ShapeError);
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
  runtime::sim::host_gemm_row_major(g);
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
  EXPECT_THROW(runtime::sim::host_gemm_row_major(g), ShapeError);
}

}  // namespace
}  // namespace grove
