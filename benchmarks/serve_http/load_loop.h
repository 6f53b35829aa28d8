// One serve_http client's open-loop load: requests at Poisson arrival times
// over a window, each sent once the previous one was answered, latency from
// its scheduled arrival to its answer (serve_http.cc's header says why). Run
// by the client threads of serve_http itself (HTTP) and of its gRPC client
// processes (benchmarks/serve_http/grpc_client_process.h), so that both count
// alike.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace grove::benchmarks {

using LoadClock = std::chrono::steady_clock;

// What one client saw.
struct ClientTally {
  uint64_t sent = 0, answered = 0, rejected = 0, errors = 0;
  uint64_t sent_in_window = 0;        // of `sent`, sent before the window closed
  double cpu_s = 0;                   // the client thread's CPU time over its load
  LoadClock::time_point last_answer;  // the window's start when none
  std::string first_error;
  std::vector<double> latencies_us;  // of the answered requests
  // Each answered request's scheduled arrival, as latencies_us (HTTP clients
  // only; Note [Where the tail arrived], tail_timeline.h).
  std::vector<LoadClock::time_point> arrivals;

  // An answer, read at `done`, to the request that arrived at `arrival`.
  void count_answer(LoadClock::time_point arrival, LoadClock::time_point done);
  // A failed request; `why()` is called for the first failure only, whose text is kept.
  void count_error(const std::function<std::string()>& why);
};

// An HTTP exchange's `status` counted in `tally`: 200 answered (at `done`, for
// the request that arrived at `arrival`), 503 rejected, anything else an
// error, named by `error()` where the status is -1 (no HTTP answer).
void count_http_status(ClientTally& tally, int status, LoadClock::time_point arrival,
                       LoadClock::time_point done, const std::function<std::string()>& error);

// The arrival times of client `client` at `rate` requests/s (its share:
// rate / clients) from `start` for `window_s`, seeded by `seed` as every
// client of serve_http is. `exchange(n)` sends the n-th request (from 1) and
// returns the HTTP status (200 answered, 503 rejected) or -1 with `error()`
// saying what failed.
ClientTally drive_client(const std::function<int(size_t)>& exchange,
                         const std::function<std::string()>& error, LoadClock::time_point start,
                         double window_s, double rate, int64_t clients, uint64_t seed,
                         int64_t client);

// CPU time of the calling thread so far, in seconds.
double thread_cpu_seconds();

}  // namespace grove::benchmarks
