// ConnectionFlood holds many connections open against a server while a
// benchmark measures it (issue 35's goal: 10,000 idle and 500 slowloris
// connections, a normal client's p99 within 2x of its unloaded p99): idle
// ones that never send a byte, and slowloris ones that send one byte of a
// request every trickle period and never finish it. A connection the server
// closes (its idle or header deadline) is opened again at once, so the count
// holds for the whole measurement. One thread and epoll hold them all.
//
//   ConnectionFlood flood(port, {.idle = 10000, .slowloris = 500});
//   ... measure ...
//   flood.stop();  // closes them all; flood.reopened() says how many were closed by the server
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace grove::benchmarks {

struct FloodConfig {
  int64_t idle = 0;
  int64_t slowloris = 0;
  int trickle_ms = 1000;  // a slowloris connection's pace: one byte this often
  // The slowloris connections send in this many groups spread over each
  // trickle period (1: all in one burst, as before; Note [Where the tail arrived]).
  int trickle_groups = 1;
  // What slowloris connections trickle: the start of a request that never ends.
  std::string trickle_bytes = "POST /v2/models/m/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
};

// Raises this process's open-file limit to hold `descriptors` more (soft up to
// the hard limit, the hard one too where allowed); UsageError naming the
// numbers and `ulimit -n` when it cannot.
void ensure_file_limit(int64_t descriptors);

class ConnectionFlood {
 public:
  // Opens every connection (a UsageError when one cannot be opened) and
  // starts the thread that holds them.
  ConnectionFlood(int port, FloodConfig config);
  ~ConnectionFlood();
  ConnectionFlood(const ConnectionFlood&) = delete;
  ConnectionFlood& operator=(const ConnectionFlood&) = delete;

  void stop();
  uint64_t reopened() const { return reopened_; }  // connections the server closed
  // When each trickle burst (group) started, steady-clock nanoseconds since
  // its epoch (CLOCK_MONOTONIC, the same in every process); after stop().
  const std::vector<int64_t>& trickle_ns() const { return trickle_ns_; }

 private:
  struct Held {
    int fd = -1;
    bool slow = false;
    size_t sent = 0;  // trickle bytes sent
  };
  void open_one(Held& held);
  void run();

  const int port_;
  const FloodConfig config_;
  int epoll_ = -1;
  std::vector<Held> held_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> reopened_{0};
  std::vector<int64_t> trickle_ns_;
  std::thread thread_;
};

// This binary (/proc/self/exe) started with `args` (args[0] its name), its
// stdin and stdout piped to the caller; Error when it cannot start.
struct ChildProcess {
  int pid = -1;
  int to_child = -1;    // the child's stdin
  int from_child = -1;  // the child's stdout
};
ChildProcess spawn_this_binary(const std::vector<std::string>& args);

// A ConnectionFlood in a child process (this binary run as `serve_http
// --hold-connections PORT IDLE SLOWLORIS TRICKLE_MS http|h2 [GROUPS]`), so that the
// client ends of its connections count against the child's open-file limit
// and only the server ends against this process's: 10,500 connections fit a
// limit of 20,000 (one process would need 21,000). Returns once every
// connection is open; UsageError with the child's message otherwise.
class FloodProcess {
 public:
  // `http2`: slowloris connections trickle an HTTP/2 preface (a gRPC front).
  FloodProcess(int port, const FloodConfig& config, bool http2);
  ~FloodProcess();
  FloodProcess(const FloodProcess&) = delete;
  FloodProcess& operator=(const FloodProcess&) = delete;
  // Closes every connection and returns how many the server had closed.
  uint64_t stop();
  // The child's trickle bursts (ConnectionFlood::trickle_ns); after stop().
  const std::vector<int64_t>& trickle_ns() const { return trickle_ns_; }
  // The child's CPU seconds so far (user + system, /proc/PID/stat); -1 once stopped.
  double cpu_s() const;

 private:
  int pid_ = -1;
  int to_child_ = -1;  // the child's stdin: closing it stops the child
  // The child's stdout: "holding N", then "reopened R" and "ticks T...".
  int from_child_ = -1;
  std::vector<int64_t> trickle_ns_;
};

// The child's main(): argv as above; holds the connections until stdin closes.
int hold_connections_main(int argc, char** argv);

}  // namespace grove::benchmarks
