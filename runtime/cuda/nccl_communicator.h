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
#pragma once

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
};

}  // namespace grove::runtime::collectives
