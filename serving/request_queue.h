// RequestQueue is the server's bounded FIFO of accepted requests, and the
// batching policy: a worker takes the longest prefix of the queue that fits in
// max_batch rows, as soon as the queue holds max_batch rows, or once the
// oldest request has waited max_wait, or at once when the queue is closed for
// draining. Several workers may take batches from one queue.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "serving/request.h"

namespace grove::serving {

class RequestQueue {
 public:
  RequestQueue(size_t capacity, int64_t max_batch_rows, std::chrono::microseconds max_wait);

  // Appends `request` (its submitted time set here). Throws QueueFullError
  // when `capacity` requests wait already, ServerClosedError after close().
  void push(PendingRequest request);

  // Blocks until a batch is due (see above) and returns it, in FIFO order; an
  // empty batch means the queue is closed and empty: the worker should stop.
  std::vector<PendingRequest> take_batch();
  // Never blocks: the batch take_batch() would return at once if one is due
  // now, else an empty batch (also when the queue is closed and empty). A
  // worker whose previous batch still runs on the device uses it to prepare
  // the next one meanwhile (Note [Two batches in flight], device_worker.h).
  std::vector<PendingRequest> take_due_batch();

  // No more pushes. Queued requests are still handed out by take_batch(),
  // without waiting for max_wait.
  void close();
  // Closes the queue and returns every request still queued.
  std::vector<PendingRequest> close_and_take_all();

  size_t size() const;
  bool closed() const;

 private:
  bool batch_due(Clock::time_point now) const;
  // Moves the longest FIFO prefix that fits out of the queue; mutex_ held.
  std::vector<PendingRequest> take_prefix_locked();

  const size_t capacity_;
  const int64_t max_batch_rows_;
  const std::chrono::microseconds max_wait_;
  const bool locked_as_before_;  // Note [A batch taken in one move]
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<PendingRequest> queue_;
  int64_t queued_rows_ = 0;
  bool closed_ = false;
};

}  // namespace grove::serving
