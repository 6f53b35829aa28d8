// Opening an NVIDIA shared library (cuBLAS, NCCL) at run time with dlopen and
// resolving its entry points with dlsym, so that no grove binary depends on
// the library at load time: CI machines and the GPU bundle carry none, and
// only the first call that needs one asks for it. The library loaders
// (cublas_library.cc, nccl_library.cc) share this search; each collects what
// it tried into `errors` so that its own error message can list it.
#pragma once

#include <string>
#include <vector>

namespace grove::runtime::cuda_detail {

// Where to look for a library, in order: the directory named by the
// environment variable `directory_variable` (when set), the dynamic loader's
// own search (LD_LIBRARY_PATH, ld.so.cache), $CUDA_HOME/lib64, then each of
// `fallback_directories`.
struct LibrarySearch {
  const char* directory_variable = nullptr;  // e.g. "GROVE_CUBLAS_DIR"
  std::vector<std::string> fallback_directories;
};

// The directories `search` stands for, each ending in '/' ("" for the
// loader's own search).
std::vector<std::string> library_directories(const LibrarySearch& search);

// dlopens `soname` (RTLD_NOW | RTLD_GLOBAL) from the first directory that has
// it; nullptr when none does, with one line per attempt appended to `errors`.
void* open_shared_library(const std::string& soname, const LibrarySearch& search,
                          std::string& errors);

// dlsym; nullptr when missing, with a line appended to `errors`.
void* find_symbol(void* handle, const char* symbol, std::string& errors);

// Resolves `symbol` into the function pointer `function`; false when missing.
template <typename Function>
bool resolve_symbol(void* handle, const char* symbol, Function& function, std::string& errors) {
  function = reinterpret_cast<Function>(find_symbol(handle, symbol, errors));
  return function != nullptr;
}

}  // namespace grove::runtime::cuda_detail
