#include "benchmarks/serve_http/load_loop.h"

#include <time.h>

#include <algorithm>
#include <random>
#include <thread>

#include "runtime/error.h"

namespace grove::benchmarks {

ClientTally drive_client(const std::function<int(size_t)>& exchange,
                         const std::function<std::string()>& error, LoadClock::time_point start,
                         double window_s, double rate, int64_t clients, uint64_t seed,
                         int64_t client) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(client));
  std::exponential_distribution<double> gap(rate / static_cast<double>(clients));
  ClientTally tally;
  tally.last_answer = start;
  const double cpu_before = thread_cpu_seconds();
  const LoadClock::time_point window_end = start + std::chrono::duration_cast<LoadClock::duration>(
                                                       std::chrono::duration<double>(window_s));
  for (double t = gap(rng); t < window_s; t += gap(rng)) {
    const LoadClock::time_point scheduled =
        start + std::chrono::duration_cast<LoadClock::duration>(std::chrono::duration<double>(t));
    if (LoadClock::now() < scheduled) std::this_thread::sleep_until(scheduled);
    ++tally.sent;
    if (LoadClock::now() < window_end) ++tally.sent_in_window;
    const int status = exchange(tally.sent);
    count_http_status(tally, status, scheduled, LoadClock::now(), error);
  }
  tally.cpu_s = thread_cpu_seconds() - cpu_before;
  return tally;
}

void ClientTally::count_answer(LoadClock::time_point arrival, LoadClock::time_point done) {
  ++answered;
  latencies_us.push_back(std::chrono::duration<double, std::micro>(done - arrival).count());
  arrivals.push_back(arrival);
  last_answer = std::max(last_answer, done);
}

void ClientTally::count_error(const std::function<std::string()>& why) {
  ++errors;
  if (first_error.empty()) first_error = why();
}

void count_http_status(ClientTally& tally, int status, LoadClock::time_point arrival,
                       LoadClock::time_point done, const std::function<std::string()>& error) {
  if (status == 200) {
    tally.count_answer(arrival, done);
  } else if (status == 503) {
    ++tally.rejected;
  } else {
    tally.count_error([&] { return status < 0 ? error() : str_cat("HTTP ", status); });
  }
}

double thread_cpu_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

}  // namespace grove::benchmarks
