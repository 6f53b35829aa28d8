// The NCCL implementation of Communicator for `cuda` devices (here, under
// runtime/cuda, because nccl.h includes the CUDA runtime header). NCCL is opened
// with dlopen at first use (nccl_library.h); a missing library is a
// CommunicationError, never a load failure. NVLink multicast (NVLS) is never
// enabled: NCCL_NVLS_ENABLE is forced to 0 before any communicator is made.
//
// Note [One thread per GPU]: grove runs data-parallel ranks as threads of one
// process, one thread per GPU, each joining the group with
// ncclCommInitRankConfig and a shared unique id (or as processes, with the
// id passed through a file: both go through the same constructor). Threads
// fit grove's tree managers, which are per (device, thread): each rank's
// thread gets its own manager, capture stream and pool on its own GPU, and the
// compiled kernels, cuBLAS handles and the JIT cache are shared by the ranks.
// NCCL kernels are enqueued on the stream the caller passes (the rank's
// communication stream when the backward overlaps them, Note [Communication
// stream] in runtime/collectives/communication_stream.h) and are capturable,
// so a captured backward holds its all-reduces as graph nodes. The
// communicator is non-blocking (ncclConfig_t::blocking = 0) so that joining a
// group with a missing rank times out instead of hanging, and connections are
// made when the group forms (NCCL_RUNTIME_CONNECT=0 unless set), so that no
// collective blocks the host while a rank holds the tree's capture lock.
//
// Note [Communicators captured by graphs are never destroyed]: NCCL (2.26 and
// later) makes ncclCommDestroy wait until every CUDA graph that captured a
// collective of the communicator is destroyed. A rank that replaces its
// device's communicator (a second grove.torch.DistributedDataParallel, or
// grove_group_join again) or leaves the group while the earlier backward's
// graphs are alive (held by Python objects that only that thread could free)
// would spin there forever; the other ranks then wait on it in their next
// collective. This was the "grove_ddp_direct stall" of sessions 18 and 19 on
// two GPUs: any second grove DDP in a process after a first had captured its
// all-reduces hung (session 20's early call). So a communicator one of whose
// collectives a graph captured is never destroyed: its graphs may still be
// replayed, and their destruction later needs it. It is released at process
// exit with the rest of the process (a leak per replaced group, by design);
// one no graph captured is destroyed as before. Tests:
// DataParallel.ReplacingTheGroupWhileItsCapturedGraphsLiveFinishes
// (tests/distributed/data_parallel_test.cc, cuda with 2 GPUs, and sim) and the
// grove DDP variants one after another in gpu_ddp_door_test.py's WorldOfTwo.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "runtime/collectives/communicator.h"

namespace grove::runtime::collectives {

// A new NCCL unique id (128 bytes; rank 0 makes it, every rank needs it).
std::string nccl_unique_id();
// Whether libnccl.so.2 can be opened on this machine.
bool nccl_available();
// NCCL as the cuda platform's CollectiveLibrary (the functions above and
// NcclCommunicator); lives until exit.
CollectiveLibrary& nccl_collective_library();

class NcclCommunicator : public Communicator {
 public:
  // Joins the group `unique_id` as `rank` of `world_size` on cuda device
  // `device`; waits at most `timeout` for the other ranks.
  NcclCommunicator(Device device, int rank, int world_size, const std::string& unique_id,
                   std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  Device device() const override { return device_; }
  std::string kind() const override { return "nccl"; }
  void all_reduce(const std::vector<Buffer>& buffers, ReduceOp op, StreamHandle stream) override;

 private:
  // Polls the communicator until its pending operation finishes; `what` names it.
  void wait_ready(const std::string& what);

  Device device_;
  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  void* comm_ = nullptr;  // ncclComm_t
  // Whether a CUDA graph captured one of its collectives (Note [Communicators
  // captured by graphs are never destroyed]).
  std::atomic<bool> captured_{false};
};

}  // namespace grove::runtime::collectives
