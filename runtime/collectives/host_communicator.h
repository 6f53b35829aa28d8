// The host implementation of Communicator for `sim` (and `cpu`) devices: a
// collective is a host kernel that meets the other ranks in a HostGroup
// (host_group.h): a shared rendezvous when the ranks are threads of one
// process, TCP connections when they are processes (socket_host_group.h). As
// a kernel it follows the sim stream rules: it runs in stream order, and during
// stream capture it is recorded and runs on every replay, exactly as NCCL's
// kernels do in a CUDA graph. Results are identical on every rank and in
// either group (Note [Host reduction order], host_reduction.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "runtime/collectives/communicator.h"
#include "runtime/collectives/host_group.h"

namespace grove::runtime::collectives {

// The rendezvous of group `group_id`, created by the first rank that asks and
// shared by every later one; world_size must agree. A rank that waits longer
// than `timeout` for the others fails with CommunicationError naming the
// missing ranks, and so does every later collective of the group.
std::shared_ptr<HostGroup> host_rendezvous(const std::string& group_id, int world_size,
                                           std::chrono::milliseconds timeout);

class HostCommunicator : public Communicator {
 public:
  HostCommunicator(std::shared_ptr<HostGroup> group, int rank, Device device);
  ~HostCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override;
  Device device() const override { return device_; }
  std::string kind() const override { return "host"; }
  void all_reduce(const std::vector<Buffer>& buffers, ReduceOp op, StreamHandle stream) override;

  // What the host kernel runs: meets the other ranks and reduces in place.
  // (Host memory: sim and cpu buffers are host memory.)
  void reduce_now(const std::vector<Buffer>& buffers, ReduceOp op);

 private:
  std::shared_ptr<HostGroup> group_;
  int rank_;
  Device device_;
};

}  // namespace grove::runtime::collectives
