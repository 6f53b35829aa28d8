#include "runtime/cuda/blas.h"

#include <cuda_runtime_api.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>

#include "runtime/cuda/cublas_library.h"
#include "runtime/cuda/cuda_error.h"

namespace grove::runtime {
namespace {

using cuda_detail::cublas_library;
using cuda_detail::CublasLibrary;

// cuBLAS asks for at least 32 MiB of workspace on Hopper to pick its fastest
// kernels; GROVE_CUBLAS_WORKSPACE_BYTES overrides it.
constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

size_t workspace_bytes() {
  const char* value = std::getenv("GROVE_CUBLAS_WORKSPACE_BYTES");
  if (value == nullptr) return kDefaultWorkspaceBytes;
  char* end = nullptr;
  unsigned long long parsed = std::strtoull(value, &end, 10);
  GROVE_CHECK_AS(ConfigError, end != value && *end == '\0', "GROVE_CUBLAS_WORKSPACE_BYTES='", value,
                 "': expected a number of bytes");
  return static_cast<size_t>(parsed);
}

struct StreamHandleState {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
};

struct HandleRegistry {
  std::mutex mutex;
  std::map<std::pair<int, cudaStream_t>, StreamHandleState> handles;
};

HandleRegistry& registry() {
  static auto* instance = new HandleRegistry();  // handles live until exit
  return *instance;
}

const CublasLibrary& require_cublas() {
  const CublasLibrary* library = cublas_library();
  GROVE_CHECK_AS(DeviceError, library != nullptr, cuda_detail::cublas_load_error());
  return *library;
}

void check_cublas(const CublasLibrary& library, cublasStatus_t status, const char* call,
                  const std::string& doing) {
  if (status == CUBLAS_STATUS_SUCCESS) [[likely]] {
    return;
  }
  throw DeviceError(str_cat(call, " failed while ", doing, ": ", library.status_string(status),
                            " (cublasStatus ", static_cast<int>(status), ")"));
}

void use_device(int index) {
  int current = -1;
  GROVE_CUDA_CHECK(cudaGetDevice(&current), "reading the current device for cuBLAS");
  if (current != index) GROVE_CUDA_CHECK(cudaSetDevice(index), "making cuda:", index, " current");
}

// The handle of (device, stream), created on first use. Creation switches the
// thread to relaxed capture mode (Note [Allocating during capture] in
// cuda_backend.cc): the workspace is plain cudaMalloc memory outside every
// pool and graph, and cublasCreate's own set-up is not stream work.
cublasHandle_t handle_for(const CublasLibrary& library, Device device, StreamHandle stream) {
  GROVE_CHECK_AS(DeviceError, device.is_cuda(), "cuBLAS GEMM on ", device.str(),
                 ": cuBLAS runs on cuda devices only; use the compiler's host matmul for ",
                 device.str());
  GROVE_CHECK_AS(DeviceError, !stream.is_default(), "cuBLAS GEMM on the legacy default stream of ",
                 device.str(), ": pass a stream from DeviceContext::create_stream()");
  use_device(device.index);
  HandleRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto key = std::make_pair(device.index, static_cast<cudaStream_t>(stream.impl));
  if (auto it = r.handles.find(key); it != r.handles.end()) return it->second.handle;
  cuda_detail::RelaxedCaptureModeGuard relaxed;
  StreamHandleState state;
  std::string where = str_cat("setting up cuBLAS for a stream of ", device.str());
  check_cublas(library, library.create(&state.handle), "cublasCreate", where);
  try {
    check_cublas(library, library.set_stream(state.handle, key.second), "cublasSetStream", where);
    size_t bytes = workspace_bytes();
    if (bytes > 0) {
      GROVE_CUDA_CHECK(cudaMalloc(&state.workspace, bytes), "allocating the ", bytes,
                       "-byte cuBLAS workspace of a stream of ", device.str());
    }
    check_cublas(library, library.set_workspace(state.handle, state.workspace, bytes),
                 "cublasSetWorkspace", where);
  } catch (...) {
    library.destroy(state.handle);
    if (state.workspace != nullptr) cudaFree(state.workspace);
    throw;
  }
  r.handles.emplace(key, state);
  return state.handle;
}

cudaDataType cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      break;
  }
  throw DTypeError(
      str_cat("cuBLAS GEMM: dtype ", dtype_name(dtype), " is not supported; use f32, f16 or bf16"));
}

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

}  // namespace

bool cublas_available() { return cublas_library() != nullptr; }

std::string cublas_unavailable_reason() { return cuda_detail::cublas_load_error(); }

void prepare_gemm(Device device, StreamHandle stream) {
  handle_for(require_cublas(), device, stream);
}

void gemm(Device device, StreamHandle stream, const GemmArgs& g) {
  GROVE_CHECK_AS(DeviceError, device.is_cuda(), "cuBLAS GEMM on ", device.str(),
                 ": cuBLAS runs on cuda devices only; use the compiler's host matmul for ",
                 device.str());
  cudaDataType type = cuda_data_type(g.dtype);
  check_args(g);
  const CublasLibrary& library = require_cublas();
  cublasHandle_t handle = handle_for(library, device, stream);
  cublasOperation_t op_a = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_b = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  std::string doing = str_cat("computing a ", dtype_name(g.dtype), " GEMM (m=", g.m, ", n=", g.n,
                              ", k=", g.k, ", batch=", g.batch_count, ") on ", device.str());
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
  gemm(device, stream, swapped);
}

}  // namespace grove::runtime
