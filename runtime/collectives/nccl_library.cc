#include "runtime/collectives/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include "runtime/collectives/communicator.h"

namespace grove::runtime::collectives::nccl_detail {
namespace {

struct Loaded {
  NcclLibrary library;
  bool ok = false;
  std::string error;
};

// GROVE_NCCL_DIR first, then the dynamic loader's own search (LD_LIBRARY_PATH,
// ld.so.cache: Debian's libnccl2 lives in /usr/lib/x86_64-linux-gnu), then
// the toolkit's directory.
std::vector<std::string> candidates() {
  std::vector<std::string> paths;
  if (const char* dir = std::getenv("GROVE_NCCL_DIR"); dir != nullptr && *dir != '\0') {
    paths.push_back(std::string(dir) + "/libnccl.so.2");
  }
  paths.push_back("libnccl.so.2");
  paths.push_back("/usr/lib/x86_64-linux-gnu/libnccl.so.2");
  paths.push_back("/usr/local/cuda/lib64/libnccl.so.2");
  return paths;
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
  void* handle = nullptr;
  for (const std::string& path : candidates()) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle != nullptr) break;
    const char* error = dlerror();
    errors += str_cat("\n  ", path, ": ", error != nullptr ? error : "not found");
  }
  if (handle != nullptr) {
    NcclLibrary& l = loaded.library;
    bool ok = resolve(handle, "ncclGetVersion", l.get_version, errors);
    ok &= resolve(handle, "ncclGetUniqueId", l.get_unique_id, errors);
    ok &= resolve(handle, "ncclCommInitRankConfig", l.comm_init_rank_config, errors);
    ok &= resolve(handle, "ncclCommDestroy", l.comm_destroy, errors);
    ok &= resolve(handle, "ncclCommAbort", l.comm_abort, errors);
    ok &= resolve(handle, "ncclCommGetAsyncError", l.comm_get_async_error, errors);
    ok &= resolve(handle, "ncclAllReduce", l.all_reduce, errors);
    ok &= resolve(handle, "ncclGroupStart", l.group_start, errors);
    ok &= resolve(handle, "ncclGroupEnd", l.group_end, errors);
    ok &= resolve(handle, "ncclGetErrorString", l.error_string, errors);
    ok &= resolve(handle, "ncclGetLastError", l.last_error, errors);
    loaded.ok = ok;
  }
  if (!loaded.ok) {
    loaded.error = str_cat("cannot use NCCL (libnccl.so.2, version 2.18 or later):", errors,
                           "\nInstall NCCL (Debian: libnccl2), or point GROVE_NCCL_DIR at the "
                           "directory that holds libnccl.so.2");
  }
  return loaded;
}

const Loaded& loaded_once() {
  static const Loaded* instance = new Loaded(load());  // never unloaded
  return *instance;
}

}  // namespace

const NcclLibrary& nccl_library() {
  const Loaded& loaded = loaded_once();
  GROVE_CHECK_AS(CommunicationError, loaded.ok, loaded.error);
  return loaded.library;
}

bool nccl_available() { return loaded_once().ok; }

}  // namespace grove::runtime::collectives::nccl_detail
