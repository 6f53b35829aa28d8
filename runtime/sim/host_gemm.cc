#include "runtime/sim/host_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace grove::runtime::sim {
namespace {

constexpr int64_t kBlockK = 128;
constexpr int64_t kBlockN = 256;

// f32 with B read transposed (linear's weight, row-major [N, K]): each C
// element is a dot product of two contiguous rows, summed in eight interleaved
// partial sums (p mod 8) combined in a fixed order, so the compiler can use
// vector registers and the result does not depend on m, n or blocking.
void gemm_f32_dot(const GemmArgs& g, const float* __restrict a, const float* __restrict b,
                  float* __restrict c) {
  constexpr int64_t kLanes = 8;
  const int64_t k_main = g.k - g.k % kLanes;
  for (int64_t i = 0; i < g.m; ++i) {
    const float* __restrict a_row = a + i * g.lda;
    for (int64_t j = 0; j < g.n; ++j) {
      const float* __restrict b_row = b + j * g.ldb;
      float lanes[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t p = 0; p < k_main; p += kLanes) {
        for (int64_t l = 0; l < kLanes; ++l) lanes[l] += a_row[p + l] * b_row[p + l];
      }
      for (int64_t p = k_main; p < g.k; ++p) lanes[p - k_main] += a_row[p] * b_row[p];
      float total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                    ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      float value = g.alpha * total;
      if (g.beta != 0.0f) value += g.beta * c[i * g.ldc + j];
      c[i * g.ldc + j] = value;
    }
  }
}

// One matrix: C[m, n] = sum_k A(m, k) B(k, n), blocked over k and n. Each
// block of B is unpacked to f32 once; each row of C accumulates in f32 in a
// row buffer, k in increasing order.
void gemm_one(const GemmArgs& g, const void* a, const void* b, void* c) {
  auto a_at = [&](int64_t i, int64_t p) { return g.transpose_a ? p * g.lda + i : i * g.lda + p; };
  auto b_at = [&](int64_t p, int64_t j) { return g.transpose_b ? j * g.ldb + p : p * g.ldb + j; };
  std::vector<float> accumulator(static_cast<size_t>(g.m * std::min(g.n, kBlockN)));
  std::vector<float> panel(static_cast<size_t>(std::min(g.k, kBlockK) * std::min(g.n, kBlockN)));
  std::vector<float> a_block(static_cast<size_t>(std::min(g.k, kBlockK)));
  for (int64_t j0 = 0; j0 < g.n; j0 += kBlockN) {
    const int64_t nb = std::min(kBlockN, g.n - j0);
    std::fill(accumulator.begin(), accumulator.end(), 0.0f);
    for (int64_t p0 = 0; p0 < g.k; p0 += kBlockK) {
      const int64_t kb = std::min(kBlockK, g.k - p0);
      // f32 rows of an untransposed B are used in place; others are unpacked.
      const bool direct = g.dtype == DType::kF32 && !g.transpose_b;
      if (!direct) {
        for (int64_t p = 0; p < kb; ++p) {
          for (int64_t j = 0; j < nb; ++j) {
            panel[static_cast<size_t>(p * nb + j)] =
                load_float_element(b, g.dtype, b_at(p0 + p, j0 + j));
          }
        }
      }
      for (int64_t i = 0; i < g.m; ++i) {
        for (int64_t p = 0; p < kb; ++p)
          a_block[static_cast<size_t>(p)] = load_float_element(a, g.dtype, a_at(i, p0 + p));
        float* __restrict row = accumulator.data() + i * nb;
        for (int64_t p = 0; p < kb; ++p) {
          const float scale = a_block[static_cast<size_t>(p)];
          const float* __restrict panel_row =
              direct ? static_cast<const float*>(b) + (p0 + p) * g.ldb + j0 : panel.data() + p * nb;
          for (int64_t j = 0; j < nb; ++j) row[j] += scale * panel_row[j];
        }
      }
    }
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < nb; ++j) {
        int64_t at = i * g.ldc + j0 + j;
        float value = g.alpha * accumulator[static_cast<size_t>(i * nb + j)];
        if (g.beta != 0.0f) value += g.beta * load_float_element(c, g.dtype, at);
        store_float_element(c, g.dtype, at, value);
      }
    }
  }
}

