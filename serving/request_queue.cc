#include "serving/request_queue.h"

#include <algorithm>
#include <iterator>

#include "serving/errors.h"
#include "serving/server_stats.h"

namespace grove::serving {

RequestQueue::RequestQueue(size_t capacity, int64_t max_batch_rows,
                           std::chrono::microseconds max_wait)
    : capacity_(capacity),
      max_batch_rows_(max_batch_rows),
      max_wait_(max_wait),
      locked_as_before_(serving_contended_as_before()) {}

void RequestQueue::push(PendingRequest request) {
  GROVE_CHECK_AS(ShapeError, request.rows >= 1 && request.rows <= max_batch_rows_,
                 "RequestQueue::push: a request of ", request.rows, " rows does not fit in [1, ",
                 max_batch_rows_, "] rows per batch");
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    GROVE_CHECK_AS(ServerClosedError, !closed_,
                   "server is shut down: request not accepted; submit before shutdown()");
    GROVE_CHECK_AS(QueueFullError, queue_.size() < capacity_, "server queue is full (",
                   queue_.size(), " requests waiting, capacity ", capacity_,
                   "): request rejected; retry later, shed load, or raise "
                   "ServerConfig::queue_capacity");
    request.submitted = Clock::now();
    // A worker waits either for a first request or for the front's deadline;
    // only a new front or a full batch changes what it waits for.
    wake = queue_.empty() || queued_rows_ + request.rows >= max_batch_rows_;
    queued_rows_ += request.rows;
    queue_.push_back(std::move(request));
  }
  if (wake) changed_.notify_all();
}

// Note [When a batch is due]
// Taking the longest FIFO prefix that fits, a batch cannot grow once the queue
// holds max_batch rows (later requests queue behind the prefix), so it is due
// then; otherwise it is due when the oldest request has waited max_wait, or
// when the queue is closed (draining never waits). The deadline belongs to
// the request at the front, so a request waits at most max_wait for its batch
// to fill, plus the time the worker is busy with earlier batches.
bool RequestQueue::batch_due(Clock::time_point now) const {
  if (queue_.empty()) return false;
  return closed_ || queued_rows_ >= max_batch_rows_ || now >= queue_.front().submitted + max_wait_;
}

std::vector<PendingRequest> RequestQueue::take_batch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (queue_.empty()) {
      if (closed_) return {};
      changed_.wait(lock);
      continue;
    }
    Clock::time_point now = Clock::now();
    if (batch_due(now)) break;
    changed_.wait_until(lock, queue_.front().submitted + max_wait_);
  }
  std::vector<PendingRequest> batch = take_prefix_locked();
  lock.unlock();
  // Another worker may find the next batch due already.
  if (!batch.empty()) changed_.notify_all();
  return batch;
}

std::vector<PendingRequest> RequestQueue::take_due_batch() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!batch_due(Clock::now())) return {};
  std::vector<PendingRequest> batch = take_prefix_locked();
  lock.unlock();
  changed_.notify_all();
  return batch;
}

// Note [A batch taken in one move]
// The worker takes a batch under the queue's mutex, which every front thread
// needs to push: growing the batch a request at a time moved each request
// again at every doubling (about two moves per request, 64 requests of some
// 250 bytes), all while the fronts waited. So the prefix is measured first,
// the batch reserved once, and each request moved once. GROVE_SERVING_CONTENDED=1
// takes it as before (the A/B of session 23). Tests: RequestQueue.* (FIFO
// prefixes that fit, in order).
std::vector<PendingRequest> RequestQueue::take_prefix_locked() {
  std::vector<PendingRequest> batch;
  int64_t rows = 0;
  if (!locked_as_before_) {
    size_t count = 0;
    for (const PendingRequest& request : queue_) {
      if (rows + request.rows > max_batch_rows_) break;
      rows += request.rows;
      ++count;
    }
    batch.reserve(count);
    const auto end = queue_.begin() + static_cast<std::ptrdiff_t>(count);
    std::move(queue_.begin(), end, std::back_inserter(batch));
    queue_.erase(queue_.begin(), end);
    queued_rows_ -= rows;
    return batch;
  }
  while (!queue_.empty() && rows + queue_.front().rows <= max_batch_rows_) {
    rows += queue_.front().rows;
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  queued_rows_ -= rows;
  return batch;
}

void RequestQueue::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

std::vector<PendingRequest> RequestQueue::close_and_take_all() {
  std::vector<PendingRequest> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    all.reserve(queue_.size());
    for (PendingRequest& request : queue_) all.push_back(std::move(request));
    queue_.clear();
    queued_rows_ = 0;
  }
  changed_.notify_all();
  return all;
}

size_t RequestQueue::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

bool RequestQueue::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

}  // namespace grove::serving
