// StreamWorker is one asynchronous sim stream: a thread that runs the
// stream's work in submission order while the host goes on (Note [Asynchronous
// sim streams] in sim_platform.cc). Every task gets a ticket; the host (or
// another stream's worker, for an event wait) blocks until a ticket has run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace grove::runtime::sim {

class StreamWorker {
 public:
  StreamWorker();
  // Runs what is queued, then stops the thread.
  ~StreamWorker();
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;

  // Queues `task` after everything queued before; returns its ticket (1, 2, ...).
  uint64_t enqueue(std::function<void()> task);
  // The ticket of the last task queued (0: none yet).
  uint64_t last_ticket() const;
  // Blocks until the task with `ticket`, and everything before it, has run.
  void wait_for(uint64_t ticket);
  // Blocks until everything queued so far has run.
  void drain() { wait_for(last_ticket()); }
  // The first exception a task threw since the last call, which clears it (a
  // sticky error, as CUDA reports a kernel's fault at the next synchronization).
  std::exception_ptr take_error();

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable queued_;
  std::condition_variable finished_;
  std::deque<std::function<void()>> tasks_;
  uint64_t submitted_ = 0;
  uint64_t completed_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace grove::runtime::sim
