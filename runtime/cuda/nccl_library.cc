#include "runtime/cuda/nccl_library.h"

#include "runtime/collectives/communicator.h"
#include "runtime/cuda/library_loader.h"

namespace grove::runtime::collectives::nccl_detail {
namespace {

struct Loaded {
  NcclLibrary library;
  bool ok = false;
  std::string error;
};

// GROVE_NCCL_DIR first, then the dynamic loader's own search (LD_LIBRARY_PATH,
// ld.so.cache: Debian's libnccl2 lives in /usr/lib/x86_64-linux-gnu), then
// the toolkit's directories (library_loader.h).
const cuda_detail::LibrarySearch kNcclSearch{
    "GROVE_NCCL_DIR", {"/usr/lib/x86_64-linux-gnu", "/usr/local/cuda/lib64"}};

Loaded load() {
  Loaded loaded;
  std::string errors;
  void* handle = cuda_detail::open_shared_library("libnccl.so.2", kNcclSearch, errors);
  if (handle != nullptr) {
    NcclLibrary& l = loaded.library;
    bool ok = cuda_detail::resolve_symbol(handle, "ncclGetVersion", l.get_version, errors);
    ok &= cuda_detail::resolve_symbol(handle, "ncclGetUniqueId", l.get_unique_id, errors);
    ok &= cuda_detail::resolve_symbol(handle, "ncclCommInitRankConfig", l.comm_init_rank_config,
                                      errors);
    ok &= cuda_detail::resolve_symbol(handle, "ncclCommDestroy", l.comm_destroy, errors);
    ok &= cuda_detail::resolve_symbol(handle, "ncclCommAbort", l.comm_abort, errors);
    ok &= cuda_detail::resolve_symbol(handle, "ncclCommGetAsyncError", l.comm_get_async_error,
                                      errors);
    ok &= cuda_detail::resolve_symbol(handle, "ncclAllReduce", l.all_reduce, errors);
    ok &= cuda_detail::resolve_symbol(handle, "ncclGroupStart", l.group_start, errors);
    ok &= cuda_detail::resolve_symbol(handle, "ncclGroupEnd", l.group_end, errors);
    ok &= cuda_detail::resolve_symbol(handle, "ncclGetErrorString", l.error_string, errors);
    ok &= cuda_detail::resolve_symbol(handle, "ncclGetLastError", l.last_error, errors);
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
