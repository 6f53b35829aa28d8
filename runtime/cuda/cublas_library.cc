#include "runtime/cuda/cublas_library.h"

#include <ostream>

#include "runtime/compile_profile.h"
#include "runtime/cuda/library_loader.h"
#include "runtime/error.h"

namespace grove::runtime::cuda_detail {
namespace {

struct Loaded {
  CublasLibrary library;
  bool ok = false;
  std::string error;
};

// GROVE_CUBLAS_DIR, the loader's own search, $CUDA_HOME/lib64, then the
// toolkit's usual places (library_loader.h).
const LibrarySearch kCublasSearch{"GROVE_CUBLAS_DIR",
                                  {"/usr/local/cuda/lib64", "/usr/local/cuda-13/lib64"}};

// RTLD_GLOBAL (open_shared_library) so that libcublas finds the libcublasLt
// already loaded.
void* open_library(const char* soname, std::string& errors) {
  return open_shared_library(soname, kCublasSearch, errors);
}

Loaded load() {
  CompileEventTimer timer("blas setup", "dlopen cuBLAS and cuBLASLt");
  Loaded loaded;
  std::string errors;
  void* lt = open_library("libcublasLt.so.13", errors);
  void* handle = lt != nullptr ? open_library("libcublas.so.13", errors) : nullptr;
  if (handle != nullptr) {
    CublasLibrary& l = loaded.library;
    bool ok = resolve_symbol(handle, "cublasCreate_v2", l.create, errors);
    ok &= resolve_symbol(handle, "cublasDestroy_v2", l.destroy, errors);
    ok &= resolve_symbol(handle, "cublasSetStream_v2", l.set_stream, errors);
    ok &= resolve_symbol(handle, "cublasSetWorkspace_v2", l.set_workspace, errors);
    ok &= resolve_symbol(handle, "cublasGemmEx", l.gemm_ex, errors);
    ok &= resolve_symbol(handle, "cublasGemmStridedBatchedEx", l.gemm_strided_batched_ex, errors);
    ok &= resolve_symbol(handle, "cublasGetStatusString", l.status_string, errors);
    loaded.ok = ok;
    std::string lt_errors;
    bool lt_ok = resolve_symbol(lt, "cublasLtCreate", l.lt_create, lt_errors);
    lt_ok &= resolve_symbol(lt, "cublasLtMatmulDescCreate", l.lt_desc_create, lt_errors);
    lt_ok &= resolve_symbol(lt, "cublasLtMatmulDescDestroy", l.lt_desc_destroy, lt_errors);
    lt_ok &= resolve_symbol(lt, "cublasLtMatmulDescSetAttribute", l.lt_desc_set, lt_errors);
    lt_ok &= resolve_symbol(lt, "cublasLtMatrixLayoutCreate", l.lt_layout_create, lt_errors);
    lt_ok &= resolve_symbol(lt, "cublasLtMatrixLayoutDestroy", l.lt_layout_destroy, lt_errors);
    lt_ok &=
        resolve_symbol(lt, "cublasLtMatmulPreferenceCreate", l.lt_preference_create, lt_errors);
    lt_ok &=
        resolve_symbol(lt, "cublasLtMatmulPreferenceDestroy", l.lt_preference_destroy, lt_errors);
    lt_ok &=
        resolve_symbol(lt, "cublasLtMatmulPreferenceSetAttribute", l.lt_preference_set, lt_errors);
    lt_ok &= resolve_symbol(lt, "cublasLtMatmulAlgoGetHeuristic", l.lt_heuristic, lt_errors);
    lt_ok &= resolve_symbol(lt, "cublasLtMatmul", l.lt_matmul, lt_errors);
    l.lt_ok = lt_ok;
  }
  if (!loaded.ok) {
    loaded.error = str_cat(
        "cannot use cuBLAS 13 (libcublas.so.13 and libcublasLt.so.13 from the CUDA Toolkit):",
        errors,
        "\nInstall the CUDA 13 toolkit's cuBLAS, or point GROVE_CUBLAS_DIR at the "
        "directory that holds it");
  }
  return loaded;
}

const Loaded& loaded_once() {
  static const Loaded* instance = new Loaded(load());  // never unloaded
  return *instance;
}

}  // namespace

const CublasLibrary* cublas_library() {
  const Loaded& loaded = loaded_once();
  return loaded.ok ? &loaded.library : nullptr;
}

const std::string& cublas_load_error() { return loaded_once().error; }

const CublasLibrary& require_cublas() {
  const CublasLibrary* library = cublas_library();
  GROVE_CHECK_AS(DeviceError, library != nullptr, cublas_load_error());
  return *library;
}

std::ostream& operator<<(std::ostream& out, const GemmWhat& what) {
  const GemmArgs& g = what.g;
  return out << "computing a " << dtype_name(g.dtype) << " GEMM (m=" << g.m << ", n=" << g.n
             << ", k=" << g.k << ", batch=" << g.batch_count << ", epilogue "
             << gemm_epilogue_name(g.epilogue) << ") on " << what.device.str();
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

}  // namespace grove::runtime::cuda_detail
