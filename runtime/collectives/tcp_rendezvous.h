// The TCP rendezvous of ranks that are processes (torchrun-style launch):
// rank 0 listens on MASTER_PORT, every other rank connects to
// MASTER_ADDR:MASTER_PORT (retrying while rank 0 is not up yet) and says which
// rank of which world size it is; once all have come, rank 0 answers each with
// the group id (NCCL's unique id on cuda, nothing on sim). The connections
// stay open: the socket host group (socket_host_group.h) runs sim collectives
// over them; NCCL makes its own and they are closed.
//
// Every failure is a CommunicationError naming the rank or the variable: the
// port is in use, a rank never came (rank 0 names the missing ranks), rank 0
// was never reached, two ranks claim one rank, world sizes differ. Rank 0
// tells the ranks that did come why the group failed, so every process fails
// with the same message instead of waiting out its timeout.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "runtime/collectives/tcp_socket.h"

namespace grove::runtime::collectives {

struct TcpGroup {
  int rank = 0;
  int world_size = 1;
  std::string endpoint;  // "127.0.0.1:29500": names the group in messages
  std::string group_id;  // the bytes rank 0 handed out
  // Rank 0: links[r] is rank r's connection (links[0] is unused). Other
  // ranks: links[0] is the connection to rank 0.
  std::vector<TcpConnection> links;
};

// Rank 0's side: waits at most `timeout` for ranks 1 .. world_size - 1 to
// connect to `listener`, then sends them the group id `make_group_id` returns
// (empty when it is null). It is called once every rank has come, so that a
// failure to make it (no NCCL) reaches the waiting ranks as its message.
TcpGroup accept_ranks(TcpListener& listener, const std::string& endpoint, int world_size,
                      const std::function<std::string()>& make_group_id,
                      std::chrono::milliseconds timeout);

// Rank `rank`'s side (rank > 0): connects to rank 0 at `address`:`port`,
// trying for at most `timeout`, and waits at most `timeout` after connecting
// for the group id.
TcpGroup connect_to_rank_zero(const std::string& address, int port, int rank, int world_size,
                              std::chrono::milliseconds timeout);

}  // namespace grove::runtime::collectives
