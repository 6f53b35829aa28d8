#include "runtime/collectives/tcp_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "runtime/collectives/communicator.h"

namespace grove::runtime::collectives {
namespace {

int milliseconds_left(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1 << 30)));
}

// Waits for `events` on `fd`; false at the deadline.
bool wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    int ready = ::poll(&entry, 1, milliseconds_left(deadline));
    if (ready > 0) {
      return true;
    }
    if (ready == 0) {
      return false;
    }
    GROVE_CHECK_AS(CommunicationError, errno == EINTR,
                   "poll on a collective's socket failed: ", std::strerror(errno));
  }
}

bool is_peer_gone(int error) {
  return error == ECONNRESET || error == EPIPE || error == ENOTCONN || error == ETIMEDOUT;
}

void set_no_delay(int fd) {
  // Collectives are request and answer: never wait for a delayed ACK.
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

struct AddressList {
  addrinfo* head = nullptr;
  ~AddressList() {
    if (head != nullptr) {
      ::freeaddrinfo(head);
    }
  }
};

void resolve(const std::string& address, int port, AddressList& list) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  std::string service = std::to_string(port);
  int status = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &list.head);
  GROVE_CHECK_AS(CommunicationError, status == 0 && list.head != nullptr, "cannot resolve '",
                 address, "' (", ::gai_strerror(status),
                 "); MASTER_ADDR must name rank 0's machine as the other ranks can reach it");
}

}  // namespace

Deadline deadline_after(std::chrono::milliseconds timeout) {
  return std::chrono::steady_clock::now() + timeout;
}

TcpConnection& TcpConnection::operator=(TcpConnection&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void TcpConnection::close() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
  fd_ = -1;
}

Transfer TcpConnection::send_all(const void* data, size_t size, Deadline deadline) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    if (fd_ < 0) {
      return Transfer::kClosed;
    }
    ssize_t sent = ::send(fd_, bytes, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      bytes += sent;
      size -= static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) {
      continue;
    }
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd_, POLLOUT, deadline)) {
        return Transfer::kTimedOut;
      }
      continue;
    }
    if (sent < 0 && is_peer_gone(errno)) {
      return Transfer::kClosed;
    }
    throw CommunicationError(
        str_cat("send on a collective's socket failed: ", std::strerror(errno)));
  }
  return Transfer::kDone;
}

Transfer TcpConnection::receive_all(void* data, size_t size, Deadline deadline) {
  auto* bytes = static_cast<uint8_t*>(data);
  while (size > 0) {
    if (fd_ < 0) {
      return Transfer::kClosed;
    }
    ssize_t got = ::recv(fd_, bytes, size, MSG_DONTWAIT);
    if (got > 0) {
      bytes += got;
      size -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) {
      return Transfer::kClosed;
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd_, POLLIN, deadline)) {
        return Transfer::kTimedOut;
      }
      continue;
    }
    if (is_peer_gone(errno)) {
      return Transfer::kClosed;
    }
    throw CommunicationError(
        str_cat("receive on a collective's socket failed: ", std::strerror(errno)));
  }
  return Transfer::kDone;
}

TcpListener TcpListener::listen(const std::string& address, int port, const std::string& what) {
  AddressList resolved;
  resolve(address, port, resolved);
  const int family = resolved.head->ai_family;
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  GROVE_CHECK_AS(CommunicationError, fd >= 0, "cannot open a socket for ", what, ": ",
                 std::strerror(errno));
  int one = 1;
  int zero = 0;
  // Lets a new run take the port while an earlier run's connections linger in TIME_WAIT (a live
  // listener still holds it).
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage any{};
  socklen_t length;
  if (family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&any);
    v6->sin6_family = AF_INET6;
    v6->sin6_addr = in6addr_any;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    length = sizeof(sockaddr_in6);
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&any);
    v4->sin_family = AF_INET;
    v4->sin_addr.s_addr = htonl(INADDR_ANY);
    v4->sin_port = htons(static_cast<uint16_t>(port));
    length = sizeof(sockaddr_in);
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&any), length) != 0 || ::listen(fd, 128) != 0) {
    const int error = errno;
    ::close(fd);
    throw CommunicationError(str_cat(
        "rank 0 cannot listen on port ", port, " (", what, "): ", std::strerror(error),
        error == EADDRINUSE ? "; another process (an earlier run?) holds it: pick a free port"
                            : ""));
  }
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_length);
  const int bound_port = family == AF_INET6
                             ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return TcpListener(fd, bound_port);
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

std::optional<TcpConnection> TcpListener::accept(Deadline deadline) {
  for (;;) {
    if (!wait_for(fd_, POLLIN, deadline)) {
      return std::nullopt;
    }
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      set_no_delay(fd);
      return TcpConnection(fd);
    }
    GROVE_CHECK_AS(CommunicationError, errno == EINTR || errno == EAGAIN || errno == ECONNABORTED,
                   "accepting a rank's connection failed: ", std::strerror(errno));
  }
}

std::optional<TcpConnection> connect_with_retry(const std::string& address, int port,
                                                Deadline deadline) {
  AddressList resolved;
  resolve(address, port, resolved);
  for (;;) {
    for (addrinfo* at = resolved.head; at != nullptr; at = at->ai_next) {
      int fd = ::socket(at->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) {
        continue;
      }
      bool connected = ::connect(fd, at->ai_addr, at->ai_addrlen) == 0;
      if (!connected && errno == EINPROGRESS && wait_for(fd, POLLOUT, deadline)) {
        int error = 0;
        socklen_t length = sizeof(error);
        connected = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
      }
      if (connected) {
        // Back to blocking mode; every transfer passes MSG_DONTWAIT and polls.
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        set_no_delay(fd);
        return TcpConnection(fd);
      }
      ::close(fd);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(50), deadline - std::chrono::steady_clock::now()));
  }
}

}  // namespace grove::runtime::collectives