// Note [GEMM epilogues] (runtime/blas.h) on the host: after the product
// is stored, each element of row-major C gets bias[column] added and, for
// kBiasGelu, gelu's tanh approximation applied (kBiasRelu: max(x, 0)), in f32;
// kBiasGeluAux also
// stores the value gelu was applied to into row-major `aux` (Note [GEMM
// auxiliary output]), rounded to the dtype as cuBLASLt stores it.
// kDGelu multiplies each element by gelu'(aux) instead, in f32.
void apply_epilogue(const GemmArgs& g, void* c) {
  const float sqrt_2_over_pi = static_cast<float>(std::sqrt(2.0 / M_PI));
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      const int64_t at = i * g.ldc + j;
      if (g.epilogue == GemmEpilogue::kDGelu) {
        const float x = load_float_element(g.aux, g.dtype, i * g.ld_aux + j);
        const float t = std::tanh(sqrt_2_over_pi * (x + 0.044715f * (x * x * x)));
        const float slope = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * sqrt_2_over_pi *
                                                    (1.0f + 3.0f * 0.044715f * (x * x));
        store_float_element(c, g.dtype, at, load_float_element(c, g.dtype, at) * slope);
        continue;
      }
      float x = load_float_element(c, g.dtype, at) + load_float_element(g.bias, g.dtype, j);
      if (g.epilogue == GemmEpilogue::kBiasGeluAux)
        store_float_element(g.aux, g.dtype, i * g.ld_aux + j, x);
      if (g.epilogue == GemmEpilogue::kBiasGelu || g.epilogue == GemmEpilogue::kBiasGeluAux) {
        x = 0.5f * x * (1.0f + std::tanh(sqrt_2_over_pi * (x + 0.044715f * (x * x * x))));
      }
      if (g.epilogue == GemmEpilogue::kBiasRelu) x = x > 0.0f ? x : 0.0f;
      store_float_element(c, g.dtype, at, x);
    }
  }
}

bool is_bias_gradient(GemmEpilogue epilogue) {
  return epilogue == GemmEpilogue::kBiasGradA || epilogue == GemmEpilogue::kBiasGradB;
}

// Note [GEMM bias gradients] on the host: op(A)'s rows (kBiasGradA) or op(B)'s
// columns (kBiasGradB) summed over k in f32, in order of p.
void store_bias_gradient(const GemmArgs& g) {
  const bool of_a = g.epilogue == GemmEpilogue::kBiasGradA;
  const void* matrix = of_a ? g.a : g.b;
  const int64_t count = of_a ? g.m : g.n;
  const int64_t ld = of_a ? g.lda : g.ldb;
  // op(A)[i, p] is A[i, p] or A[p, i]; op(B)[p, j] is B[p, j] or B[j, p].
  const bool along_row = of_a ? !g.transpose_a : g.transpose_b;
  for (int64_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (int64_t p = 0; p < g.k; ++p) {
      sum += load_float_element(matrix, g.dtype, along_row ? i * ld + p : p * ld + i);
    }
    store_float_element(g.bias_grad, g.dtype, i, sum);
  }
}

// Note [Host GEMM kernel ABI]: slots 0-2 are the A, B, C pointers; then i64
// dtype, transpose_a, transpose_b, m, n, k, lda, ldb, ldc, batch_count,
// stride_a, stride_b, stride_c; then alpha and beta as f32 (low 4 bytes);
// then the i64 epilogue, the bias pointer, the aux pointer, i64 ld_aux and the
// bias_grad pointer.
void host_gemm_entry(const LaunchDims*, const uint64_t* slots) {
  GemmArgs g;
  g.a = reinterpret_cast<const void*>(slots[0]);
  g.b = reinterpret_cast<const void*>(slots[1]);
  g.c = reinterpret_cast<void*>(slots[2]);
  g.dtype = static_cast<DType>(slots[3]);
  g.transpose_a = slots[4] != 0;
  g.transpose_b = slots[5] != 0;
  auto i64 = [&](size_t i) { return static_cast<int64_t>(slots[i]); };
  g.m = i64(6), g.n = i64(7), g.k = i64(8);
  g.lda = i64(9), g.ldb = i64(10), g.ldc = i64(11);
  g.batch_count = i64(12);
  g.stride_a = i64(13), g.stride_b = i64(14), g.stride_c = i64(15);
  auto f32 = [&](size_t i) {
    uint32_t bits = static_cast<uint32_t>(slots[i]);
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  };
  g.alpha = f32(16);
  g.beta = f32(17);
  g.epilogue = static_cast<GemmEpilogue>(slots[18]);
  g.bias = reinterpret_cast<const void*>(slots[19]);
  g.aux = reinterpret_cast<void*>(slots[20]);
  g.ld_aux = i64(21);
  g.bias_grad = reinterpret_cast<void*>(slots[22]);
  host_gemm_row_major(g);
}

}  // namespace

