// The cuBLAS entry points grove uses, resolved with dlopen/dlsym at first use
// so that no grove binary has a load-time dependency on libcublas (CI machines
// and the GPU bundle carry no CUDA libraries). Internal to runtime/cuda.
#pragma once

#include <cublasLt.h>
#include <cublas_api.h>

#include <string>

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

}  // namespace grove::runtime::cuda_detail
