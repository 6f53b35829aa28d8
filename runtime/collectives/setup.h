// Joining a data-parallel group: which rank this is, how many ranks there are,
// and how the ranks find each other, passed the usual ways.
//
//   Processes, torchrun-style (one process per GPU, any number of machines):
//     RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.0.0.5 MASTER_PORT=29500 [LOCAL_RANK=1]
//     RankConfig config = RankConfig::from_environment();
//     join_group(Device{DeviceType::kCuda, config.device_index()}, config);
//   Processes, grove's own variables (ranks on one machine sharing a file):
//     GROVE_RANK=1 GROVE_WORLD_SIZE=2 GROVE_NCCL_ID_FILE=/tmp/run42.id
//   Threads of one process (tests, `grove run --gpus N`):
//     join_local_group(device_of_rank, rank, world_size, "run42", timeout);
//
// Over TCP (tcp_rendezvous.h), rank 0 listens on MASTER_PORT and the others
// connect to MASTER_ADDR:MASTER_PORT; rank 0 hands out the group id (NCCL's
// unique id on cuda). On cuda NCCL then forms the group itself; on sim and cpu
// the connections carry the collectives (socket_host_group.h), with results
// bitwise equal to the threaded ranks'. With the id file, rank 0 writes the id
// and the others wait for the file, at most the timeout (on sim the file's
// path only names an in-process group: ranks must be threads). Either way the
// communicator is installed as the device's (communicator.h:
// communicator_for), which the all_reduce op uses.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "runtime/collectives/communicator.h"

namespace grove::runtime::collectives {

// GROVE_COLLECTIVE_TIMEOUT_MS, or 120 s: how long a rank waits for the others.
std::chrono::milliseconds default_collective_timeout();

struct RankConfig {
  int rank = 0;
  int world_size = 1;
  // Where rank 0 writes the group id and the other ranks read it (used when
  // master_addr is empty).
  std::string id_file;
  std::chrono::milliseconds timeout = default_collective_timeout();
  // The TCP rendezvous: rank 0 listens on master_port (on every interface),
  // the others connect to master_addr:master_port. Used when master_addr is set.
  std::string master_addr;
  int master_port = 0;
  // The device index on this machine (LOCAL_RANK); -1 when unset.
  int local_rank = -1;

  // LOCAL_RANK where set, else the rank.
  int device_index() const { return local_rank >= 0 ? local_rank : rank; }

  // From the environment, either scheme; the GROVE_* variables win: where any
  // of GROVE_RANK, GROVE_WORLD_SIZE, GROVE_NCCL_ID_FILE is set, the id-file
  // scheme is read (all three required) and RANK, WORLD_SIZE, MASTER_ADDR and
  // MASTER_PORT are ignored, so a grove launch inside another launcher's
  // environment keeps its meaning. Otherwise RANK, WORLD_SIZE, MASTER_ADDR and
  // MASTER_PORT are all required. LOCAL_RANK and GROVE_COLLECTIVE_TIMEOUT_MS
  // are read in both. Throws ConfigError naming the variable when one is
  // missing or malformed, or the rank is outside [0, world size).
  static RankConfig from_environment();
};

// Whether this process was started as one rank of a group: RANK, WORLD_SIZE,
// GROVE_RANK or GROVE_WORLD_SIZE is set.
bool launched_as_rank();

// Makes this rank's communicator for `device` (NCCL on cuda, host on sim and
// cpu: over TCP when config.master_addr is set), installs it as the device's,
// and returns it. Throws CommunicationError naming the rank, the variable or
// the endpoint when the group cannot form within config.timeout.
std::shared_ptr<Communicator> join_group(Device device, const RankConfig& config);

// The same for ranks that are threads of one process: the id is exchanged in
// memory under `group_name` (each rank passes the same name).
std::shared_ptr<Communicator> join_local_group(Device device, int rank, int world_size,
                                               const std::string& group_name,
                                               std::chrono::milliseconds timeout);

// Note [Group ids handed out by the caller]: ranks that already share a
// channel (torch.distributed under torchrun, grove.torch.DistributedDataParallel)
// form a grove group without a second rendezvous port or file: rank 0 makes
// the id with new_group_id, the caller hands it to every rank, and each calls
// join_group_by_id. On cuda the id is NCCL's unique id. On sim and cpu (no
// collective library) it is "tcp:ADDRESS:PORT", a port found free on rank 0
// (MASTER_ADDR or 127.0.0.1), where rank 0 then listens and the others
// connect (the socket host group). Test: tests/python/grove_ddp_test.py.
std::string new_group_id(Device device);

// Joins the group `group_id` (from new_group_id on rank 0) as `rank` of
// `world_size`, installs the communicator as the device's and returns it.
// Throws ConfigError for a rank outside [0, world_size) or an id of the wrong
// kind, CommunicationError when the group cannot form within `timeout`.
std::shared_ptr<Communicator> join_group_by_id(Device device, int rank, int world_size,
                                               const std::string& group_id,
                                               std::chrono::milliseconds timeout);

// Uninstalls the communicator of `device` (the group's other ranks are not told).
void leave_group(Device device);

}  // namespace grove::runtime::collectives
