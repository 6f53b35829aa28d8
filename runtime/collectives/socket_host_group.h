// SocketHostGroup: the HostGroup of ranks that are processes (one per device,
// launched torchrun-style), over the connections the TCP rendezvous left open
// (tcp_rendezvous.h). An all_reduce gathers every rank's bytes at rank 0,
// which reduces them in rank order (Note [Host reduction order]) into its own
// buffers and sends the result back to each rank: the same bits the threaded
// HostRendezvous gives, so `grove run --train` as N processes reaches the
// losses of `--gpus N`. Wrapped in a HostCommunicator it is the socket
// communicator of sim and cpu ranks (make_socket_communicator).
//
// Every wait is bounded by the group's timeout; a rank that never arrives,
// closes its connection (exits, crashes) or reduces other buffers fails the
// collective with a CommunicationError naming it, on rank 0 and (told by rank
// 0, or by the closed connection) on every other rank. The group is unusable
// after a failure. While it waits it lets go of the locks the thread marked
// as held (Note [Waiting under the capture lock]).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/collectives/host_communicator.h"
#include "runtime/collectives/host_group.h"
#include "runtime/collectives/tcp_rendezvous.h"

namespace grove::runtime::collectives {

class SocketHostGroup : public HostGroup {
 public:
  SocketHostGroup(TcpGroup links, std::chrono::milliseconds timeout);

  std::string name() const override { return "tcp:" + links_.endpoint; }
  int world_size() const override { return links_.world_size; }
  // `rank` must be the rank this group's connections belong to.
  void all_reduce(int rank, const std::vector<Buffer>& buffers, ReduceOp op) override;

 private:
  // Rank 0: gather, reduce, send the result back.
  void reduce_at_rank_zero(const std::vector<Buffer>& buffers, ReduceOp op);
  // Other ranks: send this rank's bytes, receive the result.
  void contribute(const std::vector<Buffer>& buffers, ReduceOp op);
  // Marks the group failed, closes every connection (so the peers learn it at
  // once) and throws `reason`.
  [[noreturn]] void fail(const std::string& reason);
  std::string where() const;  // "all_reduce of group '...' (world size N) at collective #k"

  TcpGroup links_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  int64_t collective_ = 0;  // the current collective, counted from 1
  std::string failure_;
};

// A HostCommunicator for `device` (sim or cpu) whose collectives run over
// `links`: the communicator of a rank that is a process.
std::shared_ptr<HostCommunicator> make_socket_communicator(TcpGroup links, Device device,
                                                           std::chrono::milliseconds timeout);

}  // namespace grove::runtime::collectives
