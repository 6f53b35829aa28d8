// A thread that samples, every half millisecond of a run, how many requests
// wait in the batching server's queue and how many it holds unanswered
// (queued or in a running batch): with every client connection busy, the rest
// of the requests in flight are in the front, read or being answered, so the
// split says which side a saturated run waits on (Note [Where the front's
// time went], serve_http.cc). Its thread is named "queue-probe" (not counted
// as the front's CPU).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "serving/server.h"

namespace grove::benchmarks {

class QueueProbe {
 public:
  explicit QueueProbe(const serving::Server& server);
  ~QueueProbe();
  QueueProbe(const QueueProbe&) = delete;
  QueueProbe& operator=(const QueueProbe&) = delete;

  struct Report {
    double mean_queued = 0;   // requests in the queue
    double mean_pending = 0;  // accepted, not yet answered (queued or running)
    uint64_t max_queued = 0;
    uint64_t samples = 0;
  };
  // Stops the thread; what it saw.
  Report stop();

 private:
  void run();
  const serving::Server& server_;
  std::atomic<bool> stopping_{false};
  Report report_;
  std::thread thread_;
};

}  // namespace grove::benchmarks
