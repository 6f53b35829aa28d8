// HandoffThread<Item> consumes items that any thread hands over, in order, on
// a thread of its own, waking that thread only when it sleeps: a burst of
// hand-overs costs the handing thread one lock each and at most one wake-up.
// The request reaper (Note [Answered requests freed off the worker]) and the
// answer relay (Note [Answers handed on by a relay]) are its two uses.
//
//   HandoffThread<Job> jobs("grove-jobs", [](std::vector<Job>& taken) {
//     for (Job& job : taken) job.run();   // the items taken at once, in order
//   });
//   jobs.hand(std::move(job));            // any thread
#pragma once

#include <pthread.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace grove::serving {

template <typename Item>
class HandoffThread {
 public:
  // Called on the thread with the items taken at once, in hand-over order;
  // they are destroyed after it returns.
  using Consume = std::function<void(std::vector<Item>& taken)>;

  // `name`: the thread's name (at most 15 characters, as Linux allows).
  HandoffThread(const char* name, Consume consume)
      : name_(name), consume_(std::move(consume)), thread_([this] { run(); }) {}
  // Consumes every item handed over, then ends the thread.
  ~HandoffThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  HandoffThread(const HandoffThread&) = delete;
  HandoffThread& operator=(const HandoffThread&) = delete;

  // Any thread: `item` is consumed on the thread, after those handed over before it.
  void hand(Item item) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      waiting_.push_back(std::move(item));
      wake = sleeping_;
      sleeping_ = false;
    }
    if (wake) wake_.notify_one();
  }

 private:
  void run() {
    pthread_setname_np(pthread_self(), name_);
    std::vector<Item> taken;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        while (waiting_.empty() && !stopping_) {
          sleeping_ = true;
          wake_.wait(lock);
        }
        sleeping_ = false;
        if (waiting_.empty()) return;  // stopping, and everything handed over is consumed
        taken.swap(waiting_);
      }
      consume_(taken);
      taken.clear();
    }
  }

  const char* name_;
  Consume consume_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Item> waiting_;
  bool sleeping_ = false;  // the thread waits on wake_ and no hand() has woken it yet
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace grove::serving
