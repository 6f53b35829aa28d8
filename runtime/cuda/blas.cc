#include "runtime/cuda/blas.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>

#include "runtime/cuda/cublas_handles.h"
#include "runtime/cuda/cublas_library.h"
#include "runtime/cuda/cublaslt_plans.h"
#include "runtime/cuda/gemm_algorithm_search.h"
#include "runtime/cuda/small_m_gemv.h"
#include "runtime/cuda/small_m_tiled_gemm.h"

namespace grove::runtime {
namespace {

using cuda_detail::check_cublas;
using cuda_detail::cublas_library;
using cuda_detail::CublasLibrary;
using cuda_detail::cuda_data_type;
using cuda_detail::GemmWhat;
using cuda_detail::require_cublas;
using cuda_detail::stream_handle_state;

int checked_int(int64_t value, const char* what) {
  GROVE_CHECK_AS(ShapeError, value >= 0 && value <= INT_MAX, "cuBLAS GEMM: ", what, " = ", value,
                 " is out of range (expected 0 .. ", INT_MAX, ")");
  return static_cast<int>(value);
}

void check_leading_dimension(int64_t ld, int64_t rows, const char* name) {
  GROVE_CHECK_AS(ShapeError, ld >= std::max<int64_t>(1, rows), "cuBLAS GEMM: ", name, " = ", ld,
                 " but the stored matrix has ", rows,
                 " rows (column-major); the leading dimension must be at least that");
}

void check_args(const GemmArgs& g) {
  checked_int(g.m, "m");
  checked_int(g.n, "n");
  checked_int(g.k, "k");
  checked_int(g.batch_count, "batch_count");
  GROVE_CHECK_AS(ShapeError, g.batch_count >= 1, "cuBLAS GEMM: batch_count must be at least 1");
  check_leading_dimension(g.lda, g.transpose_a ? g.k : g.m, "lda");
  check_leading_dimension(g.ldb, g.transpose_b ? g.n : g.k, "ldb");
  check_leading_dimension(g.ldc, g.m, "ldc");
  GROVE_CHECK(g.c != nullptr || g.m * g.n == 0, "cuBLAS GEMM: C is null");
  GROVE_CHECK((g.a != nullptr && g.b != nullptr) || g.k == 0 || g.m * g.n == 0,
              "cuBLAS GEMM: A or B is null");
}

// BlasSupport of one cuda device over the functions below, with decode-shaped
// GEMMs as grove's own kernel (Note [Small-M GEMV], small_m_gemv.h).
class CublasSupport final : public BlasSupport {
 public:
  CublasSupport(Device device, Platform& platform)
      : device_(device), small_m_gemv_(platform), small_m_tiled_gemm_(platform) {}

  void gemm_row_major(StreamHandle stream, const GemmArgs& args) override {
    if (args.tile_rows > 0) {  // Note [Small-M tiled GEMM]
      small_m_tiled_gemm_.launch(stream, args);
      return;
    }
    if (cuda_detail::small_m_gemv_qualifies(args)) {
      small_m_gemv_.launch(stream, args);
      return;
    }
    runtime::gemm_row_major(device_, stream, args);
  }

  bool gemm_row_major_epilogue_available(GemmEpilogue epilogue, DType dtype, int64_t m, int64_t n,
                                         int64_t k) override {
    return runtime::gemm_row_major_epilogue_available(device_, epilogue, dtype, m, n, k);
  }

  void prepare_gemm(StreamHandle stream) override { runtime::prepare_gemm(device_, stream); }

  void preload_small_m_tiled_kernels(DType dtype) override { small_m_tiled_gemm_.preload(dtype); }

 private:
  Device device_;
  cuda_detail::SmallMGemv small_m_gemv_;
  cuda_detail::SmallMTiledGemm small_m_tiled_gemm_;
};

}  // namespace

std::unique_ptr<BlasSupport> make_cublas_support(Device device, Platform& platform) {
  return std::make_unique<CublasSupport>(device, platform);
}

bool cublas_available() { return cublas_library() != nullptr; }

std::string cublas_unavailable_reason() { return cuda_detail::cublas_load_error(); }

void gemm(Device device, StreamHandle stream, const GemmArgs& g) {
  GROVE_CHECK_AS(DeviceError, device.is_cuda(), "cuBLAS GEMM on ", device.str(),
                 ": cuBLAS runs on cuda devices only; run GEMMs through the device's BLAS "
                 "(Platform::blas()) on ",
                 device.str());
  cudaDataType type = cuda_data_type(g.dtype);
  check_args(g);
  const CublasLibrary& library = require_cublas();
  cublasHandle_t handle = stream_handle_state(library, device, stream).handle;
  cublasOperation_t op_a = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_b = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const GemmWhat doing{g, device};
  // Note [GEMM algorithms by measurement]: a plain GEMM whose algorithm is
  // searched runs through cuBLASLt too.
  if (g.epilogue != GemmEpilogue::kNone ||
      (g.batch_count == 1 && g.k > 0 && library.lt_ok && (g.search || gemm_search_enabled()))) {
    if (g.m == 0 || g.n == 0) return;
    cuda_detail::gemm_with_epilogue(library, device, stream, g, doing);
    return;
  }
  if (g.batch_count == 1) {
    check_cublas(
        library,
        library.gemm_ex(handle, op_a, op_b, static_cast<int>(g.m), static_cast<int>(g.n),
                        static_cast<int>(g.k), &g.alpha, g.a, type, static_cast<int>(g.lda), g.b,
                        type, static_cast<int>(g.ldb), &g.beta, g.c, type, static_cast<int>(g.ldc),
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx", doing);
    return;
  }
  check_cublas(
      library,
      library.gemm_strided_batched_ex(
          handle, op_a, op_b, static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k),
          &g.alpha, g.a, type, static_cast<int>(g.lda), g.stride_a, g.b, type,
          static_cast<int>(g.ldb), g.stride_b, &g.beta, g.c, type, static_cast<int>(g.ldc),
          g.stride_c, static_cast<int>(g.batch_count), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx", doing);
}

bool gemm_row_major_epilogue_available(Device device, GemmEpilogue epilogue, DType dtype, int64_t m,
                                       int64_t n, int64_t k) {
  return cuda_detail::row_major_epilogue_available(device, epilogue, dtype, m, n, k);
}

void gemm_row_major(Device device, StreamHandle stream, const GemmArgs& args) {
  // A row-major matrix is its transpose in column-major, and C^T = op(B)^T op(A)^T.
  GemmArgs swapped = args;
  swapped.m = args.n;
  swapped.n = args.m;
  swapped.a = args.b;
  swapped.lda = args.ldb;
  swapped.transpose_a = args.transpose_b;
  swapped.stride_a = args.stride_b;
  swapped.b = args.a;
  swapped.ldb = args.lda;
  swapped.transpose_b = args.transpose_a;
  swapped.stride_b = args.stride_a;
  // Note [GEMM bias gradients]: the row-major A is cuBLAS's B.
  if (args.epilogue == GemmEpilogue::kBiasGradA) swapped.epilogue = GemmEpilogue::kBiasGradB;
  if (args.epilogue == GemmEpilogue::kBiasGradB) swapped.epilogue = GemmEpilogue::kBiasGradA;
  gemm(device, stream, swapped);
}

}  // namespace grove::runtime
