#include "runtime/collectives/tcp_rendezvous.h"

#include <cstdint>
#include <cstring>

#include "runtime/collectives/communicator.h"

namespace grove::runtime::collectives {
namespace {

// What a rank sends rank 0 first. Fields travel in host byte order: the ranks
// of one group run the same build on hosts of one byte order.
struct Hello {
  char magic[8];
  int32_t rank;
  int32_t world_size;
};
constexpr char kHelloMagic[8] = {'g', 'r', 'o', 'v', 'e', '-', 'r', '1'};

// Rank 0's answer: status, then `length` bytes (the group id, or the reason).
struct ReplyHeader {
  uint32_t ok;
  uint32_t reserved;
  uint64_t length;
};
constexpr uint64_t kMaxReplyBytes = 1 << 20;

void send_reply(TcpConnection& link, bool ok, const std::string& bytes, Deadline deadline) {
  ReplyHeader header{ok ? 1u : 0u, 0, bytes.size()};
  // A rank that is gone already learns nothing; the others still get told.
  if (link.send_all(&header, sizeof(header), deadline) == Transfer::kDone) {
    link.send_all(bytes.data(), bytes.size(), deadline);
  }
}

std::string missing_ranks(const std::vector<TcpConnection>& links) {
  std::string missing;
  for (size_t r = 1; r < links.size(); ++r) {
    if (!links[r].is_open()) {
      missing += str_cat(missing.empty() ? "" : ", ", r);
    }
  }
  return missing;
}

// Tells every rank that came why the group failed, then throws it.
[[noreturn]] void fail_group(std::vector<TcpConnection>& links, const std::string& reason) {
  const Deadline deadline = deadline_after(std::chrono::milliseconds(1000));
  for (TcpConnection& link : links) {
    if (link.is_open()) {
      send_reply(link, false, reason, deadline);
    }
  }
  throw CommunicationError(reason);
}

}  // namespace

TcpGroup accept_ranks(TcpListener& listener, const std::string& endpoint, int world_size,
                      const std::function<std::string()>& make_group_id,
                      std::chrono::milliseconds timeout) {
  TcpGroup group;
  group.rank = 0;
  group.world_size = world_size;
  group.endpoint = endpoint;
  group.links.resize(static_cast<size_t>(world_size));
  const Deadline deadline = deadline_after(timeout);
  for (int joined = 1; joined < world_size;) {
    std::optional<TcpConnection> link = listener.accept(deadline);
    if (!link) {
      fail_group(group.links,
                 str_cat("rank 0 of ", world_size, " waited ", timeout.count(), " ms at ", endpoint,
                         " for rank(s) ", missing_ranks(group.links),
                         ", which never connected; start every rank with WORLD_SIZE=", world_size,
                         ", its own RANK and the same MASTER_ADDR and MASTER_PORT (raise "
                         "GROVE_COLLECTIVE_TIMEOUT_MS if a rank merely starts late)"));
    }
    Hello hello{};
    // Something else on the port (not a grove rank) is dropped; the wait goes on.
    if (link->receive_all(&hello, sizeof(hello), deadline) != Transfer::kDone ||
        std::memcmp(hello.magic, kHelloMagic, sizeof(kHelloMagic)) != 0) {
      continue;
    }
    std::string problem;
    if (hello.world_size != world_size) {
      problem =
          str_cat("a rank connected to ", endpoint, " as rank ", hello.rank,
                  " of WORLD_SIZE=", hello.world_size, " but rank 0 has WORLD_SIZE=", world_size,
                  "; give every rank the same WORLD_SIZE");
    } else if (hello.rank < 1 || hello.rank >= world_size) {
      problem = str_cat("a rank connected to ", endpoint, " as rank ", hello.rank,
                        ", outside 1 .. ", world_size - 1, "; give each rank its own RANK below ",
                        "WORLD_SIZE=", world_size, " (rank 0 is the one listening)");
    } else if (group.links[static_cast<size_t>(hello.rank)].is_open()) {
      problem = str_cat("two processes connected to ", endpoint, " as rank ", hello.rank,
                        "; give each rank its own RANK");
    }
    if (!problem.empty()) {
      send_reply(*link, false, problem, deadline_after(std::chrono::milliseconds(1000)));
      fail_group(group.links, problem);
    }
    group.links[static_cast<size_t>(hello.rank)] = std::move(*link);
    ++joined;
  }
  if (make_group_id) {
    try {
      group.group_id = make_group_id();
    } catch (const std::exception& error) {
      fail_group(group.links, str_cat("rank 0 could not make the group id: ", error.what()));
    }
  }
  for (size_t r = 1; r < group.links.size(); ++r) {
    send_reply(group.links[r], true, group.group_id, deadline);
  }
  return group;
}

TcpGroup connect_to_rank_zero(const std::string& address, int port, int rank, int world_size,
                              std::chrono::milliseconds timeout) {
  TcpGroup group;
  group.rank = rank;
  group.world_size = world_size;
  group.endpoint = str_cat(address, ":", port);
  std::optional<TcpConnection> link = connect_with_retry(address, port, deadline_after(timeout));
  GROVE_CHECK_AS(CommunicationError, link.has_value(), "rank ", rank, " could not reach rank 0 at ",
                 group.endpoint, " within ", timeout.count(),
                 " ms; start rank 0 (RANK=0) with the same MASTER_ADDR and MASTER_PORT, check "
                 "that this machine reaches it, or raise GROVE_COLLECTIVE_TIMEOUT_MS");
  // Rank 0 answers once every rank has come: wait as long as it does.
  const Deadline deadline = deadline_after(timeout);
  Hello hello{};
  std::memcpy(hello.magic, kHelloMagic, sizeof(kHelloMagic));
  hello.rank = rank;
  hello.world_size = world_size;
  ReplyHeader header{};
  Transfer result = link->send_all(&hello, sizeof(hello), deadline);
  if (result == Transfer::kDone) {
    result = link->receive_all(&header, sizeof(header), deadline);
  }
  GROVE_CHECK_AS(CommunicationError, result != Transfer::kTimedOut, "rank ", rank, " reached ",
                 group.endpoint, " but waited ", timeout.count(),
                 " ms for rank 0 to gather the other ranks; start every rank with WORLD_SIZE=",
                 world_size, " (or raise GROVE_COLLECTIVE_TIMEOUT_MS)");
  GROVE_CHECK_AS(CommunicationError, result == Transfer::kDone && header.length <= kMaxReplyBytes,
                 "rank ", rank, ": rank 0 at ", group.endpoint,
                 " closed the connection during the rendezvous; it failed or is not a grove "
                 "rank 0 (see its output)");
  std::string bytes(header.length, '\0');
  result = link->receive_all(bytes.data(), bytes.size(), deadline);
  GROVE_CHECK_AS(CommunicationError, result == Transfer::kDone, "rank ", rank, ": rank 0 at ",
                 group.endpoint, " closed the connection during the rendezvous (see its output)");
  GROVE_CHECK_AS(CommunicationError, header.ok == 1, "rank ", rank,
                 ": the group failed at rank 0: ", bytes);
  group.group_id = std::move(bytes);
  group.links.push_back(std::move(*link));
  return group;
}

}  // namespace grove::runtime::collectives
