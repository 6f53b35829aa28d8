#include "runtime/sim/stream_worker.h"

#include <utility>

namespace grove::runtime::sim {

StreamWorker::StreamWorker() : thread_([this] { run(); }) {}

StreamWorker::~StreamWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  thread_.join();
}

uint64_t StreamWorker::enqueue(std::function<void()> task) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
    ticket = ++submitted_;
  }
  queued_.notify_one();
  return ticket;
}

uint64_t StreamWorker::last_ticket() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return submitted_;
}

void StreamWorker::wait_for(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [&] { return completed_ >= ticket; });
}

std::exception_ptr StreamWorker::take_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(error_, nullptr);
}

void StreamWorker::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    queued_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, and everything queued has run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error != nullptr && error_ == nullptr) error_ = error;
    ++completed_;
    finished_.notify_all();
  }
}

}  // namespace grove::runtime::sim
