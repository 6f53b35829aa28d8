// Joining a data-parallel group: which rank this is, how many ranks there are,
// and the group's unique id, passed the usual way.
//
//   Environment (one process or thread per rank):
//     GROVE_RANK=1 GROVE_WORLD_SIZE=2 GROVE_NCCL_ID_FILE=/tmp/run42.id
//     auto communicator = join_group(Device::parse("cuda:1"), RankConfig::from_environment());
//   Threads of one process (tests, `grove run --gpus N`):
//     join_local_group(device_of_rank, rank, world_size, "run42", timeout);
//
// Rank 0 makes the group's id (NCCL's unique id on cuda; the file's path names
// the group on sim) and writes it to the id file; the other ranks wait for the
// file, at most the timeout. Either way the communicator is installed as the
// device's (communicator.h: communicator_for), which the all_reduce op uses.
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
  // Where rank 0 writes the group id and the other ranks read it.
  std::string id_file;
  std::chrono::milliseconds timeout = default_collective_timeout();

  // From GROVE_RANK, GROVE_WORLD_SIZE and GROVE_NCCL_ID_FILE (and the
  // timeout variable). Throws ConfigError naming the variable when one is
  // missing or malformed, or the rank is outside [0, world size).
  static RankConfig from_environment();
};

// Makes this rank's communicator for `device` (NCCL on cuda, host on sim and
// cpu), installs it as the device's, and returns it.
std::shared_ptr<Communicator> join_group(Device device, const RankConfig& config);

// The same for ranks that are threads of one process: the id is exchanged in
// memory under `group_name` (each rank passes the same name).
std::shared_ptr<Communicator> join_local_group(Device device, int rank, int world_size,
                                               const std::string& group_name,
                                               std::chrono::milliseconds timeout);

// Uninstalls the communicator of `device` (the group's other ranks are not told).
void leave_group(Device device);

}  // namespace grove::runtime::collectives
