// AnswerRelay hands a front's answers on from the batching worker's thread:
// the worker posts each answer's hand-off (here: a post to a connection's
// event loop) and returns, and the relay's own thread makes the hand-offs, so
// the worker wakes at most one thread per burst of answers (Note [Answers
// handed on by a relay]).
//
//   AnswerRelay relay;                              // starts its thread
//   relay.post([inbox, answer] { inbox->post(answer); });  // any thread
#pragma once

#include <functional>
#include <memory>

#include "serving/handoff_thread.h"
#include "serving/http_answer_inbox.h"

namespace grove::serving {

class AnswerRelay {
 public:
  AnswerRelay();
  // Runs every hand-off posted before it, then ends the thread.
  ~AnswerRelay();
  AnswerRelay(const AnswerRelay&) = delete;
  AnswerRelay& operator=(const AnswerRelay&) = delete;

  // Any thread: runs `hand_on` on the relay's thread, after those posted before it.
  void post(std::function<void()> hand_on);
  // The same for inbox.post(taker), without a function to allocate (Note [An
  // answer handed on without allocations]).
  void post(AnswerInbox& inbox, std::shared_ptr<AnswerTaker> taker);

 private:
  // A hand-off: `hand_on`, or a post of `taker` to `inbox`.
  struct HandOff {
    std::function<void()> hand_on;
    AnswerInbox* inbox = nullptr;
    std::shared_ptr<AnswerTaker> taker;
  };
  HandoffThread<HandOff> thread_;
};

}  // namespace grove::serving
