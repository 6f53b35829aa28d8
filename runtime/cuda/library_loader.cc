#include "runtime/cuda/library_loader.h"

#include <dlfcn.h>

#include <cstdlib>

#include "runtime/error.h"

namespace grove::runtime::cuda_detail {

std::vector<std::string> library_directories(const LibrarySearch& search) {
  std::vector<std::string> directories;
  auto add = [&](std::string directory) {
    if (!directory.empty() && directory.back() != '/') directory += '/';
    for (const std::string& known : directories) {
      if (known == directory) return;
    }
    directories.push_back(std::move(directory));
  };
  if (search.directory_variable != nullptr) {
    if (const char* dir = std::getenv(search.directory_variable); dir != nullptr && *dir != '\0') {
      add(dir);
    }
  }
  directories.push_back("");
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != '\0') {
    add(std::string(home) + "/lib64");
  }
  for (const std::string& directory : search.fallback_directories) add(directory);
  return directories;
}

void* open_shared_library(const std::string& soname, const LibrarySearch& search,
                          std::string& errors) {
  for (const std::string& directory : library_directories(search)) {
    std::string path = directory + soname;
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) return handle;
    const char* error = dlerror();
    errors += str_cat("\n  ", path, ": ", error != nullptr ? error : "not found");
  }
  return nullptr;
}

void* find_symbol(void* handle, const char* symbol, std::string& errors) {
  void* found = dlsym(handle, symbol);
  if (found == nullptr) errors += str_cat("\n  missing symbol ", symbol);
  return found;
}

}  // namespace grove::runtime::cuda_detail
