#include "runtime/cuda/cublas_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "runtime/error.h"

namespace grove::runtime::cuda_detail {
namespace {

struct Loaded {
  CublasLibrary library;
  bool ok = false;
  std::string error;
};

// Where to look, in order: GROVE_CUBLAS_DIR, the dynamic loader's own search
// (LD_LIBRARY_PATH, ld.so.cache), then the usual toolkit locations.
std::vector<std::string> candidate_directories() {
  std::vector<std::string> directories;
  if (const char* dir = std::getenv("GROVE_CUBLAS_DIR"); dir != nullptr && *dir != '\0') {
    directories.push_back(std::string(dir) + "/");
  }
  directories.push_back("");
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != '\0') {
    directories.push_back(std::string(home) + "/lib64/");
  }
  directories.push_back("/usr/local/cuda/lib64/");
  directories.push_back("/usr/local/cuda-13/lib64/");
  return directories;
}

// Opens `soname` from the first directory that has it; RTLD_GLOBAL so that
// libcublas finds the libcublasLt already loaded.
void* open_library(const char* soname, std::string& errors) {
  for (const std::string& directory : candidate_directories()) {
    std::string path = directory + soname;
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return handle;
    const char* error = dlerror();
    errors += str_cat("\n  ", path, ": ", error != nullptr ? error : "not found");
  }
  return nullptr;
}

template <typename Function>
bool resolve(void* handle, const char* symbol, Function& function, std::string& errors) {
  function = reinterpret_cast<Function>(dlsym(handle, symbol));
  if (function == nullptr) errors += str_cat("\n  missing symbol ", symbol);
  return function != nullptr;
}

Loaded load() {
  Loaded loaded;
  std::string errors;
  void* lt = open_library("libcublasLt.so.13", errors);
  void* handle = lt != nullptr ? open_library("libcublas.so.13", errors) : nullptr;
  if (handle != nullptr) {
    CublasLibrary& l = loaded.library;
    bool ok = resolve(handle, "cublasCreate_v2", l.create, errors);
    ok &= resolve(handle, "cublasDestroy_v2", l.destroy, errors);
    ok &= resolve(handle, "cublasSetStream_v2", l.set_stream, errors);
    ok &= resolve(handle, "cublasSetWorkspace_v2", l.set_workspace, errors);
    ok &= resolve(handle, "cublasGemmEx", l.gemm_ex, errors);
    ok &= resolve(handle, "cublasGemmStridedBatchedEx", l.gemm_strided_batched_ex, errors);
    ok &= resolve(handle, "cublasGetStatusString", l.status_string, errors);
    loaded.ok = ok;
    std::string lt_errors;
    bool lt_ok = resolve(lt, "cublasLtCreate", l.lt_create, lt_errors);
    lt_ok &= resolve(lt, "cublasLtMatmulDescCreate", l.lt_desc_create, lt_errors);
    lt_ok &= resolve(lt, "cublasLtMatmulDescDestroy", l.lt_desc_destroy, lt_errors);
    lt_ok &= resolve(lt, "cublasLtMatmulDescSetAttribute", l.lt_desc_set, lt_errors);
    lt_ok &= resolve(lt, "cublasLtMatrixLayoutCreate", l.lt_layout_create, lt_errors);
    lt_ok &= resolve(lt, "cublasLtMatrixLayoutDestroy", l.lt_layout_destroy, lt_errors);
    lt_ok &= resolve(lt, "cublasLtMatmulPreferenceCreate", l.lt_preference_create, lt_errors);
    lt_ok &= resolve(lt, "cublasLtMatmulPreferenceDestroy", l.lt_preference_destroy, lt_errors);
    lt_ok &= resolve(lt, "cublasLtMatmulPreferenceSetAttribute", l.lt_preference_set, lt_errors);
    lt_ok &= resolve(lt, "cublasLtMatmulAlgoGetHeuristic", l.lt_heuristic, lt_errors);
    lt_ok &= resolve(lt, "cublasLtMatmul", l.lt_matmul, lt_errors);
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

}  // namespace grove::runtime::cuda_detail
