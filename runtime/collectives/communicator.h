// Communicator: one rank's handle on a group of devices that reduce buffers
// together (data-parallel training). A collective is enqueued on a stream of
// the rank's device, like a kernel: on cuda it is NCCL (captured into a CUDA
// graph like any kernel), on sim a host kernel that meets the other ranks'
// threads at a rendezvous. Every rank must issue the same collectives in the
// same order with the same buffer shapes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/platform.h"

namespace grove::runtime::collectives {

// A rank is missing, a collective did not match across ranks, or the
// collective library (NCCL) failed or is absent.
class CommunicationError : public Error {
 public:
  using Error::Error;
};

enum class ReduceOp : uint8_t { kSum, kMean };

const char* reduce_op_name(ReduceOp op);  // "sum", "mean"
// Parses "sum" / "mean"; throws grove::Error otherwise.
ReduceOp parse_reduce_op(const std::string& name);

// One device buffer of a collective: `count` elements of `dtype` at `data`.
struct Buffer {
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = DType::kF32;
};

// Note [Adjacent buffers reduce as one]: a bucket's buffers that lie back to
// back in memory (same dtype, each starting where the one before ends) are
// reduced as one buffer: one NCCL all-reduce of the whole span instead of a
// group of small ones, each of which pays its own synchronization between the
// ranks. The data-parallel trainer lays every bucket's gradient buffers out
// back to back for this (Note [Gradient bucket in one buffer] in
// training/trainer.h). Reducing a span element-wise is the same as reducing its
// pieces, so results are unchanged. Tested by
// Collectives.AdjacentBuffersCoalesceIntoOne.
std::vector<Buffer> coalesce_adjacent(const std::vector<Buffer>& buffers);

// Note [Communicators captured by graphs are never destroyed]: a graph that
// captured a collective holds the communicator it ran on: on sim the host
// kernel's argument is the HostCommunicator itself, on cuda NCCL's captured
// plan, and NCCL (2.26 and later) makes ncclCommDestroy wait until every graph
// that captured one of the communicator's collectives is destroyed. A rank
// that replaces its device's communicator (a second
// grove.torch.DistributedDataParallel, or grove_group_join again) or leaves
// the group while an earlier backward's graphs live (Python objects that only
// that thread could free) would, on cuda, spin in ncclCommDestroy forever, the
// other ranks waiting on it in their next collective; on sim a replay of such
// a graph would call a destroyed communicator. This was the "grove_ddp_direct
// stall" of sessions 18 and 19 on two GPUs: any second grove DDP of a process,
// after a first one had captured its all-reduces, hung (session 20's early
// call: grove_ddp_direct alone finished; gpu_ddp_door_test's WorldOfTwo hung
// at grove_ddp_fn, its second grove DDP). So the all_reduce op marks the
// communicator when it runs inside a capture, and set_communicator keeps a
// marked communicator it replaces or removes alive until the process exits
// (a leak per such group, by design): the graphs may still replay, and their
// destruction needs it. One no graph captured is destroyed as before. Tests:
// DataParallel.ReplacingTheGroupWhileItsCapturedGraphsLiveFinishes
// (tests/distributed/data_parallel_test.cc: sim, and cuda with 2 GPUs) and
// the grove DDP variants one after another in gpu_ddp_door_test.py's WorldOfTwo.
class Communicator {
 public:
  virtual ~Communicator() = default;

  // Note [Communicators captured by graphs are never destroyed].
  void note_captured() { captured_.store(true); }
  bool captured() const { return captured_.load(); }

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Device device() const = 0;
  // "nccl" or "host".
  virtual std::string kind() const = 0;

  // Reduces each buffer in place across the ranks (element-wise, `op`), as ONE
  // collective (a bucket): NCCL groups the calls, the host implementation
  // meets the other ranks once. Enqueued on `stream` of device(); returns
  // without waiting where the device is asynchronous.
  virtual void all_reduce(const std::vector<Buffer>& buffers, ReduceOp op, StreamHandle stream) = 0;

 private:
  std::atomic<bool> captured_{false};
};

// A platform's own collective library (NCCL on cuda; runtime/platform_factory.h
// finds it for a device): the id rank 0 makes and every rank joins the group
// with, and the communicator of one rank. Devices without one (sim, cpu) use
// HostCommunicator.
class CollectiveLibrary {
 public:
  virtual ~CollectiveLibrary() = default;

  // Whether the library can be opened on this machine.
  virtual bool available() = 0;
  // A new group id (opaque bytes); throws CommunicationError on failure.
  virtual std::string unique_id() = 0;
  // Joins the group `unique_id` as `rank` of `world_size` on `device`;
  // waits at most `timeout` for the other ranks.
  virtual std::shared_ptr<Communicator> join(Device device, int rank, int world_size,
                                             const std::string& unique_id,
                                             std::chrono::milliseconds timeout) = 0;
};

// The communicator collectives on `device` use (set by the rank that owns the
// device; one per device per process). Throws CommunicationError naming the
// device when none was set.
Communicator& communicator_for(Device device);
bool has_communicator(Device device);
// Installs (or, with nullptr, removes) the communicator of `device`; the one
// it replaces or removes is kept alive until exit when a graph captured one of
// its collectives (Note [Communicators captured by graphs are never destroyed]).
void set_communicator(Device device, std::shared_ptr<Communicator> communicator);

}  // namespace grove::runtime::collectives
