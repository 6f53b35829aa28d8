// RequestReaper delivers answered requests' answers and frees the requests on
// a thread of its own, so that the batching worker, the server's busiest
// thread, hands a whole batch over under one lock instead of setting each
// request's future, calling its on_ready and freeing its rows, callbacks and
// buffers itself (Note [Answered requests freed off the worker], Note
// [Answers delivered off the worker]).
//
//   RequestReaper reaper;                   // starts its thread
//   reaper.hand(std::move(batch.requests)); // any thread; freed later
#pragma once

#include <vector>

#include "serving/handoff_thread.h"
#include "serving/request.h"

namespace grove::serving {

class RequestReaper {
 public:
  RequestReaper();
  // Frees every request handed over, then ends the thread.
  ~RequestReaper();
  RequestReaper(const RequestReaper&) = delete;
  RequestReaper& operator=(const RequestReaper&) = delete;

  // Any thread: each of `requests` gets its answer (deliver_answer: its
  // response or error, if it holds one) and is freed, on the reaper's thread,
  // in order, after those handed over before them.
  void hand(std::vector<PendingRequest> requests);

 private:
  HandoffThread<std::vector<PendingRequest>> thread_;
};

}  // namespace grove::serving
