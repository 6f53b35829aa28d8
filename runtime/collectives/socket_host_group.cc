#include "runtime/collectives/socket_host_group.h"

#include <cstring>

#include "runtime/collectives/held_locks.h"
#include "runtime/collectives/host_reduction.h"

namespace grove::runtime::collectives {
namespace {

// A rank's contribution: this header, `buffers` layouts, then the buffers'
// bytes back to back. Host byte order, as in the rendezvous.
struct ContributionHeader {
  uint32_t magic;
  uint32_t op;
  uint64_t collective;
  uint64_t buffers;
};
struct WireLayout {
  int64_t count;
  int32_t dtype;
  int32_t reserved;
};
constexpr uint32_t kContributionMagic = 0x67726172;  // "grar"
constexpr uint64_t kMaxBuffers = 1 << 20;

// Rank 0's answer: ok, then the reduced bytes; or not, then the reason.
struct ResultHeader {
  uint32_t ok;
  uint32_t reserved;
  uint64_t length;
};

size_t buffer_bytes(const Buffer& buffer) {
  return static_cast<size_t>(buffer.count) * dtype_size(buffer.dtype);
}

// The buffers' bytes back to back (read under the caller's locks).
std::vector<uint8_t> pack(const std::vector<Buffer>& buffers) {
  std::vector<uint8_t> bytes;
  for (const Buffer& buffer : buffers) {
    const auto* data = static_cast<const uint8_t*>(buffer.data);
    bytes.insert(bytes.end(), data, data + buffer_bytes(buffer));
  }
  return bytes;
}

void unpack(const std::vector<uint8_t>& bytes, const std::vector<Buffer>& buffers) {
  size_t offset = 0;
  for (const Buffer& buffer : buffers) {
    std::memcpy(buffer.data, bytes.data() + offset, buffer_bytes(buffer));
    offset += buffer_bytes(buffer);
  }
}

bool valid_dtype(int32_t dtype) { return dtype >= 0 && dtype <= static_cast<int32_t>(DType::kF64); }

}  // namespace

SocketHostGroup::SocketHostGroup(TcpGroup links, std::chrono::milliseconds timeout)
    : links_(std::move(links)), timeout_(timeout) {
  const size_t expected = links_.rank == 0 ? static_cast<size_t>(links_.world_size) : 1;
  GROVE_CHECK_AS(CommunicationError, links_.links.size() == expected, "socket group '", name(),
                 "': rank ", links_.rank, " has ", links_.links.size(), " connections, expected ",
                 expected, "; make it with the TCP rendezvous");
}

std::string SocketHostGroup::where() const {
  return str_cat("all_reduce of group '", name(), "' (world size ", links_.world_size,
                 ") at collective #", collective_);
}

void SocketHostGroup::fail(const std::string& reason) {
  failure_ = reason;
  for (TcpConnection& link : links_.links) {
    link.close();
  }
  throw CommunicationError(reason);
}

void SocketHostGroup::all_reduce(int rank, const std::vector<Buffer>& buffers, ReduceOp op) {
  std::lock_guard<std::mutex> lock(mutex_);
  GROVE_CHECK_AS(CommunicationError, rank == links_.rank, "socket group '", name(),
                 "' belongs to rank ", links_.rank, ", not rank ", rank);
  GROVE_CHECK_AS(CommunicationError, failure_.empty(), failure_);
  ++collective_;
  if (links_.world_size == 1) {
    return;
  }
  if (rank == 0) {
    reduce_at_rank_zero(buffers, op);
  } else {
    contribute(buffers, op);
  }
}

void SocketHostGroup::reduce_at_rank_zero(const std::vector<Buffer>& buffers, ReduceOp op) {
  const int world = links_.world_size;
  std::vector<std::vector<uint8_t>> received(static_cast<size_t>(world));
  std::vector<std::vector<Buffer>> layouts(static_cast<size_t>(world));
  std::vector<ContributionHeader> headers(static_cast<size_t>(world));
  {
    // Note [Waiting under the capture lock]: nothing below touches device memory.
    ReleaseHeldLocks released;
    const Deadline deadline = deadline_after(timeout_);
    for (int r = 1; r < world; ++r) {
      TcpConnection& link = links_.links[static_cast<size_t>(r)];
      auto check = [&](Transfer result) {
        if (result == Transfer::kTimedOut) {
          fail(str_cat(where(), ": rank 0 waited ", timeout_.count(), " ms for rank ", r,
                       ", which never arrived. Every rank must run the same steps; check that "
                       "all ",
                       world,
                       " ranks are running and none failed or stopped early (raise the "
                       "timeout with GROVE_COLLECTIVE_TIMEOUT_MS if a rank is merely slow)"));
        }
        if (result == Transfer::kClosed) {
          fail(str_cat(where(), ": rank ", r,
                       " closed its connection (its process exited or failed; see its output)"));
        }
      };
      ContributionHeader& header = headers[static_cast<size_t>(r)];
      check(link.receive_all(&header, sizeof(header), deadline));
      if (header.magic != kContributionMagic || header.buffers > kMaxBuffers) {
        fail(str_cat(where(), ": rank ", r, " sent something that is not a grove collective"));
      }
      std::vector<WireLayout> wire(header.buffers);
      check(link.receive_all(wire.data(), wire.size() * sizeof(WireLayout), deadline));
      size_t bytes = 0;
      for (const WireLayout& layout : wire) {
        if (!valid_dtype(layout.dtype) || layout.count < 0 || layout.count > (int64_t{1} << 40)) {
          fail(str_cat(where(), ": rank ", r, " sent a malformed buffer layout"));
        }
        Buffer buffer{nullptr, layout.count, static_cast<DType>(layout.dtype)};
        layouts[static_cast<size_t>(r)].push_back(buffer);
        bytes += buffer_bytes(buffer);
      }
      received[static_cast<size_t>(r)].resize(bytes);
      check(link.receive_all(received[static_cast<size_t>(r)].data(), bytes, deadline));
    }
  }
  std::string problem;
  for (int r = 1; r < world && problem.empty(); ++r) {
    const ContributionHeader& header = headers[static_cast<size_t>(r)];
    if (header.collective != static_cast<uint64_t>(collective_)) {
      problem = str_cat(where(), ": rank ", r, " is at collective #", header.collective,
                        "; every rank must issue the same collectives");
    } else if (header.op != static_cast<uint32_t>(op)) {
      problem = str_cat(where(), ": rank 0 ", reduce_op_name(op), "-reduces but rank ", r,
                        " does not; every rank must issue the same collectives");
    } else {
      try {
        check_same_layouts(name(), 0, buffers, r, layouts[static_cast<size_t>(r)]);
      } catch (const CommunicationError& error) {
        problem = error.what();
      }
    }
  }
  if (!problem.empty()) {
    const Deadline deadline = deadline_after(std::chrono::milliseconds(1000));
    ResultHeader header{0, 0, problem.size()};
    for (TcpConnection& link : links_.links) {
      if (link.is_open() && link.send_all(&header, sizeof(header), deadline) == Transfer::kDone) {
        link.send_all(problem.data(), problem.size(), deadline);
      }
    }
    fail(problem);
  }
  size_t offset = 0;
  for (const Buffer& buffer : buffers) {
    std::vector<const uint8_t*> sources{static_cast<const uint8_t*>(buffer.data)};
    for (int r = 1; r < world; ++r) {
      sources.push_back(received[static_cast<size_t>(r)].data() + offset);
    }
    reduce_in_rank_order(sources, static_cast<uint8_t*>(buffer.data), buffer.count, buffer.dtype,
                         op);
    offset += buffer_bytes(buffer);
  }
  std::vector<uint8_t> result = pack(buffers);
  ReleaseHeldLocks released;
  const Deadline deadline = deadline_after(timeout_);
  ResultHeader header{1, 0, result.size()};
  for (int r = 1; r < world; ++r) {
    TcpConnection& link = links_.links[static_cast<size_t>(r)];
    Transfer sent = link.send_all(&header, sizeof(header), deadline);
    if (sent == Transfer::kDone) {
      sent = link.send_all(result.data(), result.size(), deadline);
    }
    if (sent == Transfer::kClosed) {
      fail(str_cat(where(), ": rank ", r,
                   " closed its connection before taking the result (its process exited or "
                   "failed; see its output)"));
    }
    if (sent == Transfer::kTimedOut) {
      fail(str_cat(where(), ": rank 0 could not send the result to rank ", r, " within ",
                   timeout_.count(), " ms (rank ", r, " stopped reading)"));
    }
  }
}

void SocketHostGroup::contribute(const std::vector<Buffer>& buffers, ReduceOp op) {
  const int rank = links_.rank;
  std::vector<uint8_t> message(sizeof(ContributionHeader) + buffers.size() * sizeof(WireLayout));
  ContributionHeader header{kContributionMagic, static_cast<uint32_t>(op),
                            static_cast<uint64_t>(collective_), buffers.size()};
  std::memcpy(message.data(), &header, sizeof(header));
  for (size_t b = 0; b < buffers.size(); ++b) {
    WireLayout layout{buffers[b].count, static_cast<int32_t>(buffers[b].dtype), 0};
    std::memcpy(message.data() + sizeof(header) + b * sizeof(WireLayout), &layout, sizeof(layout));
  }
  std::vector<uint8_t> bytes = pack(buffers);
  message.insert(message.end(), bytes.begin(), bytes.end());
  ResultHeader result{};
  std::string reason;
  {
    // Note [Waiting under the capture lock]: nothing below touches device memory.
    ReleaseHeldLocks released;
    TcpConnection& link = links_.links[0];
    Transfer transfer = link.send_all(message.data(), message.size(), deadline_after(timeout_));
    // Rank 0 answers once the slowest rank has come: wait as long as it does.
    const Deadline deadline = deadline_after(timeout_);
    if (transfer == Transfer::kDone) {
      transfer = link.receive_all(&result, sizeof(result), deadline);
    }
    if (transfer == Transfer::kDone && result.ok == 1 && result.length != bytes.size()) {
      fail(str_cat(where(), ": rank ", rank, " got ", result.length,
                   " bytes of result from rank 0, expected ", bytes.size()));
    }
    if (transfer == Transfer::kDone && result.ok != 1) {
      reason.resize(std::min<uint64_t>(result.length, 1 << 20));
      transfer = link.receive_all(reason.data(), reason.size(), deadline);
    } else if (transfer == Transfer::kDone) {
      transfer = link.receive_all(bytes.data(), bytes.size(), deadline);
    }
    if (transfer == Transfer::kTimedOut) {
      fail(str_cat(where(), ": rank ", rank, " waited ", timeout_.count(),
                   " ms for rank 0's result. Every rank must run the same steps; check that all ",
                   links_.world_size,
                   " ranks are running and none failed or stopped early (raise the timeout with "
                   "GROVE_COLLECTIVE_TIMEOUT_MS if a rank is merely slow)"));
    }
    if (transfer == Transfer::kClosed) {
      fail(str_cat(where(), ": rank 0 closed its connection to rank ", rank,
                   " (its process exited or failed; see its output)"));
    }
  }
  if (result.ok != 1) {
    fail(reason);
  }
  unpack(bytes, buffers);
}

std::shared_ptr<HostCommunicator> make_socket_communicator(TcpGroup links, Device device,
                                                           std::chrono::milliseconds timeout) {
  const int rank = links.rank;
  return std::make_shared<HostCommunicator>(
      std::make_shared<SocketHostGroup>(std::move(links), timeout), rank, device);
}

}  // namespace grove::runtime::collectives
