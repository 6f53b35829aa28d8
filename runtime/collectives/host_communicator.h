// The host implementation of Communicator for `sim` (and `cpu`) devices: the
// ranks are threads of one process, and a collective is a host kernel that
// meets the other ranks at a shared rendezvous. As a kernel it follows the
// sim stream rules: it runs in stream order, and during stream capture it is
// recorded and runs on every replay, exactly as NCCL's kernels do in a CUDA
// graph. Results are identical on every rank (ranks are reduced in rank order,
// in double precision for floating dtypes).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "runtime/collectives/communicator.h"

namespace grove::runtime::collectives {

// The meeting point of the ranks of one group (internal to the .cc).
class HostRendezvous;

// The rendezvous of group `group_id`, created by the first rank that asks and
// shared by every later one; world_size must agree. A rank that waits longer
// than `timeout` for the others fails with CommunicationError naming the
// missing ranks, and so does every later collective of the group.
std::shared_ptr<HostRendezvous> host_rendezvous(const std::string& group_id, int world_size,
                                                std::chrono::milliseconds timeout);

class HostCommunicator : public Communicator {
 public:
  HostCommunicator(std::shared_ptr<HostRendezvous> rendezvous, int rank, Device device);
  ~HostCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override;
  Device device() const override { return device_; }
  std::string kind() const override { return "host"; }
  void all_reduce(const std::vector<Buffer>& buffers, ReduceOp op, StreamHandle stream) override;

  // What the host kernel runs: meets the other ranks and reduces in place.
  void reduce_now(const std::vector<Buffer>& buffers, ReduceOp op);

 private:
  std::shared_ptr<HostRendezvous> rendezvous_;
  int rank_;
  Device device_;
};

}  // namespace grove::runtime::collectives
