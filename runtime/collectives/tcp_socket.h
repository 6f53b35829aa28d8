// TCP endpoints with deadlines, for the rendezvous and the socket host group:
// a listening socket, and a connection that sends and receives whole messages.
// Nothing here blocks past the deadline it is given, and a peer that closes
// its end (exits, crashes) is a result, never a signal (SIGPIPE is avoided).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace grove::runtime::collectives {

using Deadline = std::chrono::steady_clock::time_point;

// `now + timeout`.
Deadline deadline_after(std::chrono::milliseconds timeout);

enum class Transfer { kDone, kClosed, kTimedOut };

class TcpConnection {
 public:
  TcpConnection() = default;
  explicit TcpConnection(int fd) : fd_(fd) {}
  TcpConnection(TcpConnection&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  TcpConnection& operator=(TcpConnection&& other) noexcept;
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;
  ~TcpConnection() { close(); }

  // All `size` bytes, or kClosed when the peer is gone (closed, reset), or
  // kTimedOut at the deadline. Other socket failures throw CommunicationError.
  Transfer send_all(const void* data, size_t size, Deadline deadline);
  Transfer receive_all(void* data, size_t size, Deadline deadline);

  bool is_open() const { return fd_ >= 0; }
  void close();

 private:
  int fd_ = -1;
};

class TcpListener {
 public:
  // Listens on every interface of `address`'s family (so that ranks on other
  // machines reach it) at `port` (0: an ephemeral port, see port()). Throws
  // CommunicationError naming `what` (e.g. "MASTER_PORT=29500") when the port
  // is in use or `address` does not resolve.
  static TcpListener listen(const std::string& address, int port, const std::string& what);

  TcpListener(TcpListener&& other) noexcept : fd_(other.fd_), port_(other.port_) { other.fd_ = -1; }
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;
  ~TcpListener();

  int port() const { return port_; }
  // The next connection, or nullopt at the deadline.
  std::optional<TcpConnection> accept(Deadline deadline);

 private:
  TcpListener(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
};

// Connects to `address`:`port`, trying again (every 50 ms) while nobody listens
// there yet; nullopt when the deadline passes first. Throws CommunicationError
// when `address` does not resolve.
std::optional<TcpConnection> connect_with_retry(const std::string& address, int port,
                                                Deadline deadline);

}  // namespace grove::runtime::collectives