void host_gemm_row_major(const GemmArgs& g) {
  GROVE_CHECK_AS(
      DTypeError, g.dtype == DType::kF32 || g.dtype == DType::kBF16 || g.dtype == DType::kF16,
      "host GEMM: dtype ", dtype_name(g.dtype), " is not supported; use f32, bf16 or f16");
  GROVE_CHECK_AS(ShapeError, g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch_count >= 1,
                 "host GEMM: m, n, k must be >= 0 and batch_count >= 1, found m=", g.m, " n=", g.n,
                 " k=", g.k, " batch_count=", g.batch_count);
  const int64_t a_cols = g.transpose_a ? g.m : g.k;
  const int64_t b_cols = g.transpose_b ? g.k : g.n;
  GROVE_CHECK_AS(ShapeError,
                 g.lda >= std::max<int64_t>(1, a_cols) && g.ldb >= std::max<int64_t>(1, b_cols) &&
                     g.ldc >= std::max<int64_t>(1, g.n),
                 "host GEMM: leading dimensions lda=", g.lda, " ldb=", g.ldb, " ldc=", g.ldc,
                 " are smaller than the row lengths ", a_cols, ", ", b_cols, ", ", g.n);
  GROVE_CHECK_AS(ShapeError, g.epilogue == GemmEpilogue::kNone || g.batch_count == 1,
                 "host GEMM: a ", gemm_epilogue_name(g.epilogue),
                 " epilogue needs batch_count 1, found ", g.batch_count);
  GROVE_CHECK(g.epilogue == GemmEpilogue::kNone || is_bias_gradient(g.epilogue) ||
                  g.epilogue == GemmEpilogue::kDGelu || g.bias != nullptr || g.m * g.n == 0,
              "host GEMM: a ", gemm_epilogue_name(g.epilogue),
              " epilogue needs a bias pointer, found null");
  GROVE_CHECK_AS(ShapeError,
                 (g.epilogue != GemmEpilogue::kBiasGeluAux && g.epilogue != GemmEpilogue::kDGelu) ||
                     g.m * g.n == 0 || (g.aux != nullptr && g.ld_aux >= g.n),
                 "host GEMM: a ", gemm_epilogue_name(g.epilogue),
                 " epilogue needs an aux buffer with ld_aux >= n = ", g.n, ", found aux ",
                 g.aux == nullptr ? "null" : "set", " and ld_aux ", g.ld_aux,
                 "; pass the pre-activation's buffer (m x n like C)");
  if (g.epilogue == GemmEpilogue::kDGelu) {
    GROVE_CHECK_AS(ShapeError, g.alpha == 1.0f && g.beta == 0.0f,
                   "host GEMM: a dgelu epilogue needs alpha 1 and beta 0, found alpha ", g.alpha,
                   ", beta ", g.beta);
  }
  if (is_bias_gradient(g.epilogue)) {
    GROVE_CHECK_AS(ShapeError, g.bias_grad != nullptr && g.alpha == 1.0f && g.beta == 0.0f,
                   "host GEMM: a ", gemm_epilogue_name(g.epilogue),
                   " epilogue needs a bias_grad pointer, alpha 1 and beta 0, found bias_grad ",
                   g.bias_grad == nullptr ? "null" : "set", ", alpha ", g.alpha, ", beta ", g.beta);
  }
  if (g.m == 0 || g.n == 0) return;
  const size_t element = dtype_size(g.dtype);
  for (int64_t batch = 0; batch < g.batch_count; ++batch) {
    const auto* a = static_cast<const uint8_t*>(g.a) + batch * g.stride_a * element;
    const auto* b = static_cast<const uint8_t*>(g.b) + batch * g.stride_b * element;
    auto* c = static_cast<uint8_t*>(g.c) + batch * g.stride_c * element;
    if (g.dtype == DType::kF32 && g.transpose_b && !g.transpose_a) {
      gemm_f32_dot(g, reinterpret_cast<const float*>(a), reinterpret_cast<const float*>(b),
                   reinterpret_cast<float*>(c));
    } else {
      gemm_one(g, a, b, c);
    }
  }
  if (is_bias_gradient(g.epilogue)) {
    store_bias_gradient(g);
  } else if (g.epilogue != GemmEpilogue::kNone) {
    apply_epilogue(g, g.c);
  }
}

HostKernelFn host_gemm_kernel() { return &host_gemm_entry; }

KernelArgs host_gemm_kernel_args(const GemmArgs& g) {
  KernelArgs args;
  args.add_pointer(g.a).add_pointer(g.b).add_pointer(g.c);
  args.add_i64(static_cast<int64_t>(g.dtype)).add_i64(g.transpose_a).add_i64(g.transpose_b);
  args.add_i64(g.m).add_i64(g.n).add_i64(g.k);
  args.add_i64(g.lda).add_i64(g.ldb).add_i64(g.ldc);
  args.add_i64(g.batch_count).add_i64(g.stride_a).add_i64(g.stride_b).add_i64(g.stride_c);
  args.add_f32(g.alpha).add_f32(g.beta);
  args.add_i64(static_cast<int64_t>(g.epilogue)).add_pointer(g.bias);
  args.add_pointer(g.aux).add_i64(g.ld_aux).add_pointer(g.bias_grad);
  return args;
}

}  // namespace grove::runtime::sim
