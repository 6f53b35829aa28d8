// The cuBLAS entry points grove uses, resolved with dlopen/dlsym at first use
// so that no grove binary has a load-time dependency on libcublas (CI machines
// and the GPU bundle carry no CUDA libraries), and what every cuBLAS call of
// grove's BLAS shares: checking statuses and naming the GEMM in errors.
// Internal to runtime/cuda.
#pragma once

#include <cublasLt.h>
#include <cublas_api.h>

#include <iosfwd>
#include <string>

#include "runtime/blas.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace grove::runtime::cuda_detail {

struct CublasLibrary {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetWorkspace_v2) set_workspace = nullptr;
  // The C entry points; cublas_api.h also declares C++ overloads of these names.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
  using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t,
                                                  cublasOperation_t, int, int, int, const void*,
                                                  const void*, cudaDataType, int, long long,
                                                  const void*, cudaDataType, int, long long,
                                                  const void*, void*, cudaDataType, int, long long,
                                                  int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
  GemmStridedBatchedEx gemm_strided_batched_ex = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;

  // cuBLASLt, for GEMMs with epilogues (blas.h); `lt_ok` is false when a
  // symbol is missing (plain GEMMs still work).
  bool lt_ok = false;
  decltype(&::cublasLtCreate) lt_create = nullptr;
  decltype(&::cublasLtMatmulDescCreate) lt_desc_create = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) lt_desc_destroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) lt_desc_set = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) lt_layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) lt_layout_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) lt_preference_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) lt_preference_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) lt_preference_set = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) lt_heuristic = nullptr;
  decltype(&::cublasLtMatmul) lt_matmul = nullptr;
};

// The library, opened once per process; nullptr when it cannot be opened, and
// then `cublas_load_error()` says what was tried and why it failed.
const CublasLibrary* cublas_library();
const std::string& cublas_load_error();
// The library; throws DeviceError with cublas_load_error() when it is missing.
const CublasLibrary& require_cublas();

// What a GEMM call was doing, for error messages; formatted only when one is
// thrown (building the text on every GEMM cost about a microsecond of an
// eager call's launch time each).
struct GemmWhat {
  const GemmArgs& g;
  Device device;
};
std::ostream& operator<<(std::ostream& out, const GemmWhat& what);

// Throws DeviceError naming `call`, cuBLAS's status and what grove was `doing`
// (anything streamable: a GemmWhat, a string; formatted on failure only).
template <typename Doing>
void check_cublas(const CublasLibrary& library, cublasStatus_t status, const char* call,
                  const Doing& doing) {
  if (status == CUBLAS_STATUS_SUCCESS) [[likely]] {
    return;
  }
  throw DeviceError(str_cat(call, " failed while ", doing, ": ", library.status_string(status),
                            " (cublasStatus ", static_cast<int>(status), ")"));
}

// The cuBLAS data type of a GEMM's `dtype`; DTypeError for other than f32, f16, bf16.
cudaDataType cuda_data_type(DType dtype);

}  // namespace grove::runtime::cuda_detail
