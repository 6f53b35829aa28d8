// The NCCL entry points grove uses, resolved with dlopen/dlsym at first use
// through the same search as cuBLAS (library_loader.h), so that no grove
// binary depends on libnccl at load time: CI machines without NCCL build and
// run everything, and only a cuda collective asks for the library. Internal to
// runtime/cuda (it includes nccl.h, hence the CUDA runtime header).
#pragma once

#include <nccl.h>

#include <string>

namespace grove::runtime::collectives::nccl_detail {

struct NcclLibrary {
  decltype(&::ncclGetVersion) get_version = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclCommAbort) comm_abort = nullptr;
  decltype(&::ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclGetLastError) last_error = nullptr;
};

// The library, opened once per process. Throws CommunicationError saying what
// was tried and how to fix it when libnccl.so.2 cannot be opened.
const NcclLibrary& nccl_library();
// Whether libnccl.so.2 can be opened here (never throws).
bool nccl_available();

}  // namespace grove::runtime::collectives::nccl_detail
