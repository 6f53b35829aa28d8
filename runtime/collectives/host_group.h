// HostGroup: where the ranks of a host collective meet. HostCommunicator's
// host kernel (the part that follows the sim stream rules) hands each
// all_reduce to its group, which exchanges the ranks' bytes and reduces them:
// HostRendezvous when the ranks are threads of one process
// (host_communicator.h: host_rendezvous), SocketHostGroup when they are
// processes that met over TCP (socket_host_group.h). Both reduce in the same
// order and precision (Note [Host reduction order], host_reduction.h).
#pragma once

#include <string>
#include <vector>

#include "runtime/collectives/communicator.h"

namespace grove::runtime::collectives {

class HostGroup {
 public:
  virtual ~HostGroup() = default;

  // Names the group in messages ("local:grove-run", "tcp:127.0.0.1:29500").
  virtual std::string name() const = 0;
  virtual int world_size() const = 0;
  // Meets the other ranks and reduces `buffers` (host memory) in place, as one
  // collective. Throws CommunicationError when a rank is missing, gone, or
  // reduces other buffers; the group is unusable after that.
  virtual void all_reduce(int rank, const std::vector<Buffer>& buffers, ReduceOp op) = 0;
};

}  // namespace grove::runtime::collectives
