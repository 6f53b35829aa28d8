// RequestReaper frees answered requests on a thread of its own, so that the
// batching worker, the server's busiest thread, hands a whole batch over
// under one lock instead of freeing each request's rows, callbacks and
// buffers itself (Note [Answered requests freed off the worker]).
//
//   RequestReaper reaper;                   // starts its thread
//   reaper.hand(std::move(batch.requests)); // any thread; freed later
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "serving/request.h"

namespace grove::serving {

class RequestReaper {
 public:
  RequestReaper();
  // Frees every request handed over, then ends the thread.
  ~RequestReaper();
  RequestReaper(const RequestReaper&) = delete;
  RequestReaper& operator=(const RequestReaper&) = delete;

  // Any thread: `requests` (answered: every promise set) are freed on the
  // reaper's thread, after those handed over before them.
  void hand(std::vector<PendingRequest> requests);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::vector<PendingRequest>> waiting_;
  bool sleeping_ = false;  // the thread waits on wake_ and no hand() has woken it yet
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace grove::serving
