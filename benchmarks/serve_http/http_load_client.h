// serve_http's HTTP clients: prebuilt KServe v2 requests (JSON or the binary
// tensor data extension) sent over keep-alive connections to 127.0.0.1, and
// the open-loop load of one client thread over one or several connections
// (Note [Requests in flight per client]).
#pragma once

#include <cstddef>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/serve_http/load_loop.h"
#include "serving/model_signature.h"

namespace grove::benchmarks {

// 16 one-row KServe v2 infer requests of random f32 values for `signature`'s
// inputs, each a whole HTTP message to `path`, in `encoding` ("json" or
// "binary"). UsageError for a non-f32 input.
std::vector<std::string> http_requests(const serving::ModelSignature& signature,
                                       const std::string& path, int port,
                                       const std::string& encoding, std::mt19937_64& rng);

// One keep-alive HTTP/1.1 connection to 127.0.0.1 (Note [A client that costs
// little]). Not thread-safe: one per client thread.
class HttpLoadConnection {
 public:
  explicit HttpLoadConnection(int port);
  ~HttpLoadConnection();
  HttpLoadConnection(const HttpLoadConnection&) = delete;
  HttpLoadConnection& operator=(const HttpLoadConnection&) = delete;

  // Connects (send() does when not connected); false with error() set.
  bool open();
  // Sends `request` whole; false with error() set (the connection is then
  // reopened next time).
  bool send(const std::string& request);
  // Reads one answer (blocking): its HTTP status, or -1 with error() set.
  int read_answer();
  // send() then read_answer().
  int exchange(const std::string& request);
  int fd() const { return fd_; }
  const std::string& error() const { return error_; }

 private:
  int fail(const char* what);
  void close_socket();

  const int port_;
  int fd_ = -1;
  std::vector<char> buffer_;
  std::string error_;
};

// Client `client`'s load as drive_client() gives it (load_loop.h), over
// `connections`: a request is sent at its arrival time on a connection with
// none in flight, or, when every connection has one, as soon as one answers
// (Note [Requests in flight per client]). `messages[n % size]` is the n-th.
ClientTally drive_http_client(const std::vector<std::unique_ptr<HttpLoadConnection>>& connections,
                              const std::vector<std::string>& messages, LoadClock::time_point start,
                              double window_s, double rate, int64_t clients, uint64_t seed,
                              int64_t client);

}  // namespace grove::benchmarks
